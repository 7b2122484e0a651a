"""MiniGrid and BabyAI levels with this library's conventions (the ``minigrid`` extra,
imported only when a level is made), their states in words (`MiniGridDescriber`: a copy of
minigrid's encodings, tested against ``minigrid.core.constants``), their language spec, and
the goal types of BALROG's BabyAI suite (the level itself: `.babyai_suite`). See
docs/environments.md.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import gymnasium
import numpy as np
from gymnasium import spaces
from pydantic import Field, Strict

from ._checks import MAX_STEP_LIMIT, check_action, checked, episode_over_error
from .language import Describer, LanguageSpec, register_language

__all__ = ["ACTION_NAMES", "COLOR_NAMES", "DIRECTION_NAMES", "DOOR_STATES", "GLAM_EXCLUDED",
           "GOAL_TYPES", "INSTALL_HINT", "MINIGRID_IDS", "MINIGRID_TASK", "MISSION_SETS",
           "MISSION_WORDS", "MIXED", "OBJECT_NAMES", "SUITE_LEVEL_ID", "VOCABULARY",
           "MiniGridBridge", "MiniGridDescriber", "MiniGridNotInstalled", "check_goal",
           "decode_mission", "encode_mission", "is_minigrid_id", "make_minigrid",
           "observation_size", "register_minigrid_ids", "register_suite_level",
           "require_minigrid", "seen_pairs"]


# --------------------------------------------------------------------------- BabyAI suite
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



# --------------------------------------------------------------------------- describer
#: minigrid's ``IDX_TO_OBJECT`` (``minigrid.core.constants``), by index.
OBJECT_NAMES: tuple[str, ...] = ("unseen", "empty", "wall", "floor", "door", "key", "ball",
                                 "box", "goal", "lava", "agent")
#: minigrid's ``IDX_TO_COLOR``, by index.
COLOR_NAMES: tuple[str, ...] = ("red", "green", "blue", "purple", "yellow", "grey")
#: minigrid's door states (``STATE_TO_IDX``), by index.
DOOR_STATES: tuple[str, ...] = ("open", "closed", "locked")
#: ``agent_dir`` 0..3 (minigrid's ``DIR_TO_VEC``: +x, +y, -x, -y) as compass words.
DIRECTION_NAMES: tuple[str, ...] = ("east", "south", "west", "north")
#: minigrid's seven actions (``minigrid.core.actions.Actions``) as its docs name them.
ACTION_NAMES: tuple[str, ...] = ("turn left", "turn right", "move forward", "pick up", "drop",
                                 "toggle", "done")

#: Every word of the missions of minigrid 3.x's MiniGrid and BabyAI levels (and ","). Word
#: ``VOCABULARY[i]`` has id ``i + 1``; id 0 pads.
VOCABULARY: tuple[str, ...] = (
    ",", "a", "after", "and", "at", "avoid", "ball", "behind", "blue", "box", "door", "end",
    "fetch", "find", "from", "front", "get", "go", "goal", "green", "grey", "hallway", "in",
    "key", "lava", "left", "matching", "must", "near", "next", "object", "of", "on", "open",
    "opening", "pick", "purple", "put", "reach", "red", "right", "room", "rooms", "square",
    "the", "then", "to", "traverse", "unlock", "up", "use", "yellow", "you", "your",
)
#: Default number of word slots of the mission (BabyAI's longest missions have about 40).
MISSION_WORDS = 48
#: Most words outside the vocabulary one process numbers (their ids stay below the bound).
MAX_EXTRA_WORDS = 4096

_WORD_ID: dict[str, int] = {word: i + 1 for i, word in enumerate(VOCABULARY)}
_EXTRA: list[str] = []  # words met outside the vocabulary, in order (ids after it)
_TOKEN = re.compile(r"[^\s,]+|,")


def observation_size(view_size: int = 7, mission_words: int = MISSION_WORDS) -> int:
    """Length of the flat observation for a ``view_size`` view and ``mission_words`` slots."""
    return 3 * view_size * view_size + 4 + mission_words + len(VOCABULARY) + 1


def _word_id(word: str) -> int:
    found = _WORD_ID.get(word)
    if found is not None:
        return found
    if len(_EXTRA) >= MAX_EXTRA_WORDS:
        raise ValueError(f"mission word {word!r}: more than {MAX_EXTRA_WORDS} words outside "
                         "the vocabulary met in this process")
    _EXTRA.append(word)
    _WORD_ID[word] = len(VOCABULARY) + len(_EXTRA)
    return _WORD_ID[word]


def encode_mission(mission: str, words: int = MISSION_WORDS) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, bag)`` of a mission: ``words`` word ids (0 pads) and the bag of words
    (``len(VOCABULARY) + 1`` counts). ValueError when the mission has more words."""
    tokens = _TOKEN.findall(mission or "")
    if len(tokens) > words:
        raise ValueError(f"mission {mission!r} has {len(tokens)} words; the observation holds "
                         f"mission_words={words} (raise it)")
    ids = np.zeros(words, dtype=np.float32)
    bag = np.zeros(len(VOCABULARY) + 1, dtype=np.float32)
    for i, token in enumerate(tokens):
        word_id = _word_id(token)
        ids[i] = word_id
        bag[min(word_id, len(VOCABULARY) + 1) - 1] += 1
    return ids, bag


