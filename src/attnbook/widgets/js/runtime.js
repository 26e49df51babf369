// attnbook widget runtime: reads a widget's controls, calls its compute(), draws its SVG.
// Plain ES2017, no dependencies and no network, so a static page stays live offline.
// Loading this file only defines functions; nothing touches the DOM until mount().
(function (g) {
  const ab = (g.attnbook = g.attnbook || {});
  ab.widgets = ab.widgets || {};

  ab.esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);

  // Numbers shown to readers: fixed significant digits, no "-0".
  ab.fmt = (x, digits = 4) => {
    if (!Number.isFinite(x)) return String(x);
    const v = Number(x.toPrecision(digits));
    return Object.is(v, -0) ? "0" : String(v);
  };

  // A linear map from [d0, d1] to [r0, r1] (SVG pixels).
  ab.scale = (d0, d1, r0, r1) => (x) => r0 + ((x - d0) / (d1 - d0 || 1)) * (r1 - r0);

  ab.el = (tag, attrs, inner = "") => {
    const a = Object.entries(attrs).map(([k, v]) => `${k}="${ab.esc(v)}"`).join(" ");
    return `<${tag} ${a}>${inner}</${tag}>`;
  };
  ab.text = (x, y, s, extra = {}) =>
    ab.el("text", Object.assign({ x, y, "font-size": 12, fill: "#222" }, extra), ab.esc(s));

  // Axes box with a title and axis labels; returns the SVG string of the frame.
  ab.frame = (p, title, xlabel, ylabel) =>
    ab.el("line", { x1: p.x0, y1: p.y1, x2: p.x1, y2: p.y1, stroke: "#444" }) +
    ab.el("line", { x1: p.x0, y1: p.y0, x2: p.x0, y2: p.y1, stroke: "#444" }) +
    ab.text((p.x0 + p.x1) / 2, p.y0 - 8, title, { "text-anchor": "middle", "font-weight": "bold" }) +
    ab.text((p.x0 + p.x1) / 2, p.y1 + 30, xlabel, { "text-anchor": "middle" }) +
    ab.text(p.x0 - 38, (p.y0 + p.y1) / 2, ylabel,
      { "text-anchor": "middle", transform: `rotate(-90 ${p.x0 - 38} ${(p.y0 + p.y1) / 2})` });

  ab.svg = (w, h, inner, label) =>
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${w} ${h}" width="100%" ` +
    `style="max-width:${w}px" role="img" aria-label="${ab.esc(label)}">${inner}</svg>`;

  function readParams(form) {
    const params = {};
    for (const input of form.querySelectorAll("[name][data-type]")) {
      const t = input.dataset.type;
      if (t === "bool") params[input.name] = input.checked;
      else if (t === "int") params[input.name] = parseInt(input.value, 10);
      else if (t === "float") params[input.name] = parseFloat(input.value);
      else params[input.name] = input.value;
      const out = form.querySelector(`output[name="${input.name}-out"]`);
      if (out) out.textContent = input.value;
    }
    return params;
  }

  // Wire a rendered widget root: every input event recomputes and redraws.
  ab.mount = (root, name, config) => {
    const widget = ab.widgets[name];
    const form = root.querySelector("form");
    const view = root.querySelector(".attnbook-view");
    const readout = root.querySelector(".attnbook-readout");
    const note = root.querySelector(".attnbook-live-note");
    if (note && note.dataset.live) note.textContent = note.dataset.live; // the script runs
    // JupyterLab uses arrow keys for cell navigation; keep them for the sliders.
    root.addEventListener("keydown", (e) => e.stopPropagation());
    const redraw = () => {
      const params = Object.assign({}, config.params, readParams(form));
      try {
        const state = widget.compute(params, config.data);
        view.innerHTML = widget.render(state, params);
        readout.textContent = widget.readout(state, params);
        root.dataset.state = JSON.stringify(state);
        root.dataset.error = "";
      } catch (err) {
        // An impossible combination: say why, keep the last picture.
        readout.textContent = String(err.message || err);
        root.dataset.error = readout.textContent;
      }
    };
    form.addEventListener("input", redraw);
    form.addEventListener("change", redraw);
    redraw();
  };
})(globalThis);
