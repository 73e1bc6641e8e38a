# The two set-up commands of the README. Both bootstrap .venv on a fresh machine.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTHON ?= python3

.PHONY: run test lint browser bench

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/acp-gateway serve $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check acp agents gateway tests
	$(VENV)/bin/mypy --strict acp gateway

# The browser test drives Debian's chromium (Playwright never downloads a browser here).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && apt-get install -y -qq chromium) >/dev/null; \
	  else echo "make test: install Debian's chromium (apt-get install chromium) for the browser test" >&2; exit 1; fi; }

test: lint browser
	$(VENV)/bin/pytest -q

# Benchmarks (not tests): one table, each figure beside a baseline from the same run. See bench/README.md.
bench: $(STAMP)
	env -u PYTHONUNBUFFERED $(PY) bench/run.py