def decode_mission(ids: Sequence[float]) -> str:
    """The mission text of word ids (`encode_mission`'s inverse up to spacing; an unknown id
    reads "<unknown>")."""
    words = []
    for value in ids:
        word_id = int(value)
        if word_id <= 0:
            break
        if word_id <= len(VOCABULARY):
            words.append(VOCABULARY[word_id - 1])
        elif word_id - len(VOCABULARY) <= len(_EXTRA):
            words.append(_EXTRA[word_id - len(VOCABULARY) - 1])
        else:
            words.append("<unknown>")
    return " ".join(words).replace(" ,", ",")


def _steps(n: int, way: str) -> str:
    return f"{n} step{'' if n == 1 else 's'} {way}"


def _article(phrase: str) -> str:
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


class MiniGridDescriber(Describer):
    """A MiniGrid/BabyAI flat observation in words, in the manner of BabyAI-Text (docs/
    environments.md, "MiniGrid and BabyAI"); unknown codes are described generically."""

    env_name = "MiniGrid"
    n_actions = len(ACTION_NAMES)

    @checked
    def __init__(self, view_size: Annotated[int, Strict(), Field(ge=3)] = 7,
                 mission_words: Annotated[int, Strict(), Field(ge=1)] = MISSION_WORDS) -> None:
        if view_size % 2 == 0:
            raise ValueError(f"view_size={view_size!r}: expected an odd int >= 3")
        self.view_size = view_size
        self.mission_words = mission_words
        self.state_shape = (observation_size(view_size, mission_words),)

    # -------------------------------------------------------------------- the parts
    def split(self, state: np.ndarray) -> tuple[np.ndarray, int, str]:
        """``(image (V, V, 3) ints, direction 0..3 or -1, mission text)`` of a flat state."""
        v = self.view_size
        n = 3 * v * v
        image = np.asarray(state[:n]).astype(np.int64).reshape(v, v, 3)
        compass = np.asarray(state[n:n + 4])
        direction = int(np.argmax(compass)) if compass.max() > 0 else -1
        mission = decode_mission(state[n + 4:n + 4 + self.mission_words])
        return image, direction, mission

    @staticmethod
    def object_phrase(kind: int, color: int, state: int) -> str:
        """One encoded cell as a noun phrase with its article ("a locked yellow door")."""
        name = OBJECT_NAMES[kind] if 0 <= kind < len(OBJECT_NAMES) else None
        if name == "wall":
            return "a wall"
        if name == "lava":
            return "lava"
        if name == "agent":
            return "another agent"
        words = [COLOR_NAMES[color]] if 0 <= color < len(COLOR_NAMES) else []
        if name is None or name in ("unseen", "empty"):
            return _article(" ".join(["unknown", *words, "object"]))
        if name == "door" and 0 <= state < len(DOOR_STATES):
            words.insert(0, DOOR_STATES[state])
        words.append("floor tile" if name == "floor" else name)
        return _article(" ".join(words))

    @staticmethod
    def position(forward: int, right: int) -> str:
        """``"2 steps forward and 1 step left"`` (forward >= 0, right < 0 is left)."""
        parts = [_steps(forward, "forward")] if forward else []
        if right:
            parts.append(_steps(abs(right), "right" if right > 0 else "left"))
        return " and ".join(parts)

    def describe(self, state: np.ndarray, legal_moves: tuple[int, ...],
                 last_action: int | None) -> str:
        image, direction, mission = self.split(state)
        v, me = self.view_size, self.view_size // 2
        if mission:
            text = [f"Mission: {mission}" + ("" if mission.endswith(".") else ".")]
        else:
            text = ["There is no mission."]
        held = image[me, v - 1]
        carry = ("nothing" if held[0] in (0, 1)
                 else self.object_phrase(int(held[0]), int(held[1]), int(held[2])))
        face = f"You face {DIRECTION_NAMES[direction]} and" if direction >= 0 else "You"
        text.append(f"{face} carry {carry}.")
        ahead = image[me, v - 2]
        if ahead[0] == 0:
            text.append("You cannot see what is ahead of you.")
        elif ahead[0] == 1:
            text.append("Ahead of you is free space.")
        else:
            text.append("Ahead of you is "
                        f"{self.object_phrase(int(ahead[0]), int(ahead[1]), int(ahead[2]))}.")
        seen = []
        for x in range(v):
            for y in range(v):
                kind = int(image[x, y, 0])
                if kind in (0, 1, 2) or (x == me and y == v - 1):
                    continue  # unseen, empty, walls (below) and the agent's own cell
                forward, right = v - 1 - y, x - me
                seen.append((forward + abs(right), forward, right,
                             self.object_phrase(kind, int(image[x, y, 1]), int(image[x, y, 2]))))
        seen.sort()
        text.extend(f"You see {phrase} {self.position(f, r)}." for _, f, r, phrase in seen)
        if not seen:
            text.append("You see no objects.")
        for way, cells in (("forward", [(me, y) for y in range(v - 2, -1, -1)]),
                           ("left", [(x, v - 1) for x in range(me - 1, -1, -1)]),
                           ("right", [(x, v - 1) for x in range(me + 1, v)])):
            for distance, (x, y) in enumerate(cells, start=1):
                if image[x, y, 0] == 2:
                    if not (way == "forward" and distance == 1):  # said as "Ahead of you"
                        text.append(f"You see a wall {_steps(distance, way)}.")
                    break
        return " ".join(text)



