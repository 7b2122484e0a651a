"""BALROG's BabyAI suite: GLAM's ``MixedTrainLocal`` level, one goal type per environment,
built from minigrid's BabyAI blocks (its verifier decides success). Imports ``minigrid``.
See docs/environments.md.
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

from ._checks import checked
from .minigrid import (
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
    """GLAM's ``MixedTrainLocal`` with one goal type (`GOAL_TYPES`) or ``"mixed"`` (one drawn
    each episode); ``missions``: ``train`` or ``test``; ``excluded``: phrases never produced.
    Other keyword arguments go to ``RoomGridLevel`` (docs/environments.md)."""

    @checked
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
