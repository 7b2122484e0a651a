"""BALROG's BabyAI suite: the ``MixedTrainLocal`` level, one goal type per environment.

BALROG (Paglieri et al. 2024) evaluates LLM agents on BabyAI's ``MixedTrainLocal`` level of
GLAM (Carta et al. 2023, flowersteam/Grounding_LLMs_with_online_RL), split into its five goal
types; minigrid does not ship the level. :class:`MixedTrainLocal` is written here from that
published definition with minigrid's BabyAI building blocks (``RoomGridLevel`` and the
verifier's instructions), so every mission is checked by BabyAI's own verifier:

==================== ================================== ==========================================
goal                 mission (examples)                 layout
==================== ================================== ==========================================
``goto``             go to the red ball                 one 8x8 room, ``num_dists + 1`` objects
``pickup``           pick up a blue key                 one room, ``num_dists + 1`` objects
``open``             open the purple door               two rooms joined by a locked door; its key
                     (or: open the door)                and ``num_dists`` objects in the agent's
                                                        room
``putnext``          put the green key next to the      one room, ``num_dists + 2`` objects
                     grey box
``pick_up_seq_go_to`` pick up a red box, then go to     one room, ``num_dists + 2`` objects
                     the blue ball (or: go to the blue
                     ball after you pick up a red box)
==================== ================================== ==========================================

Objects are keys, balls and boxes of BabyAI's six colours, placed at random (repeats
allowed); the agent starts at a random free cell of its room facing a random way, every
object reachable. ``num_dists`` (distractors) is 0 by default, as BALROG runs it (GLAM trained
with 8). As in GLAM's training level, missions naming a yellow box, a red key, a red door, a
green ball or a grey door are not produced (``excluded``; ``excluded=()`` allows them): GLAM
kept them for its generalisation test. The step limit is BabyAI's: 64 steps per room and
navigation (64 for goto and pickup, 128 for open, putnext and the sequence).

Registered as the gymnasium id ``BabyAI-MixedTrainLocal-v0`` and, bridged like every BabyAI
level (:mod:`environments.minigrid`), ``langadapt/BabyAI-MixedTrainLocal-v0``; the goal type
is the keyword ``goal``::

    env = gymnasium.make("langadapt/BabyAI-MixedTrainLocal-v0", goal="putnext")

This module imports ``minigrid`` (the optional extra): gymnasium imports it when the level
is made.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from minigrid.core.constants import COLOR_NAMES
from minigrid.core.roomgrid import RoomGrid
from minigrid.core.world_object import WorldObj
from minigrid.envs.babyai.core.roomgrid_level import RejectSampling, RoomGridLevel
from minigrid.envs.babyai.core.verifier import (
    AfterInstr,
    BeforeInstr,
    GoToInstr,
    ObjDesc,
    OpenInstr,
    PickupInstr,
    PutNextInstr,
)
from pydantic import Field, Strict

from ._checks import checked_arguments
from .babyai_goals import (
    GLAM_EXCLUDED,
    GOAL_TYPES,
    MISSION_SETS,
    MIXED,
    check_goal,
    seen_pairs,
)

__all__ = ["GLAM_EXCLUDED", "GOAL_TYPES", "MixedTrainLocal"]

#: Layouts drawn for one mission at most before giving up (a rejected layout is redrawn).
MAX_LAYOUTS = 1_000


def _describe(obj: WorldObj) -> ObjDesc:
    return ObjDesc(obj.type, obj.color)


class MixedTrainLocal(RoomGridLevel):
    """GLAM's ``MixedTrainLocal`` with one goal type, or all of them (see the module
    docstring).

    ``goal``: one of :data:`GOAL_TYPES`, or ``"mixed"``: one drawn at random each episode
    (``self.goal`` is the episode's). ``num_dists``: distractor objects (0..20).
    ``missions``: ``"train"`` (never naming a :data:`GLAM_EXCLUDED` pair) or ``"test"``
    (GLAM's ``MixedTestLocal``: naming only those pairs, a door always by its colour).
    ``excluded``: mission phrases never produced instead (with ``missions: train``).
    Other keyword arguments go to ``RoomGridLevel`` (``room_size``, ``max_steps``,
    ``agent_view_size``, ``render_mode``...).
    """

    @checked_arguments
    def __init__(self, goal: str = "goto",
                 num_dists: Annotated[int, Strict(), Field(ge=0, le=20)] = 0,
                 missions: str = "train",
                 excluded: Sequence[str] | None = None,
                 room_size: Annotated[int, Strict(), Field(ge=5, le=16)] = 8,
                 **kwargs: Any) -> None:
        self.goal = check_goal(goal)
        self.mixed = goal == MIXED
        if missions not in MISSION_SETS:
            raise ValueError(f"missions={missions!r}: expected one of {', '.join(MISSION_SETS)}")
        if excluded is not None and missions == "test":
            raise ValueError(f"excluded={excluded!r} and missions='test' both choose the "
                             "missions: give one of them")
        if excluded is None:
            excluded = seen_pairs(tuple(COLOR_NAMES)) if missions == "test" else GLAM_EXCLUDED
        if isinstance(excluded, str) or not all(isinstance(p, str) for p in excluded):
            raise ValueError(f"excluded={excluded!r}: expected a list of mission phrases")
        self.num_dists = num_dists
        self.missions = missions
        self.excluded = tuple(excluded)
        self.door_colors = [c for c in COLOR_NAMES if f"{c} door" not in self.excluded]
        if goal in ("open", MIXED) and not self.door_colors:
            raise ValueError(f"excluded={excluded!r} leaves no door colour for goal 'open'")
        super().__init__(room_size=room_size, num_rows=1, num_cols=2 if goal == "open" else 1,
                         **kwargs)

    def _gen_grid(self, width: int, height: int) -> None:
        """With ``goal: mixed``, draw the episode's goal type first (and its rooms)."""
        if self.mixed:
            self.goal = self._rand_elem(GOAL_TYPES)
            self.num_cols = 2 if self.goal == "open" else 1
            self.width = (self.room_size - 1) * self.num_cols + 1
            width = self.width
        super()._gen_grid(width, height)

    # ------------------------------------------------------------------ mission
    def gen_mission(self) -> None:
        """Draw layouts until one gives an allowed mission with every object reachable."""
        for attempt in range(MAX_LAYOUTS):
            if attempt:
                RoomGrid._gen_grid(self, self.width, self.height)  # fresh walls and rooms
            try:
                self.instrs = self._layout_and_instruction()
                self.validate_instrs(self.instrs)
            except RejectSampling:
                continue
            mission = self.instrs.surface(self)
            if self.check_objs_reachable(raise_exc=False) and not any(
                    phrase in mission for phrase in self.excluded):
                return
        raise RuntimeError(f"no acceptable {self.goal} mission in {MAX_LAYOUTS} layouts "
                           f"(num_dists={self.num_dists}, excluded={self.excluded})")

    def _objects(self, count: int) -> list[WorldObj]:
        objects = self.add_distractors(0, 0, num_distractors=count, all_unique=False)
        self.place_agent(0, 0)
        return objects

    def _layout_and_instruction(self) -> Any:
        if self.goal == "open":
            return self._open_door()
        if self.goal in ("goto", "pickup"):
            target = self._rand_elem(self._objects(self.num_dists + 1))
            return (GoToInstr if self.goal == "goto" else PickupInstr)(_describe(target))
        objects = self._objects(self.num_dists + 2)
        first = self._rand_elem(objects)
        second = self._rand_elem([o for o in objects if o is not first])
        if self.goal == "putnext":
            if (first.type, first.color) == (second.type, second.color):
                raise RejectSampling("the two objects look alike")
            return PutNextInstr(_describe(first), _describe(second))
        pick, go = PickupInstr(_describe(first)), GoToInstr(_describe(second))
        return BeforeInstr(pick, go) if self._rand_bool() else AfterInstr(go, pick)

    def _open_door(self) -> OpenInstr:
        """Two rooms side by side; one is locked behind a door of a random allowed colour,
        the other holds the agent, the door's key and the distractors."""
        color = self._rand_elem(self.door_colors)
        locked = self._rand_int(0, 2)
        free = 1 - locked
        self.add_door(locked, 0, 0 if locked == 0 else 2, color=color, locked=True)
        self.add_object(free, 0, "key", color)
        if self.num_dists:
            self.add_distractors(free, 0, num_distractors=self.num_dists, all_unique=False)
        self.place_agent(free, 0)
        named = color if self.missions == "test" else self._rand_elem([None, color])
        return OpenInstr(ObjDesc("door", named))
