"""The goal types of BALROG's BabyAI suite and the gymnasium id of its level, without
importing ``minigrid`` (the level itself: :mod:`environments.babyai_suite`)."""

from __future__ import annotations

from typing import Any

import gymnasium

__all__ = ["GLAM_EXCLUDED", "GOAL_TYPES", "SUITE_LEVEL_ID", "check_goal", "register_suite_level"]

#: The five goal types of ``MixedTrainLocal``, as BALROG names its tasks
#: (``BabyAI-MixedTrainLocal-v0/<goal>``).
GOAL_TYPES: tuple[str, ...] = ("goto", "pickup", "open", "putnext", "pick_up_seq_go_to")

#: Mission phrases GLAM's training level never produces (kept for its generalisation test).
GLAM_EXCLUDED: tuple[str, ...] = ("yellow box", "red key", "red door", "green ball",
                                  "grey door")

#: The level's gymnasium id (bridged as ``langadapt/BabyAI-MixedTrainLocal-v0``).
SUITE_LEVEL_ID = "BabyAI-MixedTrainLocal-v0"


def check_goal(goal: Any) -> str:
    """``goal`` if it is one of :data:`GOAL_TYPES`; a ValueError naming the five otherwise."""
    if goal not in GOAL_TYPES:
        raise ValueError(f"goal={goal!r}: expected one of {', '.join(GOAL_TYPES)}")
    return goal


def register_suite_level() -> None:
    """Register :data:`SUITE_LEVEL_ID` with gymnasium (once; minigrid is imported when the
    level is made)."""
    if SUITE_LEVEL_ID not in gymnasium.registry:
        package = __name__.rsplit(".", 1)[0]
        gymnasium.register(id=SUITE_LEVEL_ID,
                           entry_point=f"{package}.babyai_suite:MixedTrainLocal")
