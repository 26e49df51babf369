// Mask explorer, computed in the browser. Mirrors attnbook.widgets.mask_grid.mask_state.
(function (g) {
  const ab = g.attnbook;

  const requireInt = (name, value, low) => {
    if (!Number.isInteger(value) || value < low) throw new Error(`${name} must be an int >= ${low}, got ${value}`);
    return value;
  };
  const range = (n) => Array.from({ length: n }, (_, i) => i);

  function compute(params) {
    const t_q = requireInt("t_q", params.t_q, 1), t_k = requireInt("t_k", params.t_k, 1);
    const length = requireInt("length", params.length, 0), doc_len = requireInt("doc_len", params.doc_len, 1);
    const { offset, causal } = params;
    if (!Number.isInteger(offset)) throw new Error(`offset must be an int, got ${offset}`);
    if (typeof causal !== "boolean") throw new Error(`causal must be a bool, got ${causal}`);
    if (length > t_k)
      throw new Error(`length=${length} exceeds t_k=${t_k}: a sequence cannot hold more ` +
        "real tokens than there are key slots");

    const query_pos = range(t_q).map((i) => offset + i);
    const key_pos = range(t_k);
    const query_doc = query_pos.map((p) => Math.floor(p / doc_len));
    const key_doc = key_pos.map((p) => Math.floor(p / doc_len));
    const reason = query_pos.map((qp, i) => key_pos.map((kp, j) => {
      if (causal && kp > qp) return "future";
      if (kp >= length) return "padding";
      if (key_doc[j] !== query_doc[i]) return "segment";
      return "allowed";
    }));
    const allowed = reason.map((row) => row.map((r) => r === "allowed"));
    const row_counts = allowed.map((row) => row.filter(Boolean).length);
    return {
      t_q, t_k, query_pos, key_pos, query_doc, key_doc, allowed, reason, row_counts,
      n_allowed: row_counts.reduce((a, b) => a + b, 0),
      empty_rows: range(t_q).filter((i) => row_counts[i] === 0),
      padded_queries: range(t_q).filter((i) => query_pos[i] >= length),
      bottom_right_offset: t_k - t_q,
    };
  }

  const COLOURS = { allowed: "#0072B2", future: "#DDDDDD", padding: "#E69F00", segment: "#CC79A7" };

  function render(state) {
    const W = 640, H = 300, cell = Math.min(26, 200 / Math.max(state.t_q, state.t_k));
    const p = { x0: 80, y0: 40, x1: 80 + cell * state.t_k, y1: 40 + cell * state.t_q };
    let out = ab.frame(p, `${state.n_allowed} of ${state.t_q * state.t_k} cells allowed`,
      "key position", "query position");
    state.reason.forEach((row, i) => {
      const padded = state.padded_queries.includes(i);
      out += ab.text(p.x0 - 6, p.y0 + (i + 0.65) * cell, `${state.query_pos[i]}${padded ? "*" : ""}`,
        { "text-anchor": "end", "font-size": 10 });
      row.forEach((r, j) => {
        out += ab.el("rect", { x: p.x0 + j * cell + 1, y: p.y0 + i * cell + 1, width: cell - 2,
          height: cell - 2, fill: COLOURS[r], class: `cell ${r}`, "data-value": r,
          "data-query": state.query_pos[i], "data-key": state.key_pos[j] });
      });
      if (state.empty_rows.includes(i))
        out += ab.text(p.x1 + 4, p.y0 + (i + 0.65) * cell, "empty", { "font-size": 10, fill: "#D55E00" });
    });
    state.key_pos.forEach((k, j) =>
      (out += ab.text(p.x0 + (j + 0.5) * cell, p.y1 + 13, k, { "text-anchor": "middle", "font-size": 10 })));
    const lx = Math.max(p.x1 + 60, 400);
    Object.entries(COLOURS).forEach(([r, c], n) => {
      out += ab.el("rect", { x: lx, y: p.y0 + n * 22, width: 14, height: 14, fill: c });
      out += ab.text(lx + 20, p.y0 + n * 22 + 12, r === "allowed" ? "allowed" : `blocked: ${r}`);
    });
    out += ab.text(lx, p.y0 + 4 * 22 + 12, "* padded query (drop from loss)", { "font-size": 11 });
    return ab.svg(W, H, out, "allowed-key grid");
  }

  const readout = (s) =>
    `queries at positions ${s.query_pos[0]}..${s.query_pos.at(-1)} · ${s.n_allowed} allowed cells · ` +
    `empty rows: ${s.empty_rows.length ? s.empty_rows.map((i) => s.query_pos[i]).join(", ") : "none"} · ` +
    `newest-token alignment needs offset ${s.bottom_right_offset}`;

  ab.widgets.mask_explorer = { compute, render, readout };
})(globalThis);
