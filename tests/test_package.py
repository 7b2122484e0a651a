"""The checkout's root folder is the package `langadapt` (see pyproject.toml)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import langadapt

ROOT = Path(__file__).resolve().parent.parent


def test_the_root_init_imports_under_the_name_pytest_gives_it():
    """pytest imports the checkout's root ``__init__.py`` as a test package named after the
    folder of the checkout — for a folder such as ``tmp.x1y2`` with no parent package at all
    (the name ``__init__``): it must import there too, or every test errors at setup."""
    spec = importlib.util.spec_from_file_location("__init__", ROOT / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.make_agent is langadapt.make_agent
    assert module.__version__ == langadapt.__version__


def test_make_run_pins_the_kernels_to_avx2_unless_the_variables_are_set():
    import shutil
    import subprocess
    from pathlib import Path

    import pytest

    if shutil.which("make") is None:
        pytest.skip("no make")
    root = Path(__file__).resolve().parents[1]
    recipe = subprocess.run(["make", "-n", "-W", ".venv/.langadapt-run-installed", "run"],
                            cwd=root, capture_output=True, text=True, check=True).stdout
    line = next(line for line in recipe.splitlines() if "configs/quickstart.yaml" in line)
    pinned = subprocess.run(["bash", "-c", line.replace(".venv/bin/langadapt run", "env #")],
                            capture_output=True, text=True, check=True,
                            env={"PATH": "/usr/bin:/bin", "MKL_CBWR": "COMPATIBLE"}).stdout
    assert "ATEN_CPU_CAPABILITY=avx2" in pinned and "ONEDNN_MAX_CPU_ISA=AVX2" in pinned
    assert "MKL_CBWR=COMPATIBLE" in pinned  # a variable already set is kept


def test_the_benchmarks_and_test_servers_are_left_out_of_the_wheel(monkeypatch, capsys):
    """setup.py ships no benchmarks/ or tests/ (they run from a checkout), and without them
    `langadapt bench` is one line saying so."""
    from experiment_fixtures import run_cli

    setup = (ROOT / "setup.py").read_text()
    assert 'NOT_SHIPPED = ("tests", "benchmarks")' in setup
    assert (ROOT / "benchmarks" / "__init__.py").is_file()
    assert not (ROOT / "experiments" / "benchmarks").exists()
    assert (ROOT / "tests" / "standin_server.py").is_file()
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None
                        if name == "langadapt.benchmarks" else real(name, *args))
    code, _, err = run_cli(capsys, "bench", "--only", "cli")
    assert code == 2 and "run from a checkout" in err and err.count("\n") == 1
