// Softmax saturation, computed in the browser. Mirrors attnbook.widgets.softmax.softmax_state.
(function (g) {
  const ab = g.attnbook;

  const softmax = (logits) => {
    const top = Math.max(...logits);
    const exps = logits.map((s) => Math.exp(s - top));
    const total = exps.reduce((a, b) => a + b, 0);
    return exps.map((e) => e / total);
  };
  const jacobianNorm = (p) => {
    let sum = 0;
    for (let i = 0; i < p.length; i++)
      for (let j = 0; j < p.length; j++) sum += (p[i] * ((i === j ? 1 : 0) - p[j])) ** 2;
    return Math.sqrt(sum);
  };

  function compute(params, data) {
    const { scale, d_k, divide } = params;
    if (typeof scale !== "number" || !Number.isFinite(scale)) throw new Error(`scale must be a real number, got ${scale}`);
    if (!(scale > 0)) throw new Error(`scale must be positive, got ${scale}`);
    if (!Number.isInteger(d_k) || d_k < 1) throw new Error(`d_k must be a positive whole number, got ${d_k}`);
    if (typeof divide !== "boolean") throw new Error(`divide must be True or False, got ${divide}`);
    const std = divide ? 1 : Math.sqrt(d_k);
    const logitsAt = (s) => data.scores.map((z) => s * std * z);
    const logits = logitsAt(scale);
    const probs = softmax(logits);
    const entropy = -probs.filter((p) => p > 0).reduce((a, p) => a + p * Math.log(p), 0);
    return {
      scale, d_k, divide, logits, probs, entropy,
      max_entropy: Math.log(probs.length),
      jacobian_norm: jacobianNorm(probs),
      score_std: scale * std,
      curve_scale: data.grid.slice(),
      curve_jacobian: data.grid.map((s) => jacobianNorm(softmax(logitsAt(s)))),
    };
  }

  function render(state, width) {
    const { W, H, boxes: [bars, curve] } = ab.panels(width, 2, { bottom: 70 });
    const n = state.probs.length, bw = (bars.x1 - bars.x0) / n;
    const y = ab.scale(0, 1, bars.y1, bars.y0);
    let out = ab.frame(bars, `H = ${ab.fmt(state.entropy, 3)} nats (max ${ab.fmt(state.max_entropy, 3)})`,
      "key", "softmax weight");
    out += ab.yticks(bars, [0, 0.25, 0.5, 0.75, 1], y);
    state.probs.forEach((p, i) => {
      out += ab.el("rect", { x: bars.x0 + i * bw + 2, y: y(p), width: bw - 4, height: bars.y1 - y(p),
        fill: "#0072B2", class: "bar", "data-value": p });
      out += ab.text(bars.x0 + (i + 0.5) * bw, bars.y1 + 16, i, { "text-anchor": "middle", "font-size": ab.SMALL });
    });
    // Why d_k moves the picture only without the division.
    const note = state.divide ? `d_k = ${state.d_k}: ÷√d_k cancels its spread`
      : `d_k = ${state.d_k}, undivided: spread × √d_k = ${ab.fmt(Math.sqrt(state.d_k), 3)}`;
    out += ab.text(bars.left + 4, bars.y1 + 56, note, { class: "note" });
    const lx = (s) => Math.log10(s);
    const cx = ab.scale(lx(state.curve_scale[0]), lx(state.curve_scale.at(-1)), curve.x0, curve.x1);
    const top = Math.max(...state.curve_jacobian) * 1.1;
    const cy = ab.scale(0, top, curve.y1, curve.y0);
    const pts = state.curve_scale.map((s, i) => `${cx(lx(s))},${cy(state.curve_jacobian[i])}`).join(" ");
    out += ab.frame(curve, `‖J‖F = ${ab.fmt(state.jacobian_norm, 3)} at scale ${ab.fmt(state.scale, 3)}`,
      "logit scale (log axis)", "Jacobian norm ‖J‖F");
    out += ab.xticks(curve, [0.1, 0.3, 1, 3, 10], (s) => cx(lx(s)));
    out += ab.yticks(curve, ab.ticks(0, top, 4).filter((t) => t <= top), cy);
    out += ab.el("polyline", { points: pts, fill: "none", stroke: "#009E73", "stroke-width": 2, class: "curve" });
    out += ab.el("circle", { cx: cx(lx(state.scale)), cy: cy(state.jacobian_norm), r: 5, fill: "#D55E00",
      stroke: "currentColor", class: "current", "data-value": state.jacobian_norm });
    return ab.svg(W, H, out, "softmax weights and Jacobian norm");
  }

  const readout = (s) =>
    `score std ${ab.fmt(s.score_std)} · max weight ${ab.fmt(Math.max(...s.probs))} · ` +
    `entropy ${ab.fmt(s.entropy)} nats · ‖J‖F ${ab.fmt(s.jacobian_norm)}`;

  ab.widgets.softmax_saturation = { compute, render, readout };
})(globalThis);
