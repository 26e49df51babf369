"""KV-cache calculator: bytes of cached keys and values for MHA, your GQA setting and MQA."""

from __future__ import annotations

from attnbook._checks import require_integral
from attnbook.costs import kv_cache_bytes
from attnbook.widgets._live import Control, LiveWidget, WidgetSpec

__all__ = ["BYTES_PER_ELEMENT", "SPEC", "human_bytes", "kv_cache_calculator", "kv_cache_state"]

# Bytes per stored number for the cache dtypes offered (one definition, shared with the JS).
BYTES_PER_ELEMENT = {"float32": 4, "bfloat16": 2, "float16": 2, "float8": 1}
# Every byte count stays below 2**53 for all control values (the largest is 2**48), so the
# JavaScript twin multiplies plain Numbers exactly; it also checks this at run time.
MAX_EXACT = 2**53 - 1


def _kind(q_heads: int, kv_heads: int) -> str:
    if kv_heads == q_heads:
        return "MHA"
    return "MQA" if kv_heads == 1 else "GQA"


def kv_cache_state(
    *,
    layers: int,
    positions: int,
    q_heads: int,
    kv_heads: int,
    head_dim: int,
    dtype: str,
    batch: int = 1,
) -> dict:
    """Everything the calculator shows for one setting.

    Args:
        layers: ``L``; positions: cached tokens ``T`` per sequence; batch: sequences ``B``.
        q_heads: ``Hq``; kv_heads: ``Hkv``, which must divide ``Hq`` (equal groups).
        head_dim: ``dk = dv``; dtype: a key of :data:`BYTES_PER_ELEMENT`.

    Returns:
        A dict with ``positions`` (echoed), ``bytes``, its :func:`human_bytes` ``label`` and
        ``elements`` for this setting, its
        ``kind`` (MHA, GQA or MQA), ``group_size`` (query heads per KV head), ``ratio_to_mha``
        and ``variants``: the bytes (exact ints) and labels of MHA (``Hkv = Hq``), this
        setting and MQA (``Hkv = 1``). Whole-number floats (``4096.0``) count as ints.

    Raises:
        ValueError: ``kv_heads`` does not divide ``q_heads``, an unknown ``dtype``, a size
            below 1 or with a fractional part (``70.5``), naming the argument.
        TypeError: a size that is not a number.
    """
    if not isinstance(dtype, str) or dtype not in BYTES_PER_ELEMENT:
        raise ValueError(f"dtype must be one of {sorted(BYTES_PER_ELEMENT)}, got {dtype!r}")
    layers, positions, q_heads, kv_heads, head_dim, batch = (
        require_integral(name, value, minimum=1)
        for name, value in (
            ("layers", layers),
            ("positions", positions),
            ("q_heads", q_heads),
            ("kv_heads", kv_heads),
            ("head_dim", head_dim),
            ("batch", batch),
        )
    )
    if q_heads % kv_heads:
        valid = ", ".join(str(h) for h in range(1, q_heads + 1) if q_heads % h == 0)
        raise ValueError(
            f"{kv_heads} KV heads cannot serve {q_heads} query heads: each KV head "
            f"serves an equal group (Hq % Hkv == 0); try one of {valid}"
        )
    b = BYTES_PER_ELEMENT[dtype]

    def size(heads: int) -> int:
        return kv_cache_bytes(
            layers=layers,
            positions=positions,
            kv_heads=heads,
            head_dim=head_dim,
            bytes_per_element=b,
            batch=batch,
        )

    variants = [
        {"name": name, "kv_heads": heads, "bytes": size(heads), "label": human_bytes(size(heads))}
        for name, heads in (("MHA", q_heads), ("yours", kv_heads), ("MQA", 1))
    ]
    total = variants[1]["bytes"]
    if variants[0]["bytes"] > MAX_EXACT:
        raise ValueError("this setting needs more than 2**53 bytes; it cannot be shown exactly")
    return {
        "positions": positions,
        "bytes": total,
        "label": human_bytes(total),
        "elements": total // b,
        "bytes_per_element": b,
        "kind": _kind(q_heads, kv_heads),
        "group_size": q_heads // kv_heads,
        "ratio_to_mha": total / variants[0]["bytes"],
        "variants": variants,
    }


