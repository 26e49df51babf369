"""Site tweaks for the book that Jupyter Book 1.x has no setting for.

* Drop sphinx-thebe's scripts. Jupyter Book always loads the extension, even with
  ``launch_buttons.thebe: false``; its inline configuration is added twice, which throws
  "Identifier 'THEBE_JS_URL' has already been declared" on every page, and it names a CDN.
  The book offers Colab, Binder and JupyterLab instead of in-page execution.
"""

from __future__ import annotations


def _drop_thebe(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files", [])
    kept = []
    for script in scripts:
        filename = str(getattr(script, "filename", script) or "")
        body = str(getattr(script, "attributes", {}).get("body", ""))
        if "sphinx-thebe" in filename or "THEBE_JS_URL" in body:
            continue
        kept.append(script)
    context["script_files"] = kept


def setup(app):
    app.connect("html-page-context", _drop_thebe)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
