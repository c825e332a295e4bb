# Two commands do all set-up: `make demo` and `make test` create the virtualenv when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed

.PHONY: demo test unit bench docs install clean

demo: $(INSTALLED)
	$(PY) -m examples.demo

PYTEST := $(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile

# The unit tests first (quick, no proxy or agent), the end-to-end tests only once they pass.
test: $(INSTALLED)
	$(PYTEST) tests/unit
	$(PYTEST) tests/e2e

# One layer's unit tests: `make unit LAYER=proxy` runs tests/unit/proxy; without LAYER, all of them.
unit: $(INSTALLED)
	$(PYTEST) tests/unit$(if $(LAYER),/$(LAYER))

bench: $(INSTALLED)
	$(PY) bench/proxy_overhead.py

# The fault tables of docs/scenarios.md and docs/mcp-stdio.md, written from the fault kinds.
docs: $(INSTALLED)
	$(PY) -m faultproxy.scenarios.faults.docs_table

install: $(INSTALLED)

$(PY):
	$(PYTHON) -m venv $(VENV)

$(INSTALLED): pyproject.toml | $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test]"
	touch $(INSTALLED)

clean:
	rm -rf $(VENV) runs