_UNITS = (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10))


def human_bytes(n: int) -> str:
    """``n`` bytes in the largest binary unit that is at least 1, exact when it can be.

    ``2**40`` is ``'1 TiB'``, ``3 * 2**29`` is ``'1.5 GiB'``; a value that needs more than three
    decimals in its unit is rounded and marked: ``'≈1.33 KiB'``.
    """
    for unit, power in _UNITS:
        if n >= 2**power:
            if (n * 1000) % 2**power == 0:  # at most three decimals: print it exactly
                text = f"{n / 2**power:.3f}".rstrip("0").rstrip(".")
                return f"{text} {unit}"
            value = n / 2**power
            return f"≈{value:.{2 if value < 10 else 1 if value < 100 else 0}f} {unit}"
    return f"{n} B"


def _unit(n: int) -> tuple[str, int]:
    for unit, power in _UNITS:
        if n >= 2**power:
            return unit, 2**power
    return "B", 1


def _bars(state: dict, ax, title: str) -> None:
    variants = state["variants"]
    unit, per = _unit(variants[0]["bytes"])  # MHA is the largest bar: it sets the unit
    labels = ["MHA", state["kind"], "MQA"]  # the middle bar is the current setting
    names = [f"{label}\nHkv={v['kv_heads']}" for label, v in zip(labels, variants, strict=True)]
    sizes = [v["bytes"] / per for v in variants]
    colours = ["#999999", "#0072B2", "#009E73"]
    ax.barh(names[::-1], sizes[::-1], color=colours[::-1])
    for y, (v, s) in enumerate(zip(variants[::-1], sizes[::-1], strict=True)):
        ax.text(s, y, " " + v["label"], va="center", fontsize=9)
    ax.set_xlim(0, max(sizes) * 1.45)
    ax.set_xlabel(f"KV cache ({unit})")
    ax.set_ylabel("variant")
    ax.set_title(title)


def _per_kv_head(group: int) -> str:
    return f"{group} query head{'' if group == 1 else 's'} per KV head"


def _draw(state: dict, fig) -> None:
    ax = fig.subplots()
    _bars(
        state,
        ax,
        f"{state['kind']}, {_per_kv_head(state['group_size'])}: {state['label']}",
    )


def _panel(state: dict, ax) -> None:
    _bars(state, ax, f"T = {state['positions']:,} positions: {state['label']}")
    ax.title.set_fontsize(10)


SPEC = WidgetSpec(
    name="kv_cache_calculator",
    title="KV-cache calculator: 2·B·L·T·Hkv·dk·b bytes",
    controls=(
        Control("layers", "layers L", "range", 32, min=1, max=128, step=1, integer=True),
        Control(
            "positions",
            "positions T",
            "select",
            4096,
            options=(512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072),
        ),
        Control(
            "q_heads",
            "query heads Hq",
            "select",
            32,
            options=(1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128),
        ),
        Control("kv_heads", "KV heads Hkv", "select", 8, options=(1, 2, 4, 8, 16, 32, 64, 128)),
        Control("head_dim", "head dim dk", "select", 128, options=(32, 64, 80, 96, 128, 256)),
        Control("dtype", "cache dtype", "select", "bfloat16", options=tuple(BYTES_PER_ELEMENT)),
        Control("batch", "sequences B", "range", 1, min=1, max=64, step=1, integer=True),
    ),
    compute=kv_cache_state,
    draw=_draw,
    panel=_panel,
    data={"bytes_per_element": dict(BYTES_PER_ELEMENT)},
)


def kv_cache_calculator(
    *,
    layers: int = 32,
    positions: int = 4096,
    q_heads: int = 32,
    kv_heads: int = 8,
    head_dim: int = 128,
    dtype: str = "bfloat16",
    batch: int = 1,
) -> LiveWidget:
    """Layers, positions, query and KV heads, head dim, dtype and batch in; the cache bytes of
    MHA, your setting and MQA out. See :func:`kv_cache_state`."""
    return LiveWidget(
        SPEC,
        layers=layers,
        positions=positions,
        q_heads=q_heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        dtype=dtype,
        batch=batch,
    )
