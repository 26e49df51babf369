// Online softmax stepper, computed in the browser. Mirrors
// attnbook.widgets.online_softmax.online_softmax_state: the same merges in the same order.
(function (g) {
  const ab = g.attnbook;
  const ORDERS = ["left to right", "right to left"];

  // Sums left to right, like Python's sum() up to 3.11 (bit-identical faces); from 3.12 sum()
  // compensates rounding, so the faces may differ in the last bit, far inside the 1e-9 tests.
  const total = (xs) => xs.reduce((a, b) => a + b, 0);

  function blockState(scores, values) {
    const m = Math.max(...scores);
    const p = scores.map((s) => Math.exp(s - m));
    return [m, total(p), total(p.map((pi, i) => pi * values[i]))];
  }

  function compute(params, data) {
    const { block_size: bs, order } = params;
    const scores = data.scores, values = data.values, n = scores.length;
    if (!Number.isInteger(bs)) throw new Error(`block_size must be a whole number, got ${bs}`);
    if (bs < 1) throw new Error(`block_size must be >= 1, got ${bs}`);
    if (!ORDERS.includes(order)) throw new Error(`order must be one of ${ORDERS}, got ${order}`);
    const blocks = [];
    for (let start = 0; start < n; start += bs) blocks.push([start, Math.min(start + bs, n)]);
    if (order === "right to left") blocks.reverse();
    if (!Number.isInteger(params.step)) throw new Error(`step must be a whole number, got ${params.step}`);
    if (params.step < 0 || params.step > n)
      throw new Error(`step must be a whole number in [0, ${n}], got ${params.step}`);
    const step = Math.min(params.step, blocks.length); // past the last block: finished

    let m = -Infinity, l = 0, u = 0;
    const mTrace = [], lTrace = [], uTrace = [], rescaleTrace = [];
    for (const [start, stop] of blocks) {
      const [mb, lb, ub] = blockState(scores.slice(start, stop), values.slice(start, stop));
      const mNew = Math.max(m, mb);
      const ca = Math.exp(m - mNew), cb = Math.exp(mb - mNew);
      [m, l, u] = [mNew, ca * l + cb * lb, ca * u + cb * ub];
      mTrace.push(m); lTrace.push(l); uTrace.push(u); rescaleTrace.push(ca);
    }
    const outTrace = uTrace.map((ui, i) => ui / lTrace[i]);

    const top = Math.max(...scores);
    const exps = scores.map((s) => Math.exp(s - top));
    const sumExp = total(exps);
    const exactWeights = exps.map((e) => e / sumExp);
    const exact = total(exactWeights.map((w, i) => w * values[i]));

    const seen = scores.map(() => false);
    for (const [start, stop] of blocks.slice(0, step)) for (let j = start; j < stop; j++) seen[j] = true;
    const now = step - 1;
    const mNow = step ? mTrace[now] : null, lNow = step ? lTrace[now] : 0;
    return {
      step, n_blocks: blocks.length, blocks, scores: scores.slice(), values: values.slice(),
      current: step ? blocks[now] : null,
      seen,
      m: mNow, l: lNow,
      u: step ? uTrace[now] : 0,
      out: step ? outTrace[now] : null,
      rescale: step >= 2 ? rescaleTrace[now] : null,
      m_trace: mTrace, l_trace: lTrace, u_trace: uTrace, out_trace: outTrace,
      weights: scores.map((s, j) => (seen[j] ? Math.exp(s - mNow) / lNow : 0)),
      exact, exact_weights: exactWeights, exact_max: top, exact_l: sumExp,
    };
  }

  function render(state, width) {
    const scores = state.scores;
    const { W, H, boxes: [left, right] } = ab.panels(width, 2, { bottom: 84 });
    const lo = Math.min(0, ...scores) - 0.2, hi = Math.max(...scores) + 0.2;
    const y = ab.scale(lo, hi, left.y1, left.y0);
    const bw = (left.x1 - left.x0) / scores.length;
    const [c0, c1] = state.current || [0, 0];
    let out = ab.frame(left, `after ${state.step} of ${state.n_blocks} blocks`,
      "key (orange: just merged; grey: unseen)", "score q·k/√d");
    scores.forEach((s, j) => {
      const fill = c0 <= j && j < c1 ? "#D55E00" : state.seen[j] ? "#0072B2" : "#CCCCCC";
      out += ab.el("rect", { x: left.x0 + j * bw + 1, y: Math.min(y(s), y(0)), width: bw - 2,
        height: Math.abs(y(s) - y(0)), fill, class: "bar", "data-value": s });
    });
    out += ab.yticks(left, ab.ticks(lo, hi, 4), y);
    out += ab.line(left.x0, y(0), left.x1, y(0), { opacity: 0.5 });
    if (state.m !== null)
      out += ab.line(left.x0, y(state.m), left.x1, y(state.m), { "stroke-dasharray": "5 3",
        class: "running-max", "data-value": state.m });
    // The running state as numbers: m (dashed line), l and the factor applied to the old state.
    const stats = state.m === null ? ["nothing merged: m = −∞, ℓ = 0"]
      : [`m = ${ab.fmt(state.m, 4)} (dashed) · ℓ = ${ab.fmt(state.l, 4)}`,
        state.rescale === null ? "first block: nothing to rescale"
          : `old ℓ, u × e^(m_old − m) = ${ab.fmt(state.rescale, 3)}`];
    stats.forEach((t, i) => (out += ab.text(left.left + 4, left.y1 + 54 + i * 15, t, { class: "stats" })));

    const trace = state.out_trace;
    const ylo = Math.min(state.exact, ...trace), yhi = Math.max(state.exact, ...trace);
    const pad = yhi - ylo > 1e-6 ? 0.1 * (yhi - ylo) : 0.1;
    const ry = ab.scale(ylo - pad, yhi + pad, right.y1, right.y0);
    const rx = ab.scale(1, Math.max(2, state.n_blocks), right.x0 + 8, right.x1 - 8);
    const title = state.out === null ? "nothing merged yet" : `u/ℓ = ${ab.fmt(state.out, 4)}`;
    out += ab.frame(right, `${title} (exact ${ab.fmt(state.exact, 4)}, dashed)`, "blocks merged", "output u / ℓ");
    out += ab.line(right.x0, ry(state.exact), right.x1, ry(state.exact), { stroke: "#009E73",
      "stroke-dasharray": "6 3", "stroke-width": 2, class: "exact", "data-value": state.exact });
    out += ab.yticks(right, ab.ticks(ylo - pad, yhi + pad, 4), ry);
    const every = Math.ceil(state.n_blocks / Math.max(2, Math.floor((right.x1 - right.x0) / 24)));
    const marks = trace.map((o, i) => i + 1).filter((b) => (b - 1) % every === 0);
    if (state.n_blocks - marks.at(-1) >= every) marks.push(state.n_blocks);
    out += ab.xticks(right, marks, rx, String);
    const pts = trace.map((o, i) => `${rx(i + 1)},${ry(o)}`).join(" ");
    out += ab.el("polyline", { points: pts, fill: "none", stroke: "#BBBBBB", "stroke-width": 2 });
    trace.forEach((o, i) => {
      const done = i < state.step;
      out += ab.el("circle", { cx: rx(i + 1), cy: ry(o), r: done ? 5 : 3, fill: done ? "#0072B2" : "#BBBBBB",
        class: done ? "merged" : "pending", "data-value": o });
    });
    return ab.svg(W, H, out, "key scores with the running max, and the output converging");
  }

  const readout = (s) =>
    s.step === 0
      ? `no block merged yet; the full softmax gives ${ab.fmt(s.exact)}`
      : `after ${s.step}/${s.n_blocks} blocks: m = ${ab.fmt(s.m)}, ℓ = ${ab.fmt(s.l)}, ` +
        `u/ℓ = ${ab.fmt(s.out)} (exact ${ab.fmt(s.exact)})` +
        (s.rescale === null ? "" : ` · old state rescaled by ${ab.fmt(s.rescale, 3)}`);

  ab.widgets.online_softmax_stepper = { compute, render, readout };
})(globalThis);
