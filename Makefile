# The two commands a new user needs: `make run` and `make test`.
# Both create .venv when it is missing and install the project into it once; the stamp files
# make a second run install nothing. `make run` installs the core and what the quickstart
# needs (RUN_STAMP: nothing compiled); `make test` everything the tests exercise, the
# embedded LLM built portably included (STAMP), adding to a `make run` setup what it lacks.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.langadapt-installed
RUN_STAMP := $(VENV)/.langadapt-run-installed
# Extras the test suite exercises (Ray clusters, GRPO fine-tuning, the embedded LLM) besides
# the dev tools; the quickstart's (IQM and intervals: rliable).
EXTRAS := dev,ray,finetune,embedded
RUN_EXTRAS := stats
SMOKE := $(or $(TMPDIR),/tmp)/langadapt-wheel-smoke
export TOKENIZERS_PARALLELISM := false

# llama-cpp-python (the embedded LLM) is compiled from source. llama.cpp's default,
# GGML_NATIVE=ON, tunes the build to every instruction the compiler's CPU advertises; virtual
# CPUs that advertise AVX-512/AMX without running them then crash on every prompt (SIGSEGV
# in llama_decode). So the build targets any x86-64-v3 machine: AVX2, FMA, F16C, BMI2; no
# native tuning, no AVX-512, no AMX (on other architectures the x86 flags are ignored).
# A non-empty CMAKE_ARGS in your environment is used instead, unchanged.
PORTABLE_LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
	-DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF \
	-DGGML_AMX_BF16=OFF
ifeq ($(strip $(CMAKE_ARGS)),)
CMAKE_ARGS := $(PORTABLE_LLAMA_CMAKE_ARGS)
endif
# The wheel is built once per .venv into this folder with pip's cache off, so no natively
# tuned wheel from pip's cache (another project's, an older checkout's) can be picked up;
# .venv and the wheel smoke's fresh environment both install this file, and the project's
# own install then finds llama-cpp-python already satisfied. The flags it was built with are
# recorded beside it (tests/test_llm_llamacpp.py checks the build against them).
LLAMA_WHEELS := $(VENV)/llama-cpp-wheel

.PHONY: run test test-fast test-slow unit-test import-lint wheel wheel-smoke bench lint clean-venv

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	rm -rf $(LLAMA_WHEELS)
	CMAKE_ARGS='$(CMAKE_ARGS)' $(PY) -m pip wheel --no-cache-dir --no-deps \
		--no-binary llama-cpp-python --constraint constraints.txt \
		--wheel-dir $(LLAMA_WHEELS) llama-cpp-python
	echo '$(CMAKE_ARGS)' > $(LLAMA_WHEELS)/cmake-args.txt
	$(PY) -m pip install --force-reinstall --no-deps $(LLAMA_WHEELS)/llama_cpp_python-*.whl
	$(PY) -m pip install --constraint constraints.txt --editable '.[$(EXTRAS)]'
	touch $(STAMP) $(RUN_STAMP)

# A .venv set up by `make test` has all `make run` needs. `--no-compile`: pip would byte-compile
# every installed module (torch, sympy, transformers: half of the setup's time); Python compiles
# only what the quickstart imports, once, on first import.
$(RUN_STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	test -f $(STAMP) && test $(STAMP) -nt pyproject.toml || { \
		$(PY) -m pip install --quiet --no-compile --upgrade pip && \
		$(PY) -m pip install --no-compile --constraint constraints.txt --editable '.[$(RUN_EXTRAS)]'; }
	touch $(RUN_STAMP)

# The quickstart with torch's, MKL's and oneDNN's kernels pinned to AVX2, so that every x86-64
# CPU with AVX2 prints the README's figures (an AVX-512 machine's own kernels train to other
# numbers; docs/performance.md, "Figures across CPUs"). Variables already set are kept.
PORTABLE_KERNELS := ATEN_CPU_CAPABILITY=$${ATEN_CPU_CAPABILITY:-avx2} \
	MKL_CBWR=$${MKL_CBWR:-AVX2} ONEDNN_MAX_CPU_ISA=$${ONEDNN_MAX_CPU_ISA:-AVX2}

run: $(RUN_STAMP)
	$(PORTABLE_KERNELS) $(VENV)/bin/langadapt run configs/quickstart.yaml --force
	@echo "extras (SB3 agents, TensorBoard, Ray, ...) into this .venv: $(PY) -m pip install \
	--constraint constraints.txt --editable '.[$(RUN_EXTRAS),sb3,tensorboard]' (docs/install.md)"

# The layer contracts (.importlinter), the installed-wheel smoke from outside the checkout,
# then the test suite (whose summary line closes the output).
test: import-lint wheel-smoke unit-test

# Two workers (pytest-xdist), each test file on one worker (its module fixtures built once);
# the 25 slowest tests listed before the summary line (docs/development.md keeps them).
PYTEST_WORKERS ?= 2
unit-test: $(STAMP)
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --durations=25

# The inner loop: no subprocesses, worker pools, Ray clusters or real models (`heavy`).
test-fast: $(STAMP)
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile -m "not slow and not heavy"

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
	$(SMOKE)/venv/bin/python -m pip install --quiet --no-deps $(LLAMA_WHEELS)/llama_cpp_python-*.whl
	$(SMOKE)/venv/bin/python -m pip install --quiet --constraint constraints.txt "$$(ls $(SMOKE)/dist/langadapt-*.whl)[embedded]"
	cd $(SMOKE) && $(SMOKE)/venv/bin/python $(CURDIR)/.ci/wheel_smoke.py $(SMOKE)/dist/langadapt-*.whl $(CURDIR) $(SMOKE)/src

bench: $(STAMP)
	$(VENV)/bin/langadapt bench

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

clean-venv:
	rm -rf $(VENV)
