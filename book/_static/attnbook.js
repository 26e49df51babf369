/* The book's own script (loaded on every page, a few KB): search snippets without raw TeX
   or page chrome, and keys for the previous and next chapter.

   Sphinx builds each search-result snippet from the target page's HTML, where math is still
   TeX source (MathJax typesets it only on the page itself), so snippets read
   "\(\frac{QK^\top}{\sqrt{d_k}}\)". Before Sphinx extracts the text, each math element is
   replaced with a plain-text reading of it: "QKᵀ/√(d_k)". The page's own buttons and
   print-only copies (launch and download buttons, the contents list) are part of the same
   main element, and a snippet near a page's top read "... Binder Colab Repository Open issue
   .ipynb .md .pdf ..."; they are dropped first. */
(() => {
  "use strict";
  const SYMBOLS = {
    alpha: "α", beta: "β", gamma: "γ", delta: "δ", epsilon: "ε", varepsilon: "ε", zeta: "ζ",
    eta: "η", theta: "θ", iota: "ι", kappa: "κ", lambda: "λ", mu: "μ", nu: "ν", xi: "ξ",
    pi: "π", rho: "ρ", sigma: "σ", tau: "τ", phi: "φ", varphi: "φ", chi: "χ", psi: "ψ",
    omega: "ω", Gamma: "Γ", Delta: "Δ", Theta: "Θ", Lambda: "Λ", Pi: "Π", Sigma: "Σ",
    Phi: "Φ", Psi: "Ψ", Omega: "Ω", le: "≤", leq: "≤", ge: "≥", geq: "≥", ne: "≠", neq: "≠",
    approx: "≈", sim: "∼", times: "×", cdot: "·", cdots: "⋯", ldots: "…", dots: "…",
    to: "→", rightarrow: "→", leftarrow: "←", in: "∈", sum: "Σ", prod: "Π", infty: "∞",
    top: "ᵀ", odot: "⊙", otimes: "⊗", oplus: "⊕", pm: "±", partial: "∂", nabla: "∇",
    propto: "∝", ll: "≪", gg: "≫", mid: "|", lVert: "‖", rVert: "‖", Vert: "‖",
  };
  const FONTS = /\\(?:mathrm|mathbf|mathit|mathsf|mathtt|boldsymbol|operatorname|text|textbf|textit|mathcal)\{([^{}]*)\}/g;
  const SPACING = /\\(?:left|right|big|Big|bigg|Bigg|displaystyle|quad|qquad|[,;:!> ])/g;

  const wrap = (a) => (a.length > 1 && !/^[√(]/.test(a) ? `(${a})` : a);

  function texToText(tex) {
    let s = tex.trim().replace(/^(\\\(|\\\[|\$\$?)/, "").replace(/(\\\)|\\\]|\$\$?)$/, "");
    s = s.replace(/\\(?:begin|end)\{[^}]*\}/g, " ").replace(/\\\\|&/g, " ");
    s = s.replace(/\^(?:\{\\top\}|\\top)/g, "ᵀ").replace(/\\mathbb\{R\}/g, "ℝ").replace(SPACING, " ");
    for (let i = 0; i < 4; i += 1) {
      s = s.replace(FONTS, "$1")
        .replace(/\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}/g, (_, a, b) =>
          `${wrap(a)}/${wrap(b)}`)
        .replace(/\\sqrt\{([^{}]*)\}/g, (_, a) => (a.length > 1 ? `√(${a})` : `√${a}`));
    }
    s = s.replace(/\\([A-Za-z]+)/g, (_, name) => SYMBOLS[name] ?? name);
    s = s.replace(/\\([{}%$#_])/g, "$1").replace(/[{}]/g, "");
    return s.replace(/\s+/g, " ").trim();
  }
  window.attnbookTexToText = texToText; // used by tests/test_site.py

  const CHROME = [
    ".bd-header-article", ".bd-sidebar-secondary", ".prev-next-area", ".bd-footer-article",
    "#jb-print-docs-body", ".onlyprint", "button",
  ].join(", ");

  function patchSearch() {
    if (typeof Search === "undefined" || !Search.htmlToText || Search.attnbookPatched) return;
    const original = Search.htmlToText;
    Search.htmlToText = (htmlString, anchor) => {
      const doc = new DOMParser().parseFromString(htmlString, "text/html");
      doc.querySelectorAll(CHROME).forEach((el) => el.remove());
      doc.querySelectorAll(".math").forEach((el) => {
        el.textContent = ` ${texToText(el.textContent)} `;
      });
      return original(doc.documentElement.outerHTML, anchor);
    };
    Search.attnbookPatched = true;
  }
  patchSearch();
  document.addEventListener("DOMContentLoaded", patchSearch);

  /* Keys between chapters: "[" for the previous page and "]" for the next (the footer's
     links, which say so). Not the arrow keys: they scroll wide equations and outputs, and
     move the widgets' sliders. Nothing happens while the reader types in a field or holds
     a modifier (browser shortcuts stay the browser's). */
  const TYPING = new Set(["INPUT", "TEXTAREA", "SELECT"]);
  const KEYS = { "[": "a.left-prev", "]": "a.right-next" };
  function chapterKeys(event) {
    const selector = KEYS[event.key];
    if (!selector || event.defaultPrevented || event.altKey || event.ctrlKey || event.metaKey) return;
    const target = event.target;
    if (target && (TYPING.has(target.tagName) || target.isContentEditable)) return;
    const link = document.querySelector(`.prev-next-area ${selector}`);
    if (!link || !link.href) return;
    event.preventDefault();
    window.location.href = link.href;
  }
  function labelKeys() {
    for (const [key, selector] of Object.entries(KEYS)) {
      const link = document.querySelector(`.prev-next-area ${selector}`);
      if (!link || link.querySelector("kbd")) continue;
      link.setAttribute("aria-keyshortcuts", key);
      const subtitle = link.querySelector(".prev-next-subtitle");
      if (subtitle) {
        const kbd = document.createElement("kbd");
        kbd.className = "attnbook-key";
        kbd.textContent = key;
        kbd.title = `key ${key}`;
        subtitle.append(" ", kbd);
      }
    }
  }
  document.addEventListener("keydown", chapterKeys);
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", labelKeys);
  else labelKeys();
})();

/* Figures in dark mode. Each figure is a <picture> whose <source class="attnbook-dark"> names
   its dark rendering (book/_ext/attnbook_site.py) for a dark system scheme, so a reader on
   the theme's default (auto: the system's scheme) gets, and fetches, the one rendering that
   matches the page. A reader who picked the other scheme in the theme's switch gets the
   rendering of their pick once the page has loaded (html[data-mode]: light, dark or auto);
   the browser may have fetched the system's rendering first. Printing is always light. */
(() => {
  "use strict";
  const system = window.matchMedia("(prefers-color-scheme: dark)");
  let printing = false;
  function follow() {
    const mode = document.documentElement.dataset.mode || "auto";
    const dark = !printing && (mode === "dark" || (mode !== "light" && system.matches));
    for (const source of document.querySelectorAll("source.attnbook-dark")) {
      const media = dark ? "all" : "not all";
      if (source.media !== media) source.media = media;
    }
  }
  new MutationObserver(follow).observe(document.documentElement, {
    attributes: true,
    attributeFilter: ["data-mode", "data-theme"],
  });
  system.addEventListener("change", follow);
  window.addEventListener("beforeprint", () => { printing = true; follow(); });
  window.addEventListener("afterprint", () => { printing = false; follow(); });
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", follow);
  else follow();
})();
