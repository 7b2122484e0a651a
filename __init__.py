"""langadapt: language in the reinforcement-learning loop.

The installed package is this repository's root folder under one import name; its
sub-packages are the folders beside this file (see the README, "Layout")::

    from langadapt import LanguageObservation, make_adapter, make_agent, train

Importing it registers the ``langadapt/...`` gymnasium ids.
"""

from . import (
    environments,  # noqa: F401  (registers the langadapt/... ids)
    roles,  # noqa: F401  (registers the llm_policy and llm_policy_search agents)
)
from .adapters import LanguageObservation
from .adapters import make as make_adapter
from .agents import evaluate, make_agent, train

__version__ = "0.2.0"

__all__ = ["LanguageObservation", "__version__", "evaluate", "make_adapter", "make_agent", "train"]
