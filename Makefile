# The two set-up commands of the README. Both bootstrap .venv on a fresh machine.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTHON ?= python3

.PHONY: run test lint

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

test: lint
	$(VENV)/bin/pytest -q
