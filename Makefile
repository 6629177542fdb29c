# Quick start: `make demo` and `make test`. Both set up .venv on first use and are fast
# when it is already there.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.steptrace-installed
DB     ?= steptrace.duckdb

.PHONY: demo test test-fast bench docs clean chromium bubblewrap

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "steptrace needs Python 3.11+ (set PYTHON=...)")'
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@# An editable install is not byte-compiled (a wheel install is): without this, where
	@# PYTHONDONTWRITEBYTECODE is set every worker and command compiles every host module
	@# it imports (~0.1 s a process). The guest's tracer/ is left alone: the guest build
	@# reads it.
	$(BIN)/python -m compileall -q engine wasm_sandbox native_sandbox
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/steptrace build
	$(BIN)/steptrace trace --demo --db $(DB)
	@echo; echo "-- queries/runs_by_status.sql"
	$(BIN)/steptrace sql -f queries/runs_by_status.sql --db $(DB)
	@echo; echo "-- queries/hottest_lines.sql"
	$(BIN)/steptrace sql -f queries/hottest_lines.sql --db $(DB)
	@echo; echo "steptrace is installed in $(VENV): run 'source $(VENV)/bin/activate' to put it on PATH (or call $(BIN)/steptrace)."

test: $(STAMP) chromium bubblewrap
	$(BIN)/python -m pytest -q

# The inner loop: everything but the tests marked slow (the whole CRUXEval corpus, the
# adversarial and fault suites, builds, Chromium). What CI runs is `make test`.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

# The report test (tests/analytics/test_report.py) loads the page in Debian's headless Chromium.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  command -v apt-get >/dev/null 2>&1 || { echo "chromium is missing and there is no apt-get: install Chromium as 'chromium' on PATH"; exit 1; }; \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  [ -z "$$SUDO" ] || command -v sudo >/dev/null 2>&1 || { echo "chromium is missing: install Debian's chromium package as root (apt-get install chromium)"; exit 1; }; \
	  echo "installing Debian's chromium for the report test"; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null; }

# The native backend (trace --backend native) jails its interpreter with Debian's bubblewrap
# and compiles its seccomp filters with libseccomp2 (tests/native needs both).
bubblewrap:
	@{ command -v bwrap >/dev/null 2>&1 && ldconfig -p 2>/dev/null | grep -q libseccomp.so.2; } || { \
	  command -v apt-get >/dev/null 2>&1 || { echo "bubblewrap or libseccomp2 is missing and there is no apt-get: install them ('bwrap' on PATH)"; exit 1; }; \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  [ -z "$$SUDO" ] || command -v sudo >/dev/null 2>&1 || { echo "bubblewrap is missing: install Debian's bubblewrap and libseccomp2 packages as root"; exit 1; }; \
	  echo "installing Debian's bubblewrap and libseccomp2 for the native backend's tests"; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends bubblewrap libseccomp2 >/dev/null; }

bench: $(STAMP)
	$(BIN)/python bench/trace_cruxeval.py

# The generated pages of docs/reference (CLI, named queries, schema); tests/test_docs.py
# fails when one is stale.
docs: $(STAMP)
	$(BIN)/python -m steptrace._docs

clean:
	rm -rf $(VENV) $(DB) .pytest_cache
