""":class:`OracleAgent` (``type: oracle``): the ceiling of a table — it acts with the
environment's oracle (:func:`~.oracles.oracle_for`: BabyAI's own bot on BabyAI levels, the
shortest path on mazes and MiniGrid's reach-the-goal levels) and learns nothing. See
docs/agents.md (The floor and the ceiling)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from ..agents.base import Agent
from .oracles import Oracle, oracle_for

__all__ = ["OracleAgent"]


class OracleAgent(Agent):
    """The oracle's move in the bound environment (:meth:`bind`); observations are ignored,
    so it runs beside any adapter. ValueError at :meth:`bind` on an environment without an
    oracle; nothing to train (``learns`` is False: an experiment only evaluates it)."""

    kind: ClassVar[str] = "oracle"
    learns = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env: Any = None
        self.oracle: Oracle | None = None
        self._all_moves = list(range(self.n_actions))

    def bind(self, env: Any) -> None:
        """Follow ``env`` (one environment, wrapped or not) with its oracle."""
        base = getattr(env, "unwrapped", env)
        if base is not self.env:
            self.oracle = oracle_for(base, role="agent oracle")
            self.env = base

    def check_input(self, obs: Any) -> None:
        """Any observation: the oracle reads the environment, not the observation."""

    def _act(self, obs: Any, legal_moves: Sequence[int] | None, explore: bool) -> int:
        """The oracle's move among ``legal_moves`` (``explore`` makes no difference)."""
        if self.oracle is None:
            raise ValueError("the oracle agent acts in an environment: call bind(env) first "
                             "(agents.evaluate does)")
        return int(self.oracle.best_move(self.env, self._all_moves if legal_moves is None
                                         else legal_moves))

    def _learn(self, *transition: Any, **options: Any) -> None:
        """Learns nothing (:meth:`learn` checks the transition)."""
