// RoPE in one plane, computed in the browser. Mirrors attnbook.widgets.rope_plane.rope_state.
(function (g) {
  const ab = g.attnbook;

  const turn = (v, a) => [Math.cos(a) * v[0] - Math.sin(a) * v[1], Math.sin(a) * v[0] + Math.cos(a) * v[1]];
  const dot = (a, b) => a[0] * b[0] + a[1] * b[1];

  function compute(params, data) {
    const { m, n, pair, log10_base } = params;
    for (const [name, value] of [["m", m], ["n", n], ["pair", pair]]) {
      if (!Number.isInteger(value)) throw new Error(`${name} must be a whole number, got ${value}`);
      if (value < 0) throw new Error(`${name} must be >= 0, got ${value}`);
    }
    if (pair >= data.d / 2)
      throw new Error(`pair must be a whole number in [0, ${data.d / 2}) for d=${data.d}, got ${pair}`);
    if (typeof log10_base !== "number" || !Number.isFinite(log10_base))
      throw new Error(`log10_base must be a real number, got ${log10_base}`);
    const base = 10.0 ** log10_base;
    const theta = base ** ((-2 * pair) / data.d);
    const q_rot = turn(data.q, m * theta), k_rot = turn(data.k, n * theta);
    return {
      m, n, pair, offset: n - m, base, theta,
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
      opacity: faint ? 0.45 : 1, "stroke-dasharray": faint ? "4 3" : "none", class: cls, "data-value": `${v[0]},${v[1]}` }) +
      ab.el("circle", { cx: x, cy: y, r: faint ? 2 : 4, fill: colour, opacity: faint ? 0.45 : 1 });
  }

  function render(state, width) {
    const { W, H, boxes: [plane, curve] } = ab.panels(width, 2, { minPanel: 290, height: 200, bottom: 78 });
    const cx = (plane.x0 + plane.x1) / 2, cy = (plane.y0 + plane.y1) / 2;
    const r = 0.42 * Math.min(plane.x1 - plane.x0, plane.y1 - plane.y0);
    let out = ab.frame(plane, `θ = ${ab.fmt(state.theta, 3)} rad/position`, "pair coordinate 1", "pair coordinate 2");
    out += ab.el("circle", { cx, cy, r, fill: "none", stroke: "currentColor", "stroke-opacity": 0.35 });
    out += arrow(cx, cy, r, state.q, "#0072B2", "q0", true) + arrow(cx, cy, r, state.k, "#E69F00", "k0", true);
    out += arrow(cx, cy, r, state.q_rot, "#0072B2", "q", false) + arrow(cx, cy, r, state.k_rot, "#E69F00", "k", false);
    // Legend: coloured marks, text in the page's colour (orange text would fail contrast).
    const ly = plane.y1 + 50;
    [["#0072B2", `q at m=${state.m}`], ["#E69F00", `k at n=${state.n}`]].forEach(([c, label], i) => {
      const lx = plane.left + 6 + i * 104;
      out += ab.line(lx, ly - 4, lx + 18, ly - 4, { stroke: c, "stroke-width": 3 });
      out += ab.text(lx + 23, ly, label, { class: "legend" });
    });
    if (state.pair === 0)
      out += ab.text(plane.left + 6, ly + 16, "pair 0: θ = base⁰ = 1 for every base", { class: "note" });

    const xs = state.curve_offset, lo = xs[0], hi = xs.at(-1);
    const x = ab.scale(lo, hi, curve.x0, curve.x1), y = ab.scale(-1.1, 1.1, curve.y1, curve.y0);
    out += ab.frame(curve, `score = ${ab.fmt(state.score, 3)} at n − m = ${state.offset}`, "offset n − m (positions)", "score q·k");
    out += ab.line(curve.x0, y(0), curve.x1, y(0), { "stroke-opacity": 0.3 });
    out += ab.xticks(curve, ab.ticks(lo, hi, 4), x) + ab.yticks(curve, [-1, 0, 1], y);
    // The score is a smooth function of the offset, q·R(oθ)k; integer offsets are marked.
    const fine = [];
    for (let i = 0; i <= 8 * (hi - lo); i++) {
      const o = lo + i / 8;
      fine.push(`${x(o).toFixed(2)},${y(dot(state.q, turn(state.k, o * state.theta))).toFixed(2)}`);
    }
    out += ab.el("polyline", { points: fine.join(" "), fill: "none", stroke: "#009E73", "stroke-width": 1.5, class: "curve" });
    xs.forEach((o, i) => (out += ab.el("circle", { cx: x(o), cy: y(state.curve_score[i]), r: 1.8, fill: "#009E73" })));
    out += ab.el("circle", { cx: x(state.offset), cy: y(state.score), r: 5, fill: "#D55E00", stroke: "currentColor",
      class: "current", "data-value": state.score });
    return ab.svg(W, H, out, "rotated query and key, and the score against the offset");
  }

  // The angles the chapter teaches: q at position m turns by m·θ, k at n by n·θ, and the
  // score sees only their difference (n − m)·θ.
  const readout = (s) =>
    `θ = ${ab.fmt(s.theta)} rad/position (wavelength ${ab.fmt(s.wavelength)} positions) · ` +
    `q turns m·θ = ${s.m}·θ = ${ab.fmt(s.m * s.theta)} rad, k turns n·θ = ${s.n}·θ = ` +
    `${ab.fmt(s.n * s.theta)} rad, difference (n − m)·θ = ${ab.fmt(s.offset * s.theta)} rad · ` +
    `offset n − m = ${s.offset} · score ${ab.fmt(s.score)} · norms ${ab.fmt(s.q_norm)}, ${ab.fmt(s.k_norm)}` +
    (s.pair === 0 ? " · pair 0 turns 1 rad/position whatever the base; pick pair ≥ 1 to see the base act" : "");

  ab.widgets.rope_rotation = { compute, render, readout };
})(globalThis);
