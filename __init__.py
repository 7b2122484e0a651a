"""langadapt: language in the reinforcement-learning loop.

The installed package is this repository's root folder under one import name; its
sub-packages are the folders beside this file (see the README, "Layout")::

    from langadapt import LanguageObservation, make_adapter, make_agent, train

Importing it registers the ``langadapt/...`` gymnasium ids.
"""

# Absolute imports in this one file (every other module imports relatively): pytest imports
# the checkout's root ``__init__.py`` as a test package named after the folder the checkout
# sits in (any name, e.g. ``tmp.x1y2``), where relative imports have no parent package.
from langadapt import (
    environments,  # noqa: F401  (registers the langadapt/... ids)
    roles,  # noqa: F401  (registers the llm_policy and llm_policy_search agents)
)
from langadapt.adapters import LanguageObservation
from langadapt.adapters import make as make_adapter
from langadapt.agents import evaluate, make_agent, train

__version__ = "0.2.0"

__all__ = ["LanguageObservation", "__version__", "evaluate", "make_adapter", "make_agent", "train"]
