// attnbook widget runtime: builds nothing itself; wires a widget's markup (made by Python,
// identical in both faces) to its compute() and render(), and, in a kernel, to Python.
// Plain ES2020, no dependencies and no network, so a static page stays live offline.
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
  ab.plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

  // A linear map from [d0, d1] to [r0, r1] (SVG pixels).
  ab.scale = (d0, d1, r0, r1) => (x) => r0 + ((x - d0) / (d1 - d0 || 1)) * (r1 - r0);

  // About `count` round tick values covering [lo, hi].
  ab.ticks = (lo, hi, count = 5) => {
    const span = hi - lo;
    if (!(span > 1e-9 * Math.max(1, Math.abs(lo), Math.abs(hi)))) return [Number(lo.toPrecision(6))];
    const raw = span / Math.max(1, count), mag = 10 ** Math.floor(Math.log10(raw));
    const step = [1, 2, 2.5, 5, 10].map((f) => f * mag).find((s) => s >= raw) || 10 * mag;
    const out = [];
    for (let i = Math.ceil(lo / step - 1e-9); i <= Math.floor(hi / step + 1e-9) && out.length < 50; i++)
      out.push(Number((i * step).toPrecision(12)));
    return out;
  };

  // Text is drawn in the page's own colour (currentColor), so a widget belongs to a dark page
  // as well as to a light one; colour is carried by marks, never by text.
  ab.el = (tag, attrs, inner = "") => {
    const a = Object.entries(attrs).map(([k, v]) => `${k}="${ab.esc(v)}"`).join(" ");
    return `<${tag} ${a}>${inner}</${tag}>`;
  };
  ab.FONT = 12; // px; every drawing is laid out at scale 1, so this is the size on screen
  ab.SMALL = 11; // tick labels: never below 10 px
  ab.text = (x, y, s, extra = {}) =>
    ab.el("text", Object.assign({ x, y, "font-size": ab.FONT, fill: "currentColor" }, extra), ab.esc(s));
  // Rough width of a string in px (for layout decisions only; 0.6 em per character).
  ab.textWidth = (s, size = ab.FONT) => 0.6 * size * String(s).length;
  ab.line = (x1, y1, x2, y2, extra = {}) =>
    ab.el("line", Object.assign({ x1, y1, x2, y2, stroke: "currentColor" }, extra));

  // Split a title into lines no wider than `width` px (at the title's font size).
  ab.wrap = (s, width, size = ab.FONT) => {
    const words = String(s).split(" "), lines = [];
    let cur = "";
    for (const w of words) {
      const next = cur ? `${cur} ${w}` : w;
      if (cur && ab.textWidth(next, size) > width) { lines.push(cur); cur = w; } else cur = next;
    }
    if (cur) lines.push(cur);
    return lines;
  };

  // Axes box with a title (wrapped to at most two lines above the box) and axis labels.
  ab.frame = (p, title, xlabel, ylabel) => {
    const cx = (p.x0 + p.x1) / 2;
    const room = Math.max(80, p.x1 - p.x0 + 2 * Math.min(p.x0 - (p.left ?? 0), 40));
    const lines = ab.wrap(title, room).slice(0, 2);
    let out = ab.line(p.x0, p.y1, p.x1, p.y1, { opacity: 0.75 }) + ab.line(p.x0, p.y0, p.x0, p.y1, { opacity: 0.75 });
    lines.forEach((l, i) => {
      out += ab.text(cx, p.y0 - 8 - (lines.length - 1 - i) * 15, l, { "text-anchor": "middle", "font-weight": "bold", class: "title" });
    });
    if (xlabel) out += ab.text(cx, p.y1 + 32, xlabel, { "text-anchor": "middle" });
    if (ylabel) {
      const yx = p.x0 - 42, yy = (p.y0 + p.y1) / 2;
      out += ab.text(yx, yy, ylabel, { "text-anchor": "middle", transform: `rotate(-90 ${yx} ${yy})` });
    }
    return out;
  };
  ab.xticks = (p, values, x, label = (v) => ab.fmt(v, 3)) =>
    values.map((v) => ab.line(x(v), p.y1, x(v), p.y1 + 4, { opacity: 0.75 }) +
      ab.text(x(v), p.y1 + 16, label(v), { "text-anchor": "middle", "font-size": ab.SMALL })).join("");
  ab.yticks = (p, values, y, label = (v) => ab.fmt(v, 3)) =>
    values.map((v) => ab.line(p.x0 - 4, y(v), p.x0, y(v), { opacity: 0.75 }) +
      ab.text(p.x0 - 7, y(v) + 4, label(v), { "text-anchor": "end", "font-size": ab.SMALL })).join("");

  // Panels for a drawing `width` px wide: side by side when each gets `minPanel` px, else
  // stacked. Returns the drawing size and each panel's plot box (with its cell's left edge).
  ab.panels = (width, n, opts = {}) => {
    const W = Math.max(260, Math.floor(width || 640));
    const m = Object.assign({ left: 62, right: 16, top: 44, bottom: 50, height: 180, gap: 16, minPanel: 300 }, opts);
    const cols = n > 1 && W >= n * m.minPanel + (n - 1) * m.gap ? n : 1;
    const cellW = (W - (cols - 1) * m.gap) / cols, cellH = m.top + m.height + m.bottom;
    const boxes = [];
    for (let i = 0; i < n; i++) {
      const x = (i % cols) * (cellW + m.gap), y = Math.floor(i / cols) * cellH;
      boxes.push({ left: x, x0: x + m.left, x1: x + cellW - m.right, y0: y + m.top, y1: y + m.top + m.height });
    }
    return { W, H: Math.ceil(n / cols) * cellH, boxes, stacked: cols === 1 && n > 1 };
  };

  ab.svg = (w, h, inner, label) =>
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${w} ${h}" width="${w}" height="${h}" ` +
    `role="img" aria-label="${ab.esc(label)}">${inner}</svg>`;

  // ---- comparing a JavaScript prediction with Python's state ------------------------------
  // {same, maxDiff}: same structure, numbers within 1e-9 relative (1e-12 absolute).
  ab.compare = (a, b) => {
    let maxDiff = 0, same = true;
    const walk = (x, y) => {
      if (typeof y === "number" || typeof x === "number") {
        if (typeof x !== "number" || typeof y !== "number") { same = false; return; }
        if (x === y) return;
        const d = Math.abs(x - y);
        if (!Number.isFinite(d)) { same = false; return; }
        maxDiff = Math.max(maxDiff, d);
        if (d > 1e-12 + 1e-9 * Math.max(Math.abs(x), Math.abs(y))) same = false;
      } else if (Array.isArray(y)) {
        if (!Array.isArray(x) || x.length !== y.length) { same = false; return; }
        y.forEach((v, i) => walk(x[i], v));
      } else if (y && typeof y === "object") {
        if (!x || typeof x !== "object") { same = false; return; }
        const kx = Object.keys(x).filter((k) => !k.startsWith("_")).sort();
        const ky = Object.keys(y).filter((k) => !k.startsWith("_")).sort();
        if (kx.join() !== ky.join()) { same = false; return; }
        ky.forEach((k) => walk(x[k], y[k]));
      } else if (x !== y && !(x === undefined && y === null)) same = false;
    };
    walk(JSON.parse(JSON.stringify(a)), b);
    return { same, maxDiff };
  };

  // ---- the form --------------------------------------------------------------------------
  // The box beside a slider shows its value (and takes a typed one: see typedBoxes).
  const showValue = (form, input) => {
    const out = form.querySelector(`[name="${input.name}-out"]`);
    if (out && out !== g.document?.activeElement) out.value = input.value;
  };
  // A typed value moves its slider (the slider snaps it to its step and range) once the
  // reader commits it (Enter or leaving the box); keystrokes themselves redraw nothing.
  function typedBoxes(form) {
    const off = [];
    for (const box of form.querySelectorAll("input.attnbook-typed")) {
      const slider = form.querySelector(`input[type=range][name="${box.name.slice(0, -4)}"]`);
      if (!slider) continue;
      const hold = (e) => e.stopPropagation();
      const commit = (e) => {
        e.stopPropagation();
        const typed = box.value.trim() === "" ? NaN : Number(box.value);
        if (Number.isFinite(typed)) {
          slider.value = String(typed);
          slider.dispatchEvent(new Event("input", { bubbles: true }));
        }
        box.value = slider.value; // what the slider took
      };
      box.addEventListener("input", hold);
      box.addEventListener("change", commit);
      off.push(() => { box.removeEventListener("input", hold); box.removeEventListener("change", commit); });
    }
    return () => off.forEach((f) => f());
  }
  // A finger on a slider moves it from the first pixel: the browser's own range input waits
  // for a drag to leave its tap slop (15-20 px) before it follows. The slider allows vertical
  // panning (touch-action: pan-y), so a vertical swipe that starts on it still scrolls.
  function fingerSliders(form) {
    const off = [];
    for (const slider of form.querySelectorAll("input[type=range]")) {
      let active = null;
      const place = (e) => {
        const r = slider.getBoundingClientRect(), thumb = Math.min(16, r.width / 4);
        const min = Number(slider.min), max = Number(slider.max);
        const f = Math.min(1, Math.max(0, (e.clientX - r.left - thumb / 2) / Math.max(1, r.width - thumb)));
        const before = slider.value;
        slider.value = String(min + f * (max - min)); // the slider snaps it to its step
        if (slider.value !== before) slider.dispatchEvent(new Event("input", { bubbles: true }));
      };
      const down = (e) => {
        if (e.pointerType === "mouse" || slider.disabled) return;
        active = e.pointerId;
        try { slider.setPointerCapture(e.pointerId); } catch (err) { /* not capturable */ }
        place(e);
      };
      const move = (e) => { if (e.pointerId === active) { e.preventDefault(); place(e); } };
      const up = (e) => {
        if (e.pointerId !== active) return;
        active = null;
        slider.dispatchEvent(new Event("change", { bubbles: true }));
      };
      const cancel = (e) => { if (e.pointerId === active) active = null; };
      const handlers = { pointerdown: down, pointermove: move, pointerup: up, pointercancel: cancel };
      for (const [k, f] of Object.entries(handlers)) slider.addEventListener(k, f);
      off.push(() => { for (const [k, f] of Object.entries(handlers)) slider.removeEventListener(k, f); });
    }
    return () => off.forEach((f) => f());
  }
  // Static face inside a notebook front end (a stored output before its cell is run)?
  const inNotebook = () => {
    const body = g.document && g.document.body;
    return Boolean((body && body.hasAttribute("data-jp-theme-name")) || g.Jupyter ||
      (g.google && g.google.colab));
  };
  function readParams(form) {
    const params = {};
    for (const input of form.querySelectorAll("[name][data-type]")) {
      const t = input.dataset.type;
      if (t === "bool") params[input.name] = input.checked;
      else if (t === "int") params[input.name] = parseInt(input.value, 10);
      else if (t === "float") params[input.name] = parseFloat(input.value);
      else params[input.name] = input.value;
      showValue(form, input);
    }
    return params;
  }
  function writeParams(form, params) {
    for (const input of form.querySelectorAll("[name][data-type]")) {
      if (!(input.name in params)) continue;
      const v = params[input.name];
      if (input.dataset.type === "bool") input.checked = Boolean(v);
      else input.value = String(v);
      showValue(form, input);
    }
  }
  // A slider whose range follows the state (data-max-from="n_blocks"): set its max.
  function applyLimits(form, state) {
    for (const input of form.querySelectorAll("[data-max-from]")) {
      const max = state[input.dataset.maxFrom];
      if (typeof max !== "number") continue;
      input.max = String(max);
      if (Number(input.value) > max) input.value = String(max);
      showValue(form, input);
    }
  }

  // Wire a widget root (the markup Python wrote). Every input event computes the state in
  // JavaScript and draws it at once; with a `kernel` link the parameters then go to Python,
  // whose answer (state or error) is drawn when it arrives and checked against the
  // prediction (root.dataset.agree / maxDiff / checked / disagreements).
  ab.mount = (root, name, config, kernel) => {
    const widget = ab.widgets[name];
    const form = root.querySelector("form");
    const view = root.querySelector(".attnbook-view");
    const readout = root.querySelector(".attnbook-readout");
    const note = root.querySelector(".attnbook-live-note");
    // The script runs: say what answers the controls here. The kernel face says Python
    // recomputes only once Python has answered (its ping at mount, or any reply).
    const say = (key) => { if (note && note.dataset[key]) { note.textContent = note.dataset[key]; root.dataset.note = key; } };
    say(kernel ? "saved" : inNotebook() && note && note.dataset.notebook ? "notebook" : "live");
    // JupyterLab uses arrow keys for cell navigation; keep them for the sliders.
    const stop = (e) => e.stopPropagation();
    root.addEventListener("keydown", stop);
    let width = 0, shown = null, sent = 0, checked = 0, disagreements = 0;
    const predictions = new Map(); // seq -> {state} or {error}

    const measure = () => Math.floor(view.clientWidth || root.clientWidth || 640);
    const draw = (state, source, seq) => {
      width = measure();
      view.innerHTML = widget.render(state, width);
      const svg = view.querySelector("svg");
      if (svg) { svg.dataset.source = source; svg.dataset.seq = String(seq); }
      readout.textContent = widget.readout(state);
      readout.classList.remove("attnbook-error");
      readout.removeAttribute("role");
      root.dataset.state = JSON.stringify(state);
      root.dataset.error = "";
      root.dataset.seq = String(seq);
      root.dataset.source = source;
      shown = state;
      applyLimits(form, state);
    };
    const fail = (message) => { // an impossible setting: say why, keep the last picture
      readout.textContent = message;
      readout.classList.add("attnbook-error");
      readout.setAttribute("role", "alert");
      root.dataset.error = message;
    };
    const predict = (params, seq) => {
      try {
        const state = widget.compute(params, config.data);
        predictions.set(seq, { state });
        draw(state, "local", seq);
      } catch (err) {
        predictions.set(seq, { error: String(err.message || err) });
        fail(String(err.message || err));
      }
      if (predictions.size > 256) predictions.delete(predictions.keys().next().value);
    };
    const onInput = () => {
      const params = Object.assign({}, config.params, readParams(form));
      sent = Math.max(sent, kernel ? kernel.seq() : 0) + 1;
      predict(params, sent);
      if (kernel) kernel.send(params, sent);
    };
    form.addEventListener("input", onInput);
    form.addEventListener("change", onInput);
    const unTyped = typedBoxes(form), unFinger = fingerSliders(form);

    // Python's answer to request `seq`: record agreement; draw it unless a newer request is out.
    const answer = (seq, state, error, params) => {
      const mine = predictions.get(seq);
      if (mine && seq > 0 && seq <= sent) say("kernel"); // Python answered a request of ours
      if (mine) {
        const verdict = mine.state && state && !error ? ab.compare(mine.state, state)
          : { same: Boolean(mine.error && error), maxDiff: 0 };
        checked += 1;
        disagreements += verdict.same ? 0 : 1;
        Object.assign(root.dataset, { agree: String(verdict.same), maxDiff: String(verdict.maxDiff),
          checked: String(checked), disagreements: String(disagreements), pythonSeq: String(seq) });
      }
      if (seq < sent) return; // stale: the reader has moved on and that frame is drawn
      sent = seq;
      if (params && !mine) writeParams(form, params); // a change made from Python
      if (error) fail(error);
      else if (state) draw(state, "python", seq);
    };

    // First picture: Python's saved state if there is one (a kernel face, maybe reopened with
    // no kernel), else the JavaScript's own.
    const first = kernel && kernel.state();
    const start = Object.assign({}, config.params, (kernel && kernel.params()) || {});
    const start_seq = kernel ? kernel.seq() : 0;
    try {
      applyLimits(form, first || widget.compute(start, config.data));
    } catch (err) { /* drawn as an error below */ }
    writeParams(form, start);
    if (first) {
      try { predictions.set(start_seq, { state: widget.compute(start, config.data) }); }
      catch (err) { predictions.set(start_seq, { error: String(err.message || err) }); }
      answer(start_seq, first, kernel.error(), null);
    } else predict(start, start_seq);

    // Lay the drawing out again whenever the width it gets changes (phone, sidebar, resize).
    let observer = null;
    if (g.ResizeObserver) {
      observer = new g.ResizeObserver(() => {
        if (shown && measure() !== width) {
          const svg = view.querySelector("svg");
          const source = svg ? svg.dataset.source : "local", seq = svg ? svg.dataset.seq : "0";
          view.innerHTML = widget.render(shown, (width = measure()));
          const again = view.querySelector("svg");
          if (again) { again.dataset.source = source; again.dataset.seq = seq; again.dataset.resized = "1"; }
        }
      });
      observer.observe(view);
    }
    return {
      answer,
      dispose() {
        if (observer) observer.disconnect();
        form.removeEventListener("input", onInput);
        form.removeEventListener("change", onInput);
        root.removeEventListener("keydown", stop);
        unTyped();
        unFinger();
      },
      pythonAnswered: () => say("kernel"),
    };
  };

  // The kernel face: anywidget's render({model, el}). The markup and the declarations come in
  // traits; "params" goes to Python with a request number "_seq"; Python answers by setting
  // "state" (echoing "_seq"), "error" and "seq" in one message.
  ab.kernelView = (model, el, name) => {
    el.innerHTML = model.get("markup");
    const root = el.querySelector(".attnbook-widget");
    const config = Object.assign({}, model.get("config"), { params: model.get("params") });
    const clean = (s) => { const o = Object.assign({}, s); delete o._seq; return o; };
    const kernel = {
      seq: () => model.get("seq") || 0,
      state: () => { const s = model.get("state"); return s && Object.keys(s).length ? clean(s) : null; },
      params: () => clean(model.get("params") || {}),
      error: () => model.get("error") || "",
      send(params, seq) {
        try { model.set("params", Object.assign({}, params, { _seq: seq })); model.save_changes(); }
        catch (err) { /* no kernel (a saved notebook): the JavaScript frame stands */ }
      },
    };
    const mounted = ab.mount(root, name, config, kernel);
    let queued = false;
    const onAnswer = () => { // only Python changes these traits once the view is up
      mounted.pythonAnswered();
      if (queued) return;
      queued = true;
      queueMicrotask(() => {
        queued = false;
        const state = model.get("state") || {};
        mounted.answer(model.get("seq") || 0, Object.keys(state).length ? clean(state) : null,
          model.get("error") || "", clean(model.get("params") || {}));
      });
    };
    model.on("change:seq", onAnswer);
    model.on("change:state", onAnswer);
    model.on("change:error", onAnswer);
    // Is a kernel holding this model? Python answers a ping with a pong (a custom message
    // changes no trait). With no kernel the message goes nowhere and the note stays "saved".
    const onMessage = (content) => { if (content && content.type === "pong") mounted.pythonAnswered(); };
    model.on("msg:custom", onMessage);
    try { if (model.send) model.send({ type: "ping" }); } catch (err) { /* no kernel */ }
    return () => {
      model.off("msg:custom", onMessage);
      model.off("change:seq", onAnswer);
      model.off("change:state", onAnswer);
      model.off("change:error", onAnswer);
      mounted.dispose();
    };
  };
})(globalThis);
