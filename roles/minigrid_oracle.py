"""Oracles for MiniGrid and BabyAI levels, planning on the full grid: :class:`GridPlanOracle`
(breadth-first search for reach-the-goal levels) and :class:`BabyAIBotOracle` (BabyAI's bot,
replanned when it raises; every failure counted and the first warned). One oracle per bridge;
another level is a ValueError naming it. See docs/environments.md (oracles)."""

from __future__ import annotations

import copy
import warnings
from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import Any

from ..environments.minigrid import MiniGridBridge
from .oracles import register_oracle

__all__ = ["BabyAIBotOracle", "GridPlanOracle", "PLANNED_LEVELS", "minigrid_oracle"]

#: minigrid classes whose levels :class:`GridPlanOracle` plans on (reach the goal square).
PLANNED_LEVELS: tuple[str, ...] = ("DoorKeyEnv", "EmptyEnv", "FourRoomsEnv", "MultiRoomEnv",
                                   "CrossingEnv", "LavaGapEnv", "DistShiftEnv", "LockedRoomEnv")
_BOT_FAILS = ("KeyInBox",)  # BabyAI level classes the bot cannot solve (its docstring)
_LEVELS_TEXT = (
    "BabyAI-* levels (BabyAI's bot; not BabyAI-PutNextS*Carrying or BabyAI-KeyInBox) and "
    "the shortest-path planner's MiniGrid-DoorKey-*, MiniGrid-Empty-*, MiniGrid-FourRooms, "
    "MiniGrid-MultiRoom-*, MiniGrid-LavaCrossing*, MiniGrid-SimpleCrossing*, MiniGrid-LavaGap*, "
    "MiniGrid-DistShift* and MiniGrid-LockedRoom"
)

_LEFT, _RIGHT, _FORWARD, _PICKUP, _DROP, _TOGGLE, _DONE = range(7)
_DIRS = ((1, 0), (0, 1), (-1, 0), (0, -1))  # minigrid's DIR_TO_VEC
_SUCCESS = "success"
_FREE, _BLOCKED, _LAVA, _GOAL = 0, 1, 2, 3
_KINDS = {None: _FREE, "empty": _FREE, "floor": _FREE, "key": _FREE, "door": _FREE,
          "goal": _GOAL, "lava": _LAVA}

#: States whose plan length a :class:`BabyAIBotOracle` keeps (a roll-out each; least recently
#: used dropped first): a few episodes' worth, where 75k GoToLocal steps kept 22,425.
PLAN_MEMO_SIZE = 4_096


def _class_names(obj: Any) -> set[str]:
    return {cls.__name__ for cls in type(obj).__mro__}


def minigrid_oracle(env: Any) -> GridPlanOracle | BabyAIBotOracle:
    """The oracle of a MiniGrid/BabyAI bridge (the same one for every caller), or ValueError
    naming the level and the levels that have an oracle."""
    bridge = getattr(env, "unwrapped", env)
    existing = bridge.followers.get("oracle")
    if existing is not None:
        return existing
    level = bridge.minigrid
    names = _class_names(level)
    oracle: GridPlanOracle | BabyAIBotOracle
    if "RoomGridLevel" in names:
        if names & set(_BOT_FAILS) or getattr(level, "start_carrying", False):
            raise ValueError(f"oracle: BabyAI's bot cannot solve {bridge.level}; oracles plan "
                             f"on {_LEVELS_TEXT}")
        oracle = BabyAIBotOracle(bridge)
    elif names & set(PLANNED_LEVELS):
        oracle = GridPlanOracle()
    else:
        raise ValueError(f"oracle: no oracle can plan on {bridge.level}; oracles plan on "
                         f"{_LEVELS_TEXT}")
    bridge.followers["oracle"] = oracle
    return oracle