# --------------------------------------------------------------------------- bridge
INSTALL_HINT = "pip install 'langadapt[minigrid]'"

#: The MiniGrid and BabyAI ids of minigrid 3.2 (registered as ``langadapt/<id>`` without
#: importing minigrid; :func:`register_minigrid_ids` adds any others it registers).
MINIGRID_IDS: tuple[str, ...] = tuple("""
BabyAI-ActionObjDoor-v0 BabyAI-BlockedUnlockPickup-v0 BabyAI-BossLevel-v0
BabyAI-BossLevelNoUnlock-v0 BabyAI-FindObjS5-v0 BabyAI-FindObjS6-v0 BabyAI-FindObjS7-v0
BabyAI-GoTo-v0 BabyAI-GoToDoor-v0 BabyAI-GoToImpUnlock-v0 BabyAI-GoToLocal-v0
BabyAI-GoToLocalS5N2-v0 BabyAI-GoToLocalS6N2-v0 BabyAI-GoToLocalS6N3-v0
BabyAI-GoToLocalS6N4-v0 BabyAI-GoToLocalS7N4-v0 BabyAI-GoToLocalS7N5-v0
BabyAI-GoToLocalS8N2-v0 BabyAI-GoToLocalS8N3-v0 BabyAI-GoToLocalS8N4-v0
BabyAI-GoToLocalS8N5-v0 BabyAI-GoToLocalS8N6-v0 BabyAI-GoToLocalS8N7-v0 BabyAI-GoToObj-v0
BabyAI-GoToObjDoor-v0 BabyAI-GoToObjMaze-v0 BabyAI-GoToObjMazeOpen-v0
BabyAI-GoToObjMazeS4-v0 BabyAI-GoToObjMazeS4R2-v0 BabyAI-GoToObjMazeS5-v0
BabyAI-GoToObjMazeS6-v0 BabyAI-GoToObjMazeS7-v0 BabyAI-GoToObjS4-v0 BabyAI-GoToObjS6-v1
BabyAI-GoToOpen-v0 BabyAI-GoToRedBall-v0 BabyAI-GoToRedBallGrey-v0
BabyAI-GoToRedBallNoDists-v0 BabyAI-GoToRedBlueBall-v0 BabyAI-GoToSeq-v0
BabyAI-GoToSeqS5R2-v0 BabyAI-KeyCorridor-v0 BabyAI-KeyCorridorS3R1-v0
BabyAI-KeyCorridorS3R2-v0 BabyAI-KeyCorridorS3R3-v0 BabyAI-KeyCorridorS4R3-v0
BabyAI-KeyCorridorS5R3-v0 BabyAI-KeyCorridorS6R3-v0 BabyAI-KeyInBox-v0 BabyAI-MiniBossLevel-v0
BabyAI-MoveTwoAcrossS5N2-v0 BabyAI-MoveTwoAcrossS8N9-v0 BabyAI-OneRoomS12-v0
BabyAI-OneRoomS16-v0 BabyAI-OneRoomS20-v0 BabyAI-OneRoomS8-v0 BabyAI-Open-v0
BabyAI-OpenDoor-v0 BabyAI-OpenDoorColor-v0 BabyAI-OpenDoorDebug-v0 BabyAI-OpenDoorLoc-v0
BabyAI-OpenDoorsOrderN2-v0 BabyAI-OpenDoorsOrderN2Debug-v0 BabyAI-OpenDoorsOrderN4-v0
BabyAI-OpenDoorsOrderN4Debug-v0 BabyAI-OpenRedBlueDoors-v0 BabyAI-OpenRedBlueDoorsDebug-v0
BabyAI-OpenRedDoor-v0 BabyAI-OpenTwoDoors-v0 BabyAI-Pickup-v0 BabyAI-PickupAbove-v0
BabyAI-PickupDist-v0 BabyAI-PickupDistDebug-v0 BabyAI-PickupLoc-v0 BabyAI-PutNext-v0
BabyAI-PutNextLocal-v0 BabyAI-PutNextLocalS5N3-v0 BabyAI-PutNextLocalS6N4-v0
BabyAI-PutNextS4N1-v0 BabyAI-PutNextS5N1-v0 BabyAI-PutNextS5N2-v0
BabyAI-PutNextS5N2Carrying-v0 BabyAI-PutNextS6N3-v0 BabyAI-PutNextS6N3Carrying-v0
BabyAI-PutNextS7N4-v0 BabyAI-PutNextS7N4Carrying-v0 BabyAI-Synth-v0 BabyAI-SynthLoc-v0
BabyAI-SynthS5R2-v0 BabyAI-SynthSeq-v0 BabyAI-UnblockPickup-v0 BabyAI-Unlock-v0
BabyAI-UnlockLocal-v0 BabyAI-UnlockLocalDist-v0 BabyAI-UnlockPickup-v0
BabyAI-UnlockPickupDist-v0 BabyAI-UnlockToUnlock-v0 MiniGrid-BlockedUnlockPickup-v0
MiniGrid-DistShift1-v0 MiniGrid-DistShift2-v0 MiniGrid-DoorKey-16x16-v0
MiniGrid-DoorKey-5x5-v0 MiniGrid-DoorKey-6x6-v0 MiniGrid-DoorKey-8x8-v0
MiniGrid-Dynamic-Obstacles-16x16-v0 MiniGrid-Dynamic-Obstacles-5x5-v0
MiniGrid-Dynamic-Obstacles-6x6-v0 MiniGrid-Dynamic-Obstacles-8x8-v0
MiniGrid-Dynamic-Obstacles-Random-5x5-v0 MiniGrid-Dynamic-Obstacles-Random-6x6-v0
MiniGrid-Empty-16x16-v0 MiniGrid-Empty-5x5-v0 MiniGrid-Empty-6x6-v0 MiniGrid-Empty-8x8-v0
MiniGrid-Empty-Random-5x5-v0 MiniGrid-Empty-Random-6x6-v0 MiniGrid-Fetch-5x5-N2-v0
MiniGrid-Fetch-6x6-N2-v0 MiniGrid-Fetch-8x8-N3-v0 MiniGrid-FourRooms-v0
MiniGrid-GoToDoor-5x5-v0 MiniGrid-GoToDoor-6x6-v0 MiniGrid-GoToDoor-8x8-v0
MiniGrid-GoToObject-6x6-N2-v0 MiniGrid-GoToObject-8x8-N2-v0 MiniGrid-KeyCorridorS3R1-v0
MiniGrid-KeyCorridorS3R2-v0 MiniGrid-KeyCorridorS3R3-v0 MiniGrid-KeyCorridorS4R3-v0
MiniGrid-KeyCorridorS5R3-v0 MiniGrid-KeyCorridorS6R3-v0 MiniGrid-LavaCrossingS11N5-v0
MiniGrid-LavaCrossingS9N1-v0 MiniGrid-LavaCrossingS9N2-v0 MiniGrid-LavaCrossingS9N3-v0
MiniGrid-LavaGapS5-v0 MiniGrid-LavaGapS6-v0 MiniGrid-LavaGapS7-v0 MiniGrid-LockedRoom-v0
MiniGrid-MemoryS11-v0 MiniGrid-MemoryS13-v0 MiniGrid-MemoryS13Random-v0 MiniGrid-MemoryS17Random-v0
MiniGrid-MemoryS7-v0 MiniGrid-MemoryS9-v0 MiniGrid-MultiRoom-N2-S4-v0 MiniGrid-MultiRoom-N4-S5-v0
MiniGrid-MultiRoom-N6-v0 MiniGrid-ObstructedMaze-1Dl-v0 MiniGrid-ObstructedMaze-1Dlh-v0
MiniGrid-ObstructedMaze-1Dlhb-v0 MiniGrid-ObstructedMaze-1Q-v0 MiniGrid-ObstructedMaze-1Q-v1
MiniGrid-ObstructedMaze-2Dl-v0 MiniGrid-ObstructedMaze-2Dlh-v0 MiniGrid-ObstructedMaze-2Dlhb-v0
MiniGrid-ObstructedMaze-2Dlhb-v1 MiniGrid-ObstructedMaze-2Q-v0 MiniGrid-ObstructedMaze-2Q-v1
MiniGrid-ObstructedMaze-Full-v0 MiniGrid-ObstructedMaze-Full-v1 MiniGrid-Playground-v0
MiniGrid-PutNear-6x6-N2-v0 MiniGrid-PutNear-8x8-N3-v0 MiniGrid-RedBlueDoors-6x6-v0
MiniGrid-RedBlueDoors-8x8-v0 MiniGrid-SimpleCrossingS11N5-v0 MiniGrid-SimpleCrossingS9N1-v0
MiniGrid-SimpleCrossingS9N2-v0 MiniGrid-SimpleCrossingS9N3-v0 MiniGrid-Unlock-v0
MiniGrid-UnlockPickup-v0 MiniGrid-WFC-DungeonMazeScaled-v0 MiniGrid-WFC-MazeSimple-v0
MiniGrid-WFC-ObstaclesAngular-v0 MiniGrid-WFC-ObstaclesBlackdots-v0 MiniGrid-WFC-ObstaclesHogs3-v0
MiniGrid-WFC-RoomsFabric-v0
""".split())

