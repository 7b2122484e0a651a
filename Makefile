# The two commands a new user needs: `make run` and `make test`.
# Both create .venv when it is missing and install the project into it once;
# the stamp file makes a second run install nothing.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.langadapt-installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: run test test-slow bench lint clean-venv

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --constraint constraints.txt --editable '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/langadapt run configs/quickstart.yaml --force

test: $(STAMP)
	$(PY) -m pytest -q

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

bench: $(STAMP)
	$(VENV)/bin/langadapt bench

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean-venv:
	rm -rf $(VENV)
