// Mask explorer, computed in the browser. Mirrors attnbook.widgets.mask_grid.mask_state.
(function (g) {
  const ab = g.attnbook;

  const requireInt = (name, value, low) => {
    if (!Number.isInteger(value)) throw new Error(`${name} must be a whole number, got ${value}`);
    if (low !== undefined && value < low) throw new Error(`${name} must be >= ${low}, got ${value}`);
    return value;
  };
  const range = (n) => Array.from({ length: n }, (_, i) => i);

  function compute(params) {
    const t_q = requireInt("t_q", params.t_q, 1), t_k = requireInt("t_k", params.t_k, 1);
    const length = requireInt("length", params.length, 0), doc_len = requireInt("doc_len", params.doc_len, 1);
    const offset = requireInt("offset", params.offset), causal = params.causal;
    if (typeof causal !== "boolean") throw new Error(`causal must be True or False, got ${causal}`);
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
  const LEGEND = [["allowed", "allowed"], ["future", "blocked: future"], ["padding", "blocked: padding"],
    ["segment", "blocked: segment"]];

  function render(state, width) {
    const W = Math.max(260, Math.floor(width || 640));
    const left = 66, emptyW = 46, legendW = 176; // query labels, the "empty" column, the legend
    const side = W >= left + 8 * 22 + emptyW + legendW; // legend beside the grid, else below
    const room = W - left - emptyW - (side ? legendW : 0) - 8;
    const cell = Math.max(14, Math.min(30, Math.floor(room / state.t_k)));
    const title = `${state.n_allowed} of ${state.t_q * state.t_k} cells allowed`;
    const top = ab.wrap(title, W - 20).length > 1 ? 52 : 36;
    const p = { left: 0, x0: left, y0: top, x1: left + cell * state.t_k, y1: top + cell * state.t_q };
    let out = ab.frame(p, title, "key position", "query position");
    state.reason.forEach((row, i) => {
      const padded = state.padded_queries.includes(i);
      out += ab.text(p.x0 - 6, p.y0 + (i + 0.5) * cell + 4, `${state.query_pos[i]}${padded ? "*" : ""}`,
        { "text-anchor": "end", "font-size": ab.SMALL });
      row.forEach((r, j) => {
        out += ab.el("rect", { x: p.x0 + j * cell + 1, y: p.y0 + i * cell + 1, width: cell - 2,
          height: cell - 2, fill: COLOURS[r], class: `cell ${r}`, "data-value": r,
          "data-query": state.query_pos[i], "data-key": state.key_pos[j] });
      });
      if (state.empty_rows.includes(i))
        out += ab.text(p.x1 + 5, p.y0 + (i + 0.5) * cell + 4, "empty", { "font-size": ab.SMALL, class: "empty" });
    });
    state.key_pos.forEach((k, j) =>
      (out += ab.text(p.x0 + (j + 0.5) * cell, p.y1 + 16, k, { "text-anchor": "middle", "font-size": ab.SMALL })));
    // The legend: beside the grid (after the "empty" column) when it fits, else under the labels.
    const lx = side ? p.x1 + emptyW + 12 : 8, ly = side ? p.y0 : p.y1 + 46;
    LEGEND.forEach(([r, label], n) => {
      out += ab.el("rect", { x: lx, y: ly + n * 20, width: 14, height: 14, fill: COLOURS[r], stroke: "currentColor",
        "stroke-opacity": 0.4 });
      out += ab.text(lx + 20, ly + n * 20 + 12, label);
    });
    out += ab.text(lx, ly + 4 * 20 + 12, "* padded query (drop from loss)", { "font-size": ab.SMALL });
    const H = Math.max(p.y1 + 44, ly + 4 * 20 + 22);
    return ab.svg(W, H, out, "allowed-key grid");
  }

  const readout = (s) =>
    `queries at positions ${s.query_pos[0]}..${s.query_pos.at(-1)} · ${s.n_allowed} allowed cells · ` +
    `empty rows: ${s.empty_rows.length ? s.empty_rows.map((i) => s.query_pos[i]).join(", ") : "none"} · ` +
    `newest-token alignment needs offset ${s.bottom_right_offset}`;

  ab.widgets.mask_explorer = { compute, render, readout };
})(globalThis);
