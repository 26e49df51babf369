// Head explorer, computed in the browser. Mirrors attnbook.widgets.head_rows.head_state: the
// attention rows are stored with the page (data.maps), so computing a state is a lookup.
(function (g) {
  const ab = g.attnbook;
  const MODELS = ["two-layer", "one-layer"];
  const COLOURS = { previous: "#E69F00", induction: "#009E73", other: "#0072B2" };

  const whole = (name, value) => {
    if (typeof value !== "number" || !Number.isInteger(value))
      throw new Error(`${name} must be a whole number, got ${value}`);
    if (value < 0) throw new Error(`${name} must be >= 0, got ${value}`);
    return value;
  };

  function compute(params, data) {
    const { model } = params;
    if (!MODELS.includes(model)) throw new Error(`model must be one of ${MODELS}, got ${model}`);
    const seeds = data.maps[model].length, layers = data.maps[model][0].length;
    const t = data.tokens.length, length = data.length;
    const query = whole("query", params.query), seed = whole("seed", params.seed);
    const most = Math.max(...MODELS.map((m) => data.maps[m][0].length));
    let layer = whole("layer", params.layer);
    if (layer >= most) throw new Error(`layer must be < ${most} (the deepest model's layers), got ${layer}`);
    layer = Math.min(layer, layers - 1); // the slider follows the model (max_from="last_layer")
    if (query >= t) throw new Error(`query must be < T=${t}, got ${query}`);
    if (seed >= seeds) throw new Error(`seed must be < ${seeds} (models trained), got ${seed}`);
    const weights = data.maps[model][seed][layer][query];
    let top_key = 0;
    weights.forEach((w, j) => { if (w > weights[top_key]) top_key = j; });
    const previous_key = query >= 1 ? query - 1 : null;
    const induction_key = query >= length ? query - length + 1 : null;
    const scores = data.scores[model];
    return {
      model, layer, last_layer: layers - 1, query, seed, tokens: data.tokens.slice(), length, weights: weights.slice(),
      top_key, top_weight: weights[top_key],
      previous_key, previous_weight: previous_key === null ? null : weights[previous_key],
      induction_key, induction_weight: induction_key === null ? null : weights[induction_key],
      previous_score: scores.previous[seed][layer], induction_score: scores.induction[seed][layer],
    };
  }

  function render(state, width) {
    const { W, boxes } = ab.panels(width, 1, { height: 170, top: 50, bottom: 58, left: 58 });
    const p = boxes[0], t = state.tokens.length;
    const cell = (p.x1 - p.x0) / t;
    const x = (j) => p.x0 + j * cell, y = ab.scale(0, 1, p.y1, p.y0);
    const title = `${state.model} model, seed ${state.seed}, layer ${state.layer}: ` +
      `query ${state.query} (token ${state.tokens[state.query]})`;
    let out = ab.frame(p, title, "", "attention weight");
    out += ab.yticks(p, [0, 0.5, 1], y);
    // the second half starts here: it repeats the first
    out += ab.line(x(state.length), p.y0, x(state.length), p.y1, { opacity: 0.3, "stroke-dasharray": "2 3" });
    state.weights.forEach((w, j) => {
      const role = j === state.induction_key ? "induction" : j === state.previous_key ? "previous" : "other";
      const h = Math.max(0, y(0) - y(w));
      out += ab.el("rect", { x: x(j) + cell * 0.12, y: y(w), width: cell * 0.76, height: h,
        fill: COLOURS[role], class: `bar ${role}`, "data-key": j, "data-value": w });
    });
    out += ab.el("rect", { x: x(state.query) + 1, y: p.y0, width: cell - 2, height: p.y1 - p.y0,
      fill: "none", stroke: "currentColor", "stroke-dasharray": "3 2", opacity: 0.6, class: "query" });
    // keys below the axis: token ids when they fit, else every fourth position
    const labels = cell >= 15;
    state.tokens.forEach((tok, j) => {
      if (labels || j % 4 === 0)
        out += ab.text(x(j) + cell / 2, p.y1 + 15, labels ? tok : j, { "text-anchor": "middle", "font-size": ab.SMALL });
    });
    out += ab.text((p.x0 + p.x1) / 2, p.y1 + 32, labels ? `key token (positions 0–${t - 1})` : "key position",
      { "text-anchor": "middle" });
    const twoLines = p.x1 - p.x0 < 330; // too narrow for both legend entries on one line
    [["previous", "previous token"], ["induction", "after previous occurrence"]].forEach(([role, label], i) => {
      const lx = i && !twoLines ? p.x0 + 30 + ab.textWidth("previous token", ab.SMALL) : p.x0;
      const ly = p.y1 + 42 + (i && twoLines ? 18 : 0);
      out += ab.el("rect", { x: lx, y: ly, width: 12, height: 12, fill: COLOURS[role] });
      out += ab.text(lx + 16, ly + 10, label, { "font-size": ab.SMALL });
    });
    return ab.svg(W, p.y1 + (twoLines ? 78 : 60), out, "attention row of one head over the sequence");
  }

  const show = (k, w) => (k === null ? "none" : `key ${k} (${ab.fmt(w, 3)})`);
  const readout = (s) =>
    `most read: key ${s.top_key} (${ab.fmt(s.top_weight, 3)}) · previous token: ${show(s.previous_key, s.previous_weight)} · ` +
    `after previous occurrence: ${show(s.induction_key, s.induction_weight)} · this head on held-out data: ` +
    `previous-token score ${ab.fmt(s.previous_score, 3)}, induction score ${ab.fmt(s.induction_score, 3)}`;

  ab.widgets.head_explorer = { compute, render, readout };
})(globalThis);
