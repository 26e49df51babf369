// KV-cache calculator, computed in the browser. Mirrors attnbook.widgets.kv_cache.kv_cache_state.
// Byte counts are products of positive integers whose result stays below 2**53, so every
// intermediate product is an exactly representable Number; the code checks that bound anyway.
(function (g) {
  const ab = g.attnbook;
  const KIND_COLOURS = ["#999999", "#0072B2", "#009E73"];
  const UNITS = [["TiB", 40], ["GiB", 30], ["MiB", 20], ["KiB", 10]];

  // Mirrors kv_cache.human_bytes: exact when at most three decimals, else rounded and marked.
  const human = (n) => {
    for (const [unit, p] of UNITS) {
      if (n < 2 ** p) continue;
      const v = n / 2 ** p;
      if ((BigInt(n) * 1000n) % (1n << BigInt(p)) === 0n)
        return `${v.toFixed(3).replace(/0+$/, "").replace(/\.$/, "")} ${unit}`;
      return `≈${v.toFixed(v < 10 ? 2 : v < 100 ? 1 : 0)} ${unit}`;
    }
    return `${n} B`;
  };
  const unitOf = (n) => {
    for (const [unit, p] of UNITS) if (n >= 2 ** p) return [unit, 2 ** p];
    return ["B", 1];
  };
  const perKvHead = (g) => `${g} query head${g === 1 ? "" : "s"} per KV head`;

  function compute(params, data) {
    const { layers, positions, q_heads, kv_heads, head_dim, dtype, batch } = params;
    const b = typeof dtype === "string" ? data.bytes_per_element[dtype] : undefined;
    if (b === undefined) throw new Error(`dtype must be one of ${Object.keys(data.bytes_per_element)}, got ${dtype}`);
    for (const [name, v] of Object.entries({ layers, positions, q_heads, kv_heads, head_dim, batch }))
      if (!Number.isInteger(v) || v < 1) throw new Error(`${name} must be a whole number >= 1, got ${v}`);
    if (q_heads % kv_heads !== 0) {
      const valid = [];
      for (let h = 1; h <= q_heads; h++) if (q_heads % h === 0) valid.push(h);
      throw new Error(`${kv_heads} KV heads cannot serve ${q_heads} query heads: each KV head ` +
        `serves an equal group (Hq % Hkv == 0); try one of ${valid.join(", ")}`);
    }
    // 2 * B * L * T * Hkv * dk * b: keys and values, dk = dv.
    const size = (heads) => batch * layers * positions * heads * (head_dim + head_dim) * b;
    const variants = [["MHA", q_heads], ["yours", kv_heads], ["MQA", 1]].map(
      ([name, heads]) => ({ name, kv_heads: heads, bytes: size(heads), label: "" }));
    if (!Number.isSafeInteger(variants[0].bytes))
      throw new Error("this setting needs more than 2**53 bytes; it cannot be shown exactly");
    variants.forEach((v) => (v.label = human(v.bytes)));
    const total = variants[1].bytes;
    const kind = kv_heads === q_heads ? "MHA" : kv_heads === 1 ? "MQA" : "GQA";
    return {
      positions, bytes: total, label: human(total), elements: total / b, bytes_per_element: b, kind,
      group_size: q_heads / kv_heads, ratio_to_mha: total / variants[0].bytes, variants,
    };
  }

  function render(state, width) {
    const W = Math.max(260, Math.floor(width || 640));
    const labelW = 118, valueW = 84; // room for "GQA (Hkv=128)" and "≈1023 GiB"
    const p = { left: 0, x0: labelW, x1: W - valueW, y0: W < 420 ? 50 : 36, y1: (W < 420 ? 50 : 36) + 138 };
    const [unit, per] = unitOf(state.variants[0].bytes);
    const top = state.variants[0].bytes / per;
    const x = ab.scale(0, top, p.x0, p.x1);
    const rowH = (p.y1 - p.y0) / state.variants.length;
    let out = ab.frame(p, `${state.kind}, ${perKvHead(state.group_size)}: ${state.label}`,
      `KV cache (${unit})`, "");
    out += ab.xticks(p, ab.ticks(0, top, W < 420 ? 3 : 5).filter((t) => t <= top), x);
    state.variants.forEach((v, i) => {
      const y = p.y0 + i * rowH + 6, w = x(v.bytes / per) - p.x0;
      out += ab.el("rect", { x: p.x0, y, width: Math.max(w, 1), height: rowH - 12, fill: KIND_COLOURS[i],
        class: "bar", "data-value": v.bytes });
      const label = i === 1 ? state.kind : v.name; // the middle bar is the current setting
      out += ab.text(p.x0 - 6, y + rowH / 2 - 2, `${label} (Hkv=${v.kv_heads})`, { "text-anchor": "end" });
      out += ab.text(p.x0 + Math.max(w, 1) + 4, y + rowH / 2 - 2, v.label, { "font-size": ab.SMALL });
    });
    return ab.svg(W, p.y1 + 44, out, "KV-cache bytes for MHA, your setting and MQA");
  }

  const readout = (s) =>
    `${s.bytes.toLocaleString("en-US")} bytes (${s.label}) · ${s.kind}, ${perKvHead(s.group_size)} · ` +
    `${ab.fmt(s.ratio_to_mha)}× the MHA cache · MQA ${s.variants[2].label}`;

  ab.widgets.kv_cache_calculator = { compute, render, readout };
})(globalThis);
