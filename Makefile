# The two commands a new user needs: `make run` and `make test`.
# Both create .venv when it is missing and install the project into it once;
# the stamp file makes a second run install nothing.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.langadapt-installed
# Extras the test suite exercises (Ray clusters, GRPO fine-tuning) besides the dev tools.
EXTRAS := dev,ray,finetune
SMOKE := $(or $(TMPDIR),/tmp)/langadapt-wheel-smoke
export TOKENIZERS_PARALLELISM := false

.PHONY: run test test-slow unit-test import-lint wheel wheel-smoke bench lint clean-venv

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --constraint constraints.txt --editable '.[$(EXTRAS)]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/langadapt run configs/quickstart.yaml --force

# The layer contracts (.importlinter), the installed-wheel smoke from outside the checkout,
# then the test suite (whose summary line closes the output).
test: import-lint wheel-smoke unit-test

unit-test: $(STAMP)
	$(PY) -m pytest -q

# A layer imported from below (or an import cycle) fails here, naming the import.
import-lint: $(STAMP)
	$(VENV)/bin/lint-imports

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

# A wheel built from the committed files only (git archive of HEAD), as a user gets it.
wheel: $(STAMP)
	rm -rf $(SMOKE) && mkdir -p $(SMOKE)/src $(SMOKE)/dist
	git archive HEAD | tar -x -C $(SMOKE)/src
	$(PY) -m pip wheel --quiet --no-deps --wheel-dir $(SMOKE)/dist $(SMOKE)/src

# Install that wheel (non-editable) into a fresh virtual environment and use it from a
# directory outside the repository: imports, every adapter by name, a tiny CLI experiment.
wheel-smoke: wheel
	$(PYTHON) -m venv $(SMOKE)/venv
	$(SMOKE)/venv/bin/python -m pip install --quiet --upgrade pip
	$(SMOKE)/venv/bin/python -m pip install --quiet --constraint constraints.txt $(SMOKE)/dist/langadapt-*.whl
	cd $(SMOKE) && $(SMOKE)/venv/bin/python $(CURDIR)/.ci/wheel_smoke.py $(SMOKE)/dist/langadapt-*.whl $(CURDIR) $(SMOKE)/src

bench: $(STAMP)
	$(VENV)/bin/langadapt bench

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

clean-venv:
	rm -rf $(VENV)
