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
