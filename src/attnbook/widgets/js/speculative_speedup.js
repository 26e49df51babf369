// Speculative-decoding speed-up, computed in the browser. Mirrors
// attnbook.widgets.draft_quality.speculative_state (tokens from
// attnbook.speculative.expected_tokens_iid).
(function (g) {
  const ab = g.attnbook;
  const CURVE = "#0072B2", HERE = "#D55E00", BEST = "#009E73";

  // expected_tokens_iid: (1 - alpha^(k+1)) / (1 - alpha) tokens per target pass.
  const tokensIid = (alpha, k) => (alpha === 1 ? k + 1 : (1 - alpha ** (k + 1)) / (1 - alpha));
  const isReal = (x) => typeof x === "number";
  const tokens = (x, digits) => `${ab.fmt(x, digits)} token${ab.fmt(x, digits) === "1" ? "" : "s"}`;

  function compute(params, data) {
    const { alpha, k, c } = params;
    const kMax = data.k_max;
    if (!isReal(alpha)) throw new Error(`alpha must be a real number, got ${alpha}`);
    if (!Number.isFinite(alpha)) throw new Error(`alpha must be finite, got ${alpha}`);
    if (!(alpha >= 0 && alpha < 1)) throw new Error(`alpha must lie in [0, 1), got ${alpha}`);
    if (!isReal(k)) throw new Error(`k must be a whole number, got ${k}`);
    if (!Number.isInteger(k)) throw new Error(`k must be a whole number, got ${k}`);
    if (k < 1) throw new Error(`k must be >= 1, got ${k}`);
    if (k > kMax) throw new Error(`k must lie in [1, ${kMax}], got ${k}`);
    if (!isReal(c)) throw new Error(`c must be a real number, got ${c}`);
    if (!Number.isFinite(c)) throw new Error(`c must be finite, got ${c}`);
    if (c < 0) throw new Error(`c must be >= 0, got ${c}`);
    const ks = Array.from({ length: kMax }, (_, i) => i + 1);
    const tokens = ks.map((j) => tokensIid(alpha, j));
    const speedups = ks.map((j, i) => tokens[i] / (j * c + 1));
    const top = Math.max(...speedups);
    const bestK = ks.find((j, i) => speedups[i] >= top * (1 - data.tie));
    return {
      alpha, k, c, ks, tokens, speedups,
      tokens_per_pass: tokens[k - 1],
      drafts_kept: (tokens[k - 1] - 1) / k,
      step_cost: k * c + 1,
      speedup: speedups[k - 1],
      ceiling: 1 / (1 - alpha),
      best_k: bestK,
      best_speedup: speedups[bestK - 1],
    };
  }

  // One panel: a curve over k with a dot at every k, the chosen k marked.
  function curve(p, ks, ys, x, y, chosen, cls) {
    let out = ab.el("polyline", { points: ks.map((j, i) => `${x(j)},${y(ys[i])}`).join(" "),
      fill: "none", stroke: CURVE, "stroke-width": 2, class: cls });
    ks.forEach((j, i) => {
      out += ab.el("circle", { cx: x(j), cy: y(ys[i]), r: 3, fill: CURVE, class: "point", "data-value": ys[i] });
    });
    out += ab.el("circle", { cx: x(chosen), cy: y(ys[chosen - 1]), r: 6, fill: HERE, stroke: "currentColor",
      class: "current", "data-value": ys[chosen - 1] });
    return out;
  }

  function render(state, width) {
    const { W, H, boxes: [left, right] } = ab.panels(width, 2);
    const ks = state.ks, kMax = ks.at(-1), k = state.k;
    const dashed = { "stroke-dasharray": "6 4", opacity: 0.8 };

    // Left: tokens per target pass for this alpha, under the 1/(1 - alpha) ceiling.
    const lx = ab.scale(1, kMax, left.x0 + 10, left.x1 - 10);
    const ltop = Math.max(2, 1.2 * state.ceiling);
    const ly = ab.scale(0, ltop, left.y1, left.y0);
    let out = ab.frame(left, `α = ${ab.fmt(state.alpha, 3)}: ${tokens(state.tokens_per_pass, 3)} a pass at k = ${k}`,
      "draft tokens per step k", "tokens per target pass");
    out += ab.xticks(left, ks, lx, String);
    out += ab.yticks(left, ab.ticks(0, ltop, 4).filter((t) => t <= ltop), ly);
    out += ab.line(left.x0, ly(state.ceiling), left.x1, ly(state.ceiling),
      Object.assign({ class: "ceiling", "data-value": state.ceiling }, dashed));
    // 10 px above its line: clear of the marker (6 px) where the curve meets the ceiling (α = 0)
    out += ab.text(left.x0 + 6, ly(state.ceiling) - 10, `ceiling 1/(1−α) = ${ab.fmt(state.ceiling, 3)}`,
      { "font-size": ab.SMALL, class: "ceiling-label" });
    out += curve(left, ks, state.tokens, lx, ly, k, "tokens");

    // Right: wall-clock speed-up for this c, the best k ringed; dashed at 1x, the target alone.
    const rx = ab.scale(1, kMax, right.x0 + 10, right.x1 - 10);
    const rtop = Math.max(1.5, 1.2 * state.best_speedup);
    const ry = ab.scale(0, rtop, right.y1, right.y0);
    out += ab.frame(right, `c = ${ab.fmt(state.c, 3)}: speed-up ${ab.fmt(state.speedup, 3)}× at k = ${k}`,
      "draft tokens per step k", "speed-up over the target alone");
    out += ab.xticks(right, ks, rx, String);
    out += ab.yticks(right, ab.ticks(0, rtop, 4).filter((t) => t <= rtop), ry, (v) => `${ab.fmt(v, 3)}×`);
    out += ab.line(right.x0, ry(1), right.x1, ry(1), Object.assign({ class: "no-gain", "data-value": 1 }, dashed));
    const bx = rx(state.best_k), by = ry(state.best_speedup);
    out += curve(right, ks, state.speedups, rx, ry, k, "speedups");
    out += ab.el("circle", { cx: bx, cy: by, r: 10, fill: "none", stroke: BEST, "stroke-width": 3,
      class: "best", "data-value": state.best_k });
    // Its label above the ring, kept inside the panel near either end.
    const anchor = bx < right.x0 + 50 ? "start" : bx > right.x1 - 50 ? "end" : "middle";
    const ax = anchor === "start" ? bx - 10 : anchor === "end" ? bx + 10 : bx;
    out += ab.text(ax, by - 15, `best k = ${state.best_k}`, { "text-anchor": anchor, class: "best-label" });
    return ab.svg(W, H, out, "tokens per target pass and wall-clock speed-up against the draft length k");
  }

  const readout = (s) =>
    `α = ${ab.fmt(s.alpha, 3)}, k = ${s.k}: ${tokens(s.tokens_per_pass)} a target pass ` +
    `(ceiling ${ab.fmt(s.ceiling)}), ${ab.fmt(100 * s.drafts_kept, 3)}% of drafts kept · ` +
    `c = ${ab.fmt(s.c, 3)}: a step costs ${ab.fmt(s.step_cost)} target passes, ` +
    `speed-up ${ab.fmt(s.speedup)}× · best k = ${s.best_k} (${ab.fmt(s.best_speedup)}×)`;

  ab.widgets.speculative_speedup = { compute, render, readout };
})(globalThis);
