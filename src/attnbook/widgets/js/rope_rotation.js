// RoPE in one plane, computed in the browser. Mirrors attnbook.widgets.rope_plane.rope_state.
(function (g) {
  const ab = g.attnbook;

  const turn = (v, a) => [Math.cos(a) * v[0] - Math.sin(a) * v[1], Math.sin(a) * v[0] + Math.cos(a) * v[1]];
  const dot = (a, b) => a[0] * b[0] + a[1] * b[1];

  function compute(params, data) {
    const { m, n, pair, log10_base } = params;
    for (const [name, value] of [["m", m], ["n", n]])
      if (!Number.isInteger(value) || value < 0)
        throw new Error(`${name} must be a non-negative int position, got ${value}`);
    if (!Number.isInteger(pair) || pair < 0 || pair >= data.d / 2)
      throw new Error(`pair must be an int in [0, ${data.d / 2}) for d=${data.d}, got ${pair}`);
    const base = 10.0 ** log10_base;
    const theta = base ** ((-2 * pair) / data.d);
    const q_rot = turn(data.q, m * theta), k_rot = turn(data.k, n * theta);
    return {
      m, n, offset: n - m, base, theta,
      wavelength: (2 * Math.PI) / theta,
      q: data.q.slice(), k: data.k.slice(), q_rot, k_rot,
      q_norm: Math.hypot(...q_rot), k_norm: Math.hypot(...k_rot),
      score: dot(q_rot, k_rot),
      score_relative: dot(data.q, turn(data.k, (n - m) * theta)),
      curve_offset: data.offsets.slice(),
      curve_score: data.offsets.map((o) => dot(data.q, turn(data.k, o * theta))),
    };
  }

  function arrow(cx, cy, r, v, colour, cls, faint) {
    const x = cx + r * v[0], y = cy - r * v[1];
    return ab.el("line", { x1: cx, y1: cy, x2: x, y2: y, stroke: colour, "stroke-width": faint ? 1.5 : 3,
      opacity: faint ? 0.35 : 1, class: cls, "data-value": `${v[0]},${v[1]}` }) +
      ab.el("circle", { cx: x, cy: y, r: faint ? 2 : 4, fill: colour, opacity: faint ? 0.35 : 1 });
  }

  function render(state) {
    const W = 640, H = 290;
    const plane = { x0: 50, x1: 260, y0: 40, y1: 250 }, cx = 155, cy = 145, r = 84;
    const curve = { x0: 360, x1: 620, y0: 40, y1: 250 };
    let out = ab.frame(plane, `θ = ${ab.fmt(state.theta, 3)} rad/position`, "pair coordinate 1", "pair coordinate 2");
    out += ab.el("circle", { cx, cy, r, fill: "none", stroke: "#BBBBBB" });
    out += arrow(cx, cy, r, state.q, "#0072B2", "q0", true) + arrow(cx, cy, r, state.k, "#E69F00", "k0", true);
    out += arrow(cx, cy, r, state.q_rot, "#0072B2", "q", false) + arrow(cx, cy, r, state.k_rot, "#E69F00", "k", false);
    out += ab.text(plane.x0 + 4, plane.y1 - 22, `q at m=${state.m}`, { fill: "#0072B2", "font-size": 11 });
    out += ab.text(plane.x0 + 4, plane.y1 - 8, `k at n=${state.n}`, { fill: "#E69F00", "font-size": 11 });
    const xs = state.curve_offset;
    const x = ab.scale(xs[0], xs.at(-1), curve.x0, curve.x1), y = ab.scale(-1.1, 1.1, curve.y1, curve.y0);
    out += ab.frame(curve, `score = ${ab.fmt(state.score, 3)}`, "offset n − m (positions)", "score q·k");
    out += ab.el("line", { x1: curve.x0, x2: curve.x1, y1: y(0), y2: y(0), stroke: "#CCCCCC" });
    const pts = xs.map((o, i) => `${x(o)},${y(state.curve_score[i])}`).join(" ");
    out += ab.el("polyline", { points: pts, fill: "none", stroke: "#009E73", "stroke-width": 2 });
    [xs[0], 0, xs.at(-1)].forEach((o) =>
      (out += ab.text(x(o), curve.y1 + 14, o, { "text-anchor": "middle", "font-size": 10 })));
    [-1, 0, 1].forEach((v) =>
      (out += ab.text(curve.x0 - 6, y(v) + 4, v, { "text-anchor": "end", "font-size": 10 })));
    if (state.offset >= xs[0] && state.offset <= xs.at(-1))
      out += ab.el("circle", { cx: x(state.offset), cy: y(state.score), r: 5, fill: "#D55E00",
        class: "current", "data-value": state.score });
    return ab.svg(W, H, out, "rotated query and key, and the score against the offset");
  }

  const readout = (s) =>
    `θ = ${ab.fmt(s.theta)} rad/position (wavelength ${ab.fmt(s.wavelength)} positions) · ` +
    `offset n − m = ${s.offset} · score ${ab.fmt(s.score)} · norms ${ab.fmt(s.q_norm)}, ${ab.fmt(s.k_norm)}`;

  ab.widgets.rope_rotation = { compute, render, readout };
})(globalThis);
