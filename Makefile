# The interface to the book. Every target sets itself up from nothing (Python 3.11 + make).
#   make book   execute chapters (cached) and build the static site into _build/html
#   make test   every check: unit/property tests, strict nbval, .md/.ipynb sync, ruff,
#               a warnings-as-errors book build, the browser test, a fresh-install run
#   make lab    JupyterLab on notebooks/        make serve  serve _build/html on 127.0.0.1
#   make sync   .md -> .ipynb, re-executed in a fresh kernel (after editing a chapter)
#   make bench  benchmarks/ (timings printed as ratios; see benchmarks/RESULTS.md)
#   make clean  remove builds and caches (keeps .venv; `make distclean` removes it too)

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
ASSETS := book/_vendor/.stamp
PORT   ?= 8000
# The static-site build shows each widget's HTML+JavaScript face only (see attnbook.widgets).
BOOK   := ATTNBOOK_WIDGETS=static $(BIN)/jupyter-book build . -W -n --keep-going
NBVAL  := $(BIN)/pytest -p no:cacheprovider --nbval --nbval-current-env \
          --nbval-sanitize-with tests/nbval_sanitize.cfg notebooks/

.PHONY: book test unit notebooks lint sync lab serve bench clean distclean setup browser-deps

setup: $(STAMP) $(ASSETS)

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	touch $@

# Browser assets from pinned npm packages (needs node/npm; installed from Debian if missing).
$(ASSETS): package.json package-lock.json scripts/vendor_assets.py | $(STAMP)
	command -v npm >/dev/null || scripts/install_system_deps.sh node
	npm ci --no-audit --no-fund --loglevel=error
	$(BIN)/python scripts/vendor_assets.py
	touch $@

# jupyter-cache keys each chapter by its own code only; the outputs also depend on attnbook
# (a widget's JavaScript is embedded in them), so a package change clears the cache and
# Sphinx's saved doctrees.
CACHE_STAMP := _build/.attnbook-stamp
$(CACHE_STAMP): $(shell find src -name '*.py' -o -name '*.js')
	rm -rf _build/.jupyter_cache _build/.doctrees  # re-read every page, re-execute every chapter
	mkdir -p _build && touch $@

book: setup $(CACHE_STAMP)
	$(BOOK)
	@echo "Book built: file://$(CURDIR)/_build/html/index.html"

browser-deps:
	command -v chromium >/dev/null || scripts/install_system_deps.sh chromium

unit: setup
	$(BIN)/pytest -q -m "not browser" tests/

notebooks: setup
	$(NBVAL) -q

lint: setup
	$(BIN)/ruff check src tests benchmarks scripts notebooks/*.ipynb
	$(BIN)/ruff format --check src tests benchmarks scripts

test: setup browser-deps $(CACHE_STAMP)
	$(MAKE) --no-print-directory lint
	$(BIN)/pytest -q -m "not browser" tests/
	$(NBVAL) -q
	$(BOOK)
	ATTNBOOK_REQUIRE_BROWSER=1 $(BIN)/pytest -q -m browser tests/

sync: setup
	$(BIN)/python scripts/sync_notebooks.py $(NB)

lab: $(STAMP)  # JupyterLab needs the Python environment only (no npm, no browser)
	$(BIN)/python scripts/lab.py $(LAB_ARGS)

serve:
	test -f _build/html/index.html || $(MAKE) book
	$(BIN)/python -m http.server --bind 127.0.0.1 --directory _build/html $(PORT)

bench: setup
	$(BIN)/python benchmarks/notebook_times.py --write
	$(BIN)/python benchmarks/book_build.py --write
	$(BIN)/python benchmarks/widget_latency.py --write
	$(BIN)/python benchmarks/tiled_attention.py --write

clean:
	rm -rf _build .pytest_cache .ruff_cache .hypothesis dist build src/*.egg-info
	find . -name __pycache__ -not -path "./$(VENV)/*" -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) node_modules book/_vendor
