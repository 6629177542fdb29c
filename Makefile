# Quick start: `make demo` and `make test`. Both set up .venv on first use and are fast
# when it is already there.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.steptrace-installed
DB     ?= steptrace.duckdb

.PHONY: demo test bench clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "steptrace needs Python 3.11+ (set PYTHON=...)")'
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/steptrace build
	$(BIN)/steptrace trace --demo --db $(DB)
	@echo; echo "-- queries/runs_by_status.sql"
	$(BIN)/steptrace sql -f queries/runs_by_status.sql --db $(DB)
	@echo; echo "-- queries/hottest_lines.sql"
	$(BIN)/steptrace sql -f queries/hottest_lines.sql --db $(DB)

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/trace_cruxeval.py

clean:
	rm -rf $(VENV) $(DB) .pytest_cache
