"""MiniGrid and BabyAI states in words: the flat observation's layout and
`MiniGridDescriber`. Needs no ``minigrid`` (a copy of its encodings, tested against
``minigrid.core.constants``). See docs/environments.md.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated

import numpy as np
from pydantic import Field, Strict

from ._checks import checked_arguments
from .describers import Describer

__all__ = ["ACTION_NAMES", "COLOR_NAMES", "DIRECTION_NAMES", "DOOR_STATES", "MISSION_WORDS",
           "OBJECT_NAMES", "VOCABULARY", "MiniGridDescriber", "decode_mission", "encode_mission",
           "observation_size"]

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

    @checked_arguments
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