#: Levels whose ``done`` action does something (the default legal moves keep it there).
USES_DONE: tuple[str, ...] = ("GoToObjectEnv", "GoToDoorEnv")

MINIGRID_TASK = (
    "You are an agent in a MiniGrid gridworld and must carry out the mission given in each "
    "state. You see a square area in front of you (walls and closed doors block the view) "
    "and describe objects by steps forward and to your left or right. Actions: 0 turn "
    "left, 1 turn right, 2 move forward one cell, 3 pick up the object ahead of you, 4 drop "
    "what you carry in the cell ahead, 5 toggle the object ahead (open or close a door; a "
    "locked door opens only while you carry a key of its colour; open a box), 6 done. You "
    "can carry one object at a time. Walls, lava and other objects block your way; moving "
    "into lava ends the episode. Fewer steps earn a higher reward."
)


class MiniGridNotInstalled(ImportError, ValueError):
    """``minigrid`` is missing (one line naming `INSTALL_HINT`); a ValueError too, so runners
    report it as a bad environment like any other."""


def require_minigrid() -> Any:
    """The ``minigrid`` module, imported now; :class:`MiniGridNotInstalled` without it."""
    try:
        import minigrid  # noqa: PLC0415  (the optional extra, imported when a level is made)
    except ImportError:
        raise MiniGridNotInstalled(
            f"MiniGrid and BabyAI levels need the minigrid package: {INSTALL_HINT}"
        ) from None
    return minigrid


