"""The goal types of BALROG's BabyAI suite and the gymnasium id of its level, without
importing ``minigrid`` (the level itself: :mod:`environments.babyai_suite`)."""

from __future__ import annotations

from typing import Any

import gymnasium

__all__ = ["GLAM_EXCLUDED", "GOAL_TYPES", "MISSION_SETS", "MIXED", "SUITE_LEVEL_ID",
           "check_goal", "register_suite_level", "seen_pairs"]

#: The five goal types of ``MixedTrainLocal``, as BALROG names its tasks
#: (``BabyAI-MixedTrainLocal-v0/<goal>``).
GOAL_TYPES: tuple[str, ...] = ("goto", "pickup", "open", "putnext", "pick_up_seq_go_to")

#: Mission phrases GLAM's training level never produces (kept for its generalisation test).
GLAM_EXCLUDED: tuple[str, ...] = ("yellow box", "red key", "red door", "green ball",
                                  "grey door")

#: The goal that draws one of :data:`GOAL_TYPES` at random for each episode (one agent over
#: the five goal types, as GLAM trains).
MIXED = "mixed"

#: ``missions``: GLAM's training missions (never naming a :data:`GLAM_EXCLUDED` pair) or its
#: test missions (``MixedTestLocal``: naming only those pairs).
MISSION_SETS: tuple[str, ...] = ("train", "test")

#: The level's gymnasium id (bridged as ``langadapt/BabyAI-MixedTrainLocal-v0``).
SUITE_LEVEL_ID = "BabyAI-MixedTrainLocal-v0"


def check_goal(goal: Any) -> str:
    """``goal`` if it is one of :data:`GOAL_TYPES` or :data:`MIXED`; a ValueError naming them
    otherwise."""
    if goal not in (*GOAL_TYPES, MIXED):
        raise ValueError(f"goal={goal!r}: expected one of {', '.join(GOAL_TYPES)} or {MIXED}")
    return goal


def seen_pairs(colors: tuple[str, ...]) -> tuple[str, ...]:
    """The phrases GLAM's test level never produces: every colour-object pair (key, ball,
    box, door) but the :data:`GLAM_EXCLUDED` ones, so its missions name only those."""
    return tuple(f"{color} {kind}" for color in colors for kind in ("key", "ball", "box", "door")
                 if f"{color} {kind}" not in GLAM_EXCLUDED)


def register_suite_level() -> None:
    """Register :data:`SUITE_LEVEL_ID` with gymnasium (once; minigrid is imported when the
    level is made)."""
    if SUITE_LEVEL_ID not in gymnasium.registry:
        package = __name__.rsplit(".", 1)[0]
        gymnasium.register(id=SUITE_LEVEL_ID,
                           entry_point=f"{package}.babyai_suite:MixedTrainLocal")
