# The interface to the book. Every target sets itself up from nothing (Python 3.11 + make).
#   make book   execute chapters (cached) and build the static site into _build/html
#   make test   the gate: unit/property tests, strict nbval, .md/.ipynb sync, ruff, every
#               chapter on two more CPU paths (one a Colab-like runtime), a warnings-as-
#               errors book build and the site's browser tests
#   make test-surfaces  the rest of what a reader meets, in a browser: JupyterLab, phone
#               widths, screenshots, the whole-book PDF and its links (CI runs both)
#   make lab    JupyterLab on notebooks/        make serve  serve _build/html on 127.0.0.1
#   make pdf    the whole book as one PDF (_build/html/attention-and-transformers.pdf)
#   make sync   .md -> .ipynb, re-executed in a fresh kernel (after editing a chapter)
#   make bench  benchmarks/ (timings printed as ratios; see benchmarks/RESULTS.md)
#   make sweep  the robustness sweep: training chapters on 8 seeds x every CPU path (~25 min)
#   make clean  remove builds and caches (keeps .venv; `make distclean` removes it too)

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
ASSETS := book/_vendor/.stamp
PORT   ?= 8000
# The CPU code path of the stored outputs (attnbook.runtime.CPU_PATHS["declared"]): PyTorch's
# AVX2 kernels, MKL and oneDNN held to AVX2. Every x86-64 CPU since 2013 can take it, and an
# AVX-512 machine then rounds as an AVX2 one does, so strict nbval compares the same digits on
# every machine. Set for every kernel that writes or checks stored outputs (make sync does it
# itself); tests/test_cpu_paths.py checks that this line and the package agree.
DECLARED_CPU := ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
NBVAL_ENV := env $(DECLARED_CPU)
# The static-site build shows each widget's HTML+JavaScript face only (see attnbook.widgets).
BOOK   := env $(DECLARED_CPU) ATTNBOOK_WIDGETS=static $(BIN)/jupyter-book build . -W -n --keep-going
# Strict (--nbval) where this CPU can take the declared path; on one without AVX2 the outputs
# cannot be reproduced, and nbval runs the chapters without comparing them (--nbval-lax), saying so.
NBVAL_MODE  = $$($(BIN)/python scripts/chapter_runs.py nbval-mode)
NBVAL_FLAGS = -p no:cacheprovider $(NBVAL_MODE) --nbval-current-env \
              --nbval-sanitize-with tests/nbval_sanitize.cfg
NBVAL  = $(NBVAL_ENV) $(BIN)/pytest $(NBVAL_FLAGS) notebooks/

.PHONY: book test test-surfaces site-checks unit notebooks lint sync lab serve pdf bench sweep clean distclean setup browser-deps

setup: $(STAMP) $(ASSETS)

# uv installs the exact pins several times faster than pip (about 8 s against 75 s with warm
# caches). It is installed from the package index into .venv, so nothing else is needed.
# PIP_FIND_LINKS (where a machine keeps local wheels, e.g. the CPU build of torch) is honoured;
# elsewhere pass e.g. UV_EXTRA="--index-strategy unsafe-best-match --extra-index-url
# https://download.pytorch.org/whl/cpu" for the CPU build instead of PyPI's CUDA one.
UV_VERSION := 0.13.9
comma      := ,
# pip's find-links from the environment, else from pip's own configuration (uv reads neither);
# exported so the tests that build environments with uv see the same wheels.
export PIP_FIND_LINKS := $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get \
                         global.find-links 2> /dev/null))
UV         := $(BIN)/uv pip install --quiet --python $(BIN)/python \
              $(foreach d,$(subst $(comma), ,$(PIP_FIND_LINKS)),--find-links $(d)) $(UV_EXTRA)

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv==$(UV_VERSION)
	$(UV) -r requirements.txt
	touch $@