def is_minigrid_id(env_id: Any) -> bool:
    """Whether ``env_id`` names a MiniGrid or BabyAI level (``langadapt/`` prefix or not)."""
    return isinstance(env_id, str) and env_id.removeprefix("langadapt/").startswith(
        ("MiniGrid-", "BabyAI-"))


def register_minigrid_ids(ids: Sequence[str] | None = None) -> None:
    """Register ``langadapt/<id>`` for ``ids`` (default: `MINIGRID_IDS` and every
    MiniGrid-/BabyAI- id in gymnasium's registry); ids already registered are skipped."""
    if ids is None:
        ids = MINIGRID_IDS + tuple(k for k in list(gymnasium.registry) if
                                   k.startswith(("MiniGrid-", "BabyAI-")))
    for level in ids:
        bridged = f"langadapt/{level}"
        if bridged not in gymnasium.registry:
            gymnasium.register(id=bridged, entry_point=f"{__name__}:MiniGridBridge",
                               kwargs={"level": level})


def make_minigrid(level: str, **kwargs: Any) -> MiniGridBridge:
    """``MiniGridBridge(level, **kwargs)`` of a MiniGrid/BabyAI id (``langadapt/`` or not)."""
    return MiniGridBridge(level, **kwargs)


_LIVE_IDS_REGISTERED = False

