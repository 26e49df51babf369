# JupyterLab for readers (loaded through JUPYTER_CONFIG_PATH by scripts/lab.py and binder/start).
#
# Widget round trips: jupyter_server never turns off Nagle's algorithm on the kernel
# websocket, so a small message written while the browser's delayed ACK (40 ms on Linux) is
# pending waits for it. A widget update is a burst of small messages (busy, comm_msg, idle),
# and Python's answer to a slider move reached the screen ~40 ms late. TCP_NODELAY on that
# socket sends each message at once (benchmarks/widget_latency.py measures the effect).
from jupyter_server.services.kernels.websocket import KernelWebsocketHandler

_open = KernelWebsocketHandler.open


async def _open_without_nagle(self, *args, **kwargs):
    self.set_nodelay(True)
    return await _open(self, *args, **kwargs)


if not getattr(KernelWebsocketHandler.open, "attnbook_nodelay", False):
    _open_without_nagle.attnbook_nodelay = True
    KernelWebsocketHandler.open = _open_without_nagle

# Saving never leaves a widget output pointing at a model the file lacks (which reopens as
# "Error displaying widget: model not found"): see jupyter/widget_views.py.
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from widget_views import pre_save_hook  # noqa: E402

c.ContentsManager.pre_save_hook = pre_save_hook  # noqa: F821  (c: the config object)
