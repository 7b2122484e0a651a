"""langadapt: language in the reinforcement-learning loop.

The installed package is this repository's root folder under one import name; its
sub-packages are the folders beside this file (docs/install.md, the table of layers)::

    from langadapt import LanguageObservation, load_run, make_adapter, make_agent, train

Importing it registers the ``langadapt/...`` gymnasium ids; the names above (and the LLM
roles' agents they register) are imported on first use, so the command line starts
without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

# Absolute imports in this one file (every other module imports relatively): pytest imports
# the checkout's root ``__init__.py`` as a test package named after the folder the checkout
# sits in (any name, e.g. ``tmp.x1y2``), where relative imports have no parent package.
from langadapt import environments  # noqa: F401  (registers the langadapt/... ids)

__version__ = "0.2.0"

#: The public names, imported on first use: name -> (module, attribute).
_LAZY = {
    "LanguageObservation": ("langadapt.adapters", "LanguageObservation"),
    "make_adapter": ("langadapt.adapters", "make"),
    "evaluate": ("langadapt.agents", "evaluate"),
    "make_agent": ("langadapt.agents", "make_agent"),
    "train": ("langadapt.agents", "train"),
    "load_run": ("langadapt.experiments.kept", "load_run"),
}

__all__ = ["LanguageObservation", "__version__", "evaluate", "load_run", "make_adapter",
           "make_agent", "train"]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'langadapt' has no attribute {name!r}")
    importlib.import_module("langadapt.roles")  # registers the llm_policy, ... agents
    module, attribute = _LAZY[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value