#: Largest grid side a level may be made with (larger: slow steps, for no shipped level).
MAX_GRID_SIDE = 64


def _make_level(level: Any, render_mode: str | None, kwargs: dict[str, Any]) -> tuple[Any, str]:
    """(the unwrapped MiniGridEnv, its name) of an id or an instance."""
    global _LIVE_IDS_REGISTERED
    minigrid = require_minigrid()
    from minigrid.minigrid_env import MiniGridEnv  # noqa: PLC0415  (optional extra)

    if not _LIVE_IDS_REGISTERED:  # ids this minigrid version has beyond MINIGRID_IDS
        register_minigrid_ids()
        _LIVE_IDS_REGISTERED = True

    steps = kwargs.get("max_steps")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int)
                              or not 1 <= steps <= MAX_STEP_LIMIT):
        raise ValueError(f"max_steps={steps!r}: expected a whole number of steps, from 1 to "
                         f"{MAX_STEP_LIMIT:,} (the level's step limit)")
    if isinstance(level, str):
        name = level.removeprefix("langadapt/")
        if name not in gymnasium.registry:
            near = sorted(k for k in gymnasium.registry if k.startswith(("MiniGrid-", "BabyAI-")))
            raise ValueError(f"unknown MiniGrid/BabyAI level {level!r}; expected one of "
                             f"{', '.join(near)} (minigrid {minigrid.__version__})")
        try:
            made = gymnasium.make(name, render_mode=render_mode, disable_env_checker=True,
                                  **kwargs)
        except TypeError as error:
            raise ValueError(f"arguments {sorted(kwargs)} of {name}: {error}") from None
        base = made.unwrapped
    else:
        if kwargs:
            raise ValueError(f"arguments {sorted(kwargs)} are for a level made from an id; "
                             f"the level {level!r} is already made")
        base, name = getattr(level, "unwrapped", level), None
    if not isinstance(base, MiniGridEnv):
        raise ValueError(f"level {level!r} is a {type(base).__name__}; expected a MiniGrid or "
                         "BabyAI level (a minigrid.minigrid_env.MiniGridEnv)")
    if max(base.width, base.height) > MAX_GRID_SIDE:
        raise ValueError(f"{sorted(kwargs)} of {level!r} make a {base.width}x{base.height} "
                         f"grid; expected at most {MAX_GRID_SIDE} cells a side (the largest "
                         "shipped level is 25)")
    return base, name or getattr(getattr(base, "spec", None), "id", None) or type(base).__name__