# Browser assets from pinned npm packages (needs node/npm; installed from Debian if missing).
$(ASSETS): package.json package-lock.json scripts/vendor_assets.py | $(STAMP)
	command -v npm >/dev/null || scripts/install_system_deps.sh node
	npm ci --no-audit --no-fund --loglevel=error
	$(BIN)/python scripts/vendor_assets.py
	touch $@

# The site is built from each chapter's stored outputs (scripts/prime_cache.py): `make test`
# has just proven them equal to a fresh run under strict nbval, so the build executes nothing
# (a chapter whose code changed without `make sync` is executed by the build instead). When a
# stored notebook changes, Sphinx's saved doctrees are dropped so every page is read afresh.
OUTPUTS_STAMP := _build/.outputs-stamp
$(OUTPUTS_STAMP): $(wildcard notebooks/*.ipynb) $(shell find src -name '*.py' -o -name '*.js')
	rm -rf _build/.doctrees
	mkdir -p _build && touch $@

book: setup $(OUTPUTS_STAMP)
	$(BIN)/python scripts/prime_cache.py
	$(BOOK)
	@echo "Book built: file://$(CURDIR)/_build/html/index.html"
	@test -f _build/html/attention-and-transformers.pdf || echo "No PDF in this build \
	(the introduction links the published one): make pdf prints this build's."

browser-deps:
	command -v chromium >/dev/null || scripts/install_system_deps.sh chromium

unit: setup
	$(BIN)/pytest -q -m "not browser" tests/

notebooks: setup
	$(NBVAL) -q

lint: setup
	$(BIN)/ruff check src tests benchmarks scripts notebooks/*.ipynb
	$(BIN)/ruff format --check src tests benchmarks scripts
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
	$(BIN)/zizmor --offline --quiet .github/workflows/

# Each chapter executes three times, once per CPU code path: under strict nbval on the declared
# path, in the Colab-like runtime on the no-vector path, and on this machine's native path
# (tests/test_cpu_paths.py); the site build executes none (checked by prime_cache.py --verify).
# Three lanes start together and share the two cores: strict nbval with the unit tests (two
# xdist workers, one notebook or test file each at a time), the runtime lane (two workers: the
# Colab-like runtime, the native-path run and the tests that train models, marker slow), and
# the site lane (`make site-checks`: the build from stored outputs, then the site's browser
# tests). Chapters and tests use one thread each, and most of a chapter's run is waiting on a
# kernel, so more lanes than cores keeps both busy (benchmarks/RESULTS.md). Logs are printed at
# the end. Each background lane is its own process group (setsid), so a failure elsewhere stops
# it with everything it started (kernels, Chromium).
# What a reader meets beyond the site's pages (JupyterLab, phone widths, screenshots, the PDF)
# is `make test-surfaces`: minutes of browser time that a change to a chapter's text or code
# rarely needs before it is pushed. CI (.ci/run) runs `make test` and then it.
RUNTIME_LOG := _build/background-tests.log
SITE_LOG    := _build/site-tests.log
SIDE_LOG    := _build/side-browser-tests.log
SURFACES    := tests/test_site.py::test_pages_fit_a_phone \
               tests/test_site.py::test_screenshots_for_review \
               tests/test_site.py::test_whole_book_pdf_builds_with_sane_page_and_figure_counts \
               tests/test_site.py::test_every_internal_link_and_anchor_resolves  # after the PDF
BROWSER     := env ATTNBOOK_REQUIRE_BROWSER=1 $(BIN)/pytest -q -p no:cacheprovider -m browser
WORKERS     := -n 2 --dist loadfile
DURATIONS   := --durations=15 --durations-min=5  # each lane's log names its slowest tests
test: setup browser-deps
	@mkdir -p _build
	@set -e; \
	setsid $(BIN)/pytest -q -p no:cacheprovider $(WORKERS) $(DURATIONS) \
	    -m "(runtime or slow) and not browser" tests/ > $(RUNTIME_LOG) 2>&1 & runtime=$$!; \
	setsid $(MAKE) --no-print-directory site-checks > $(SITE_LOG) 2>&1 & site=$$!; \
	trap 'kill -- -$$runtime -$$site 2> /dev/null || true' EXIT; \
	set -x; \
	$(MAKE) --no-print-directory lint; \
	$(NBVAL_ENV) $(BIN)/pytest -q $(WORKERS) $(DURATIONS) $(NBVAL_FLAGS) \
	    -m "not browser and not runtime and not slow" tests/ notebooks/; \
	set +x; \
	echo "Site build and browser tests (log: $(SITE_LOG)):"; \
	if wait $$site; then grep -E "[0-9]+ (passed|failed)|Book built" $(SITE_LOG); \
	else cat $(SITE_LOG); exit 1; fi; \
	echo "Colab-like runtime, native-path and model-training tests (log: $(RUNTIME_LOG)):"; \
	if wait $$runtime; then grep -E "[0-9]+ (passed|failed)" $(RUNTIME_LOG); \
	else cat $(RUNTIME_LOG); exit 1; fi

# The site lane of `make test`: the build, proof that it executed no chapter, then the site's
# browser tests but the surfaces.
site-checks: setup browser-deps
	@$(MAKE) --no-print-directory book
	$(BIN)/python scripts/prime_cache.py --verify
	$(BROWSER) $(DURATIONS) tests/ --ignore tests/test_jupyterlab.py \
	    $(foreach t,$(SURFACES),--deselect $(t))

# JupyterLab (open, run, move, save, reopen a chapter) beside the phone-width, screenshot and
# PDF pass (whose link check reads the PDF), on the built site.
test-surfaces: setup browser-deps
	@$(MAKE) --no-print-directory book
	@set -e; setsid $(BROWSER) $(DURATIONS) $(SURFACES) > $(SIDE_LOG) 2>&1 & side=$$!; \
	trap 'kill -- -$$side 2> /dev/null || true' EXIT; \
	$(BROWSER) $(DURATIONS) tests/test_jupyterlab.py; \
	echo "Phone, screenshot and PDF tests (log: $(SIDE_LOG)):"; \
	if wait $$side; then grep -E "[0-9]+ (passed|failed)" $(SIDE_LOG); \
	else cat $(SIDE_LOG); exit 1; fi

sync: setup
	$(BIN)/python scripts/sync_notebooks.py $(NB)

lab: $(STAMP)  # JupyterLab needs the Python environment only (no npm, no browser)
	$(BIN)/python scripts/lab.py $(LAB_ARGS)

serve:
	test -f _build/html/index.html || $(MAKE) book
	$(BIN)/python -m http.server --bind 127.0.0.1 --directory _build/html $(PORT)

# Printed from the built site by the system Chromium (no TeX, nothing downloaded) into the
# site itself, where the intro page links to it; the browser test in `make test` does the same.
pdf: book browser-deps
	$(BIN)/python scripts/build_pdf.py

bench: setup
	$(BIN)/python benchmarks/notebook_times.py --write
	$(BIN)/python benchmarks/book_build.py --write
	$(BIN)/python benchmarks/widget_latency.py --write
	$(BIN)/python benchmarks/tiled_attention.py --write
	$(BIN)/python benchmarks/labs_vs_source.py --write
	$(BIN)/python benchmarks/clean_clone.py --write

# Every claim of the training chapters on 8 seeds and every CPU code path this machine offers;
# writes benchmarks/sweep.json and benchmarks/SWEEP.md, which tests/test_sweep.py checks.
sweep: setup
	$(BIN)/python benchmarks/sweep.py

clean:
	rm -rf _build .pytest_cache .ruff_cache .hypothesis dist build src/*.egg-info
	find . -name __pycache__ -not -path "./$(VENV)/*" -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) node_modules book/_vendor