# --------------------------------------------------------------------------- grid planner
class _Layout:
    """What does not change on one grid during an episode, and the plans found on it."""

    def __init__(self, grid: Any) -> None:
        self.grid = grid  # kept: the layout belongs to this grid object
        self.width, self.height = grid.width, grid.height
        self.kind: dict[tuple[int, int], int] = {}
        self.doors: dict[tuple[int, int], int] = {}  # position -> index
        self.door_colors: list[str] = []
        for y in range(grid.height):
            for x in range(grid.width):
                cell = grid.get(x, y)
                kind = None if cell is None else cell.type
                self.kind[(x, y)] = _KINDS.get(kind, _BLOCKED)  # walls, balls, boxes: blocked
                if kind == "door":
                    self.doors[(x, y)] = len(self.door_colors)
                    self.door_colors.append(cell.color)
        self.distance: dict[tuple, int] = {}
        self.explored: set[tuple] = set()
        self.d_max: int | None = None

    def state_of(self, level: Any) -> tuple:
        """(x, y, dir, carried key colour or '' or None, keys on the floor, door states)."""
        carrying = level.carrying
        carried = None if carrying is None else (carrying.color if carrying.type == "key" else "")
        keys = []
        doors = [0] * len(self.door_colors)
        for position, index in self.doors.items():
            door = level.grid.get(*position)
            doors[index] = 0 if door.is_open else (2 if door.is_locked else 1)
        for i, cell in enumerate(level.grid.grid):
            if cell is not None and cell.type == "key":
                keys.append(((i % self.width, i // self.width), cell.color))
        x, y = (int(v) for v in level.agent_pos)
        return (x, y, int(level.agent_dir), carried, frozenset(keys), tuple(doors))

    def successor(self, state: tuple, action: int) -> tuple | str | None:
        """The state after ``action``, ``"success"`` or None (no change, or lava)."""
        x, y, d, carried, keys, doors = state
        if action == _LEFT:
            return (x, y, (d - 1) % 4, carried, keys, doors)
        if action == _RIGHT:
            return (x, y, (d + 1) % 4, carried, keys, doors)
        fx, fy = x + _DIRS[d][0], y + _DIRS[d][1]
        front = (fx, fy)
        kind = self.kind.get(front, _BLOCKED)
        key_here = next((color for position, color in keys if position == front), None)
        door = self.doors.get(front)
        if action == _FORWARD:
            if kind == _GOAL:
                return _SUCCESS
            if kind != _FREE or key_here is not None or (door is not None and doors[door]):
                return None
            return (fx, fy, d, carried, keys, doors)
        if action == _PICKUP and carried is None and key_here is not None:
            return (x, y, d, key_here, keys - {(front, key_here)}, doors)
        if action == _TOGGLE and door is not None and doors[door]:
            if doors[door] == 2 and carried != self.door_colors[door]:
                return None
            opened = doors[:door] + (0,) + doors[door + 1:]
            return (x, y, d, carried, keys, opened)
        return None

    def plan_from(self, start: tuple) -> None:
        """Explore every state reachable from ``start`` and the distance of each to the goal."""
        if start in self.explored:
            return
        edges: dict[tuple, list[tuple]] = {}
        finishing: list[tuple] = []
        frontier = deque([start])
        seen = {start}
        while frontier:
            state = frontier.popleft()
            for action in (_LEFT, _RIGHT, _FORWARD, _PICKUP, _TOGGLE):
                nxt = self.successor(state, action)
                if nxt is None:
                    continue
                if nxt == _SUCCESS:
                    finishing.append(state)
                    continue
                edges.setdefault(nxt, []).append(state)
                if nxt not in seen and nxt not in self.explored:
                    seen.add(nxt)
                    frontier.append(nxt)
        # reverse breadth-first search from the states one action from the goal
        distance = self.distance
        queue = deque()
        for state in finishing:
            if distance.get(state, 2) > 1:
                distance[state] = 1
                queue.append(state)
        queue.extend(s for s in edges if s in distance and s not in finishing)  # earlier plans
        while queue:
            state = queue.popleft()
            for previous in edges.get(state, ()):
                if distance.get(previous, 1 << 30) > distance[state] + 1:
                    distance[previous] = distance[state] + 1
                    queue.append(previous)
        self.explored |= seen
        if self.d_max is None:
            self.d_max = max((distance[s] for s in seen if s in distance), default=1) or 1


class GridPlanOracle:
    """Shortest plans to the goal square on the full grid (docs/environments.md)."""

    def __init__(self) -> None:
        self._layout: _Layout | None = None

    def planned(self, env: Any) -> tuple[_Layout, tuple]:
        """The layout of ``env``'s grid and its current state, planned from."""
        level = getattr(env, "unwrapped", env).minigrid
        if self._layout is None or self._layout.grid is not level.grid:
            self._layout = _Layout(level.grid)
        state = self._layout.state_of(level)
        self._layout.plan_from(state)
        return self._layout, state

    def plan_length(self, env: Any) -> int | None:
        """Actions of a shortest plan from the current state to the goal (None: no plan)."""
        layout, state = self.planned(env)
        return layout.distance.get(state)

    def potential(self, env: Any) -> float:
        """``-d / d_max`` in [-1, 0] (-1 where no plan reaches the goal)."""
        d = self.plan_length(env)
        layout = self._layout
        return -1.0 if d is None else -min(1.0, d / (layout.d_max or 1))

    def best_move(self, env: Any, legal_moves: Sequence[int]) -> int:
        """The first legal move that starts a shortest plan (the first legal move when no
        plan exists)."""
        moves = [int(m) for m in legal_moves]
        layout, state = self.planned(env)
        far = 1 << 30

        def cost(action: int) -> int:
            nxt = layout.successor(state, action)
            if nxt == _SUCCESS:
                return 0
            if nxt is None:
                return far
            layout.plan_from(nxt)
            return layout.distance.get(nxt, far)

        return min(moves, key=cost)


# --------------------------------------------------------------------------- BabyAI bot
class BabyAIBotOracle:
    """BabyAI's bot with the whole grid, following the episode (docs/environments.md)."""

    def __init__(self, bridge: MiniGridBridge) -> None:
        from minigrid.utils.baby_ai_bot import BabyAIBot  # noqa: PLC0415  (optional extra)

        self._bot_class = BabyAIBot
        self.bridge = bridge
        self._bot: Any = None
        self._suggestion: int | None = None
        self._synced: tuple[int, int] | None = None  # (episode, step) the suggestion is for
        self._episode = 0
        self._plans: OrderedDict[tuple, int | None] = OrderedDict()
        self.plan_memo_size = PLAN_MEMO_SIZE
        self.bot_failures = 0
        self.last_bot_error: str | None = None
        bridge.reset_hooks.append(self._on_reset)
        bridge.step_hooks.append(self._on_step)

    def _fresh_bot(self, level: Any) -> Any:
        bot = self._bot_class(level)
        bot.vis_mask[:] = True  # the oracle knows the whole grid
        return bot

    def _on_reset(self, bridge: MiniGridBridge) -> None:
        self._episode += 1
        self._bot = None
        self._follow(bridge, None)

    def _on_step(self, bridge: MiniGridBridge, action: int) -> None:
        if self._bot is not None and bridge._running:
            self._follow(bridge, action)

    def _follow(self, bridge: MiniGridBridge, action: int | None) -> None:
        """Replan after ``action`` (a fresh bot on the first step or when the bot fails)."""
        level = bridge.minigrid
        try:
            if self._bot is None:
                self._bot = self._fresh_bot(level)
                action = None
            self._suggestion = int(self._bot.replan(action))
        except Exception as error:  # noqa: BLE001  (the bot's asserts, DisappearedBoxError)
            self._bot_failed(error, "replanning; a fresh bot replans")
            try:
                self._bot = self._fresh_bot(level)
                self._suggestion = int(self._bot.replan())
            except Exception as again:  # noqa: BLE001
                self._bot_failed(again, "replanning with a fresh bot; best_move gives the "
                                 "first legal move and potential -1 until the bot recovers")
                self._bot, self._suggestion = None, None
        self._synced = (self._episode, level.step_count)

    def _bot_failed(self, error: Exception, then: str) -> None:
        """Count an exception of the bot; warn the first one."""
        self.bot_failures += 1
        level = self.bridge.minigrid
        self.last_bot_error = (f"{type(error).__name__}: {error} (episode {self._episode}, "
                               f"step {level.step_count})")
        if self.bot_failures == 1:
            warnings.warn(f"oracle on {self.bridge.level}: BabyAI's bot raised "
                          f"{self.last_bot_error} while {then}; further failures are counted "
                          "in the oracle's bot_failures", RuntimeWarning, stacklevel=4)

    def _current(self, env: Any) -> int | None:
        bridge = getattr(env, "unwrapped", env)
        if bridge is not self.bridge:
            raise ValueError("this BabyAI oracle follows another environment; ask "
                             "oracle_for(env) for this one")
        if self._synced != (self._episode, bridge.minigrid.step_count):
            self._bot = None  # bound after the episode began: start following now
            self._follow(bridge, None)
        return self._suggestion

    def best_move(self, env: Any, legal_moves: Sequence[int]) -> int:
        """The bot's action (the first legal move when it is not legal or the bot is lost)."""
        moves = [int(m) for m in legal_moves]
        suggestion = self._current(env)
        return suggestion if suggestion in moves else moves[0]

    def plan_length(self, env: Any) -> int | None:
        """Steps the bot needs from the current state (a roll-out on a copy; None when it
        does not reach success before the level's step limit)."""
        self._current(env)
        level = self.bridge.minigrid
        key = (level.mission, level.grid.encode().tobytes(), tuple(int(v) for v in
               level.agent_pos), int(level.agent_dir),
               None if level.carrying is None else level.carrying.encode())
        if key in self._plans:
            self._plans.move_to_end(key)
            return self._plans[key]
        length = None
        if self._bot is not None and self._suggestion is not None:
            clone, bot = copy.deepcopy((level, self._bot))
            action, steps = self._suggestion, 0
            try:
                while clone.step_count < clone.max_steps:
                    _, reward, terminated, truncated, _ = clone.step(action)
                    steps += 1
                    if terminated or truncated:
                        length = steps if terminated and reward > 0 else None
                        break
                    action = int(bot.replan(action))
            except Exception as error:  # noqa: BLE001  (a lost bot: no plan)
                self._bot_failed(error, "rolling out its plan; potential -1 for this state")
                length = None
        self._plans[key] = length
        if len(self._plans) > self.plan_memo_size:
            self._plans.popitem(last=False)
        return length

    def potential(self, env: Any) -> float:
        """``-n / max_steps`` in [-1, 0] (-1 when the bot does not reach success)."""
        n = self.plan_length(env)
        return -1.0 if n is None else -min(1.0, n / max(1, self.bridge.minigrid.max_steps))


register_oracle(MiniGridBridge, minigrid_oracle)