class MiniGridBridge(gymnasium.Env):
    """A MiniGrid or BabyAI level with langadapt's conventions (docs/environments.md).

    ``minigrid``: the unwrapped level; ``level``: its id. Each step runs ``step_hooks`` as
    ``hook(env, action)``, each reset ``reset_hooks`` as ``hook(env)``; ``followers`` keeps
    objects that follow its episodes (its oracle). ``copy.deepcopy`` copies none of them.
    """

    metadata = {"render_modes": ["rgb_array", "ansi"], "render_fps": 10}

    def __init__(self, level: Any, *, legal_moves: str | Sequence[int] = "auto",
                 mission_words: int = MISSION_WORDS, render_mode: str | None = None,
                 **kwargs: Any) -> None:
        if render_mode not in (None, "rgb_array", "ansi"):
            raise ValueError(f"render_mode {render_mode!r} is not supported; expected None, "
                             "'rgb_array' or 'ansi'")
        self.render_mode = render_mode
        inner_mode = "rgb_array" if render_mode == "rgb_array" else None
        self.minigrid, self.level = _make_level(level, inner_mode, kwargs)
        self.view_size = int(self.minigrid.agent_view_size)
        self.describer = MiniGridDescriber(self.view_size, mission_words)
        self.mission_words = mission_words
        n = len(ACTION_NAMES)
        self.action_space = spaces.Discrete(n)
        self.action_names = ACTION_NAMES
        if legal_moves == "auto":
            uses_done = type(self.minigrid).__name__ in USES_DONE or (
                hasattr(self.minigrid, "instrs") and _babyai_done_actions())
            moves = list(range(n if uses_done else n - 1))
        elif legal_moves == "all":
            moves = list(range(n))
        elif isinstance(legal_moves, (str, bytes)) or not isinstance(legal_moves, Sequence):
            raise ValueError(f"legal_moves={legal_moves!r}: expected 'auto', 'all' or a list "
                             f"of actions in [0, {n - 1}]")
        else:
            moves = sorted({check_action(m, n) for m in legal_moves})
            if not moves:
                raise ValueError("legal_moves=[]: expected at least one action")
        self.legal_moves = moves
        v = self.view_size
        size = observation_size(v, mission_words)
        high = np.concatenate([
            np.full(3 * v * v, 255.0), np.ones(4),
            np.full(mission_words, float(len(VOCABULARY) + MAX_EXTRA_WORDS)),
            np.full(len(VOCABULARY) + 1, float(mission_words)),
        ]).astype(np.float32)
        self.observation_space = spaces.Box(np.zeros(size, np.float32), high, (size,),
                                            np.float32)
        self.step_hooks: list[Callable[[MiniGridBridge, int], None]] = []
        self.reset_hooks: list[Callable[[MiniGridBridge], None]] = []
        self.followers: dict[str, Any] = {}
        self._obs: np.ndarray | None = None
        self._mission_cache: tuple[str, np.ndarray] | None = None
        self._running = False
        self.last_action: int | None = None

    # ------------------------------------------------------------------ observation
    @property
    def mission(self) -> str:
        return str(self.minigrid.mission)

    def encode(self, obs: dict[str, Any]) -> np.ndarray:
        """The flat float32 observation of one minigrid observation dict."""
        mission = str(obs["mission"])
        if self._mission_cache is None or self._mission_cache[0] != mission:
            ids, bag = encode_mission(mission, self.mission_words)
            self._mission_cache = (mission, np.concatenate([ids, bag]))
        compass = np.zeros(4, dtype=np.float32)
        compass[int(obs["direction"])] = 1.0
        return np.concatenate([np.asarray(obs["image"], dtype=np.float32).reshape(-1), compass,
                               self._mission_cache[1]])

    def observation(self) -> np.ndarray:
        """The current observation (a new array; what the last reset or step returned)."""
        if self._obs is None:
            raise RuntimeError(f"{self.level}: no observation before reset()")
        return self._obs.copy()

    def _info(self, success: bool) -> dict[str, Any]:
        return {"legal_moves": list(self.legal_moves), "is_success": success,
                "mission": self.mission}

    # ------------------------------------------------------------------ gymnasium
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        obs, _ = self.minigrid.reset(seed=seed, options=options)
        self._obs = self.encode(obs)
        self._running = True
        self.last_action = None
        for hook in list(self.reset_hooks):
            hook(self)
        return self._obs.copy(), self._info(False)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not self._running:
            raise episode_over_error(self.level)
        action = check_action(action, self.action_space.n)
        obs, reward, terminated, truncated, _ = self.minigrid.step(action)
        terminated, reward = bool(terminated), float(reward)
        truncated = bool(truncated) and not terminated
        self._obs = self.encode(obs)
        self._running = not (terminated or truncated)
        self.last_action = action
        for hook in list(self.step_hooks):
            hook(self, action)
        return (self._obs.copy(), reward, terminated, truncated,
                self._info(terminated and reward > 0))

    def render(self) -> Any:
        if self.render_mode == "ansi":
            return self.minigrid.pprint_grid()
        if self.render_mode == "rgb_array":
            return self.minigrid.render()
        return None

    def close(self) -> None:
        self.minigrid.close()

    def __deepcopy__(self, memo: dict[int, Any]) -> MiniGridBridge:
        """An independent copy (hooks are not copied: an oracle follows one environment)."""
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            if key in ("step_hooks", "reset_hooks", "followers"):
                new.__dict__[key] = type(value)()
            else:
                new.__dict__[key] = copy.deepcopy(value, memo)
        return new


def _babyai_done_actions() -> bool:
    from minigrid.envs.babyai.core import verifier  # noqa: PLC0415  (optional extra)

    return bool(verifier.use_done_actions)


def _language(env: MiniGridBridge, **options: Any) -> LanguageSpec:
    if options:
        raise TypeError(f"unexpected options {sorted(options)} (the MiniGrid spec has none)")
    # BabyAI levels: one MiniLM vector per sentence, in slots (won on success and cost:
    # docs/performance.md); `embedding: paragraph` is one setting away
    babyai = (env.level or "").startswith("BabyAI-")
    return LanguageSpec(env.describer, ACTION_NAMES, MINIGRID_TASK, lambda e: e.observation(),
                        representation={"embedding": "sentences"} if babyai else {})


register_language(MiniGridBridge, _language)
register_suite_level()  # BALROG's BabyAI suite (.babyai_suite)
register_minigrid_ids((*MINIGRID_IDS, SUITE_LEVEL_ID))
