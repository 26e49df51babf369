// Speculative-decoding speed-up, computed in the browser. Mirrors
// attnbook.widgets.draft_quality.speculative_state (tokens from
// attnbook.speculative.expected_tokens_iid), its texts included: the best k is the best in
// 1..k_max, said as such where the speed-up still rises at k_max, and the least loss where
// no k gains.
(function (g) {
  const ab = g.attnbook;
  const CURVE = "#0072B2", HERE = "#D55E00", BEST = "#009E73";

  // expected_tokens_iid: (1 - alpha^(k+1)) / (1 - alpha) tokens per target pass.
  const tokensIid = (alpha, k) => (alpha === 1 ? k + 1 : (1 - alpha ** (k + 1)) / (1 - alpha));
  const isReal = (x) => typeof x === "number";
  const tokens = (x, digits) => `${ab.fmt(x, digits)} token${ab.fmt(x, digits) === "1" ? "" : "s"}`;

  // The ring's label, and the same with the ringed speed-up always said (the readout's);
  // draft_quality._verdict, word for word (its _fmt writes numbers as ab.fmt does).
  function verdict(bestK, best, gains, risingAtEnd, kMax, tie) {
    const value = `${ab.fmt(best, 3)}×`;
    if (!gains) {
      const head = best >= 1 - tie  // alpha == c at k = 1, or alpha = 0 with a free draft
        ? `no k gains; k = ${bestK} breaks even` : `no k gains; least loss at k = ${bestK}`;
      return [`${head} (${value})`, `${head} (${value})`];  // the ring says the speed-up too
    }
    if (risingAtEnd && bestK === kMax) {
      const head = `best in 1–${kMax}: k = ${bestK}`;
      return [`${head} (still rising)`, `${head} (${value}, still rising)`];
    }
    return [`best k = ${bestK}`, `best k = ${bestK} (${value})`];
  }

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
    const tie = data.tie;
    const bestK = ks.find((j, i) => speedups[i] >= top * (1 - tie));
    const best = speedups[bestK - 1];
    const gains = best > 1 + tie;
    const risingAtEnd = speedups[kMax - 2] < speedups[kMax - 1] * (1 - tie);
    const [label, text] = verdict(bestK, best, gains, risingAtEnd, kMax, tie);
    return {
      alpha, k, c, ks, tokens, speedups,
      tokens_per_pass: tokens[k - 1],
      drafts_kept: (tokens[k - 1] - 1) / k,
      step_cost: k * c + 1,
      speedup: speedups[k - 1],
      ceiling: 1 / (1 - alpha),
      best_k: bestK,
      best_speedup: best,
      gains,
      rising_at_end: risingAtEnd,
      best_label: label,
      best_text: text,
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
    // Its label above the ring, centred on it unless that would leave the plot: then it
    // starts at the ring's left edge or ends at its right one (the long labels, "best in
    // 1–10: ..." and "no k gains; ...", are drawn only at k = 10 and at k = 1).
    const half = ab.textWidth(state.best_label) / 2;
    const anchor = bx - half < right.x0 ? "start" : bx + half > right.x1 ? "end" : "middle";
    const ax = anchor === "start" ? bx - 10 : anchor === "end" ? bx + 10 : bx;
    out += ab.text(ax, by - 15, state.best_label, { "text-anchor": anchor, class: "best-label" });
    return ab.svg(W, H, out, "tokens per target pass and wall-clock speed-up against the draft length k");
  }

  const readout = (s) =>
    `α = ${ab.fmt(s.alpha, 3)}, k = ${s.k}: ${tokens(s.tokens_per_pass)} a target pass ` +
    `(ceiling ${ab.fmt(s.ceiling)}), ${ab.fmt(100 * s.drafts_kept, 3)}% of drafts kept · ` +
    `c = ${ab.fmt(s.c, 3)}: a step costs ${ab.fmt(s.step_cost)} target passes, ` +
    `speed-up ${ab.fmt(s.speedup, 3)}× · ${s.best_text}`;

  ab.widgets.speculative_speedup = { compute, render, readout };
})(globalThis);
