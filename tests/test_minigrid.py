"""MiniGrid and BabyAI: the bridge, its describer, the adapters on it and the oracles.

Everything but the missing-extra checks needs the optional ``minigrid`` package
(``pip install 'langadapt[minigrid]'``) and is skipped without it.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from importlib.util import find_spec

import gymnasium as gym
import numpy as np
import pytest
from adapter_fixtures import CountingEncoder
from gymnasium.utils.env_checker import check_env
from scipy.stats import fisher_exact

from langadapt import adapters, agents
from langadapt.environments import language_for
from langadapt.environments import minigrid as bridge_module
from langadapt.environments.minigrid import (
    ACTION_NAMES,
    COLOR_NAMES,
    DOOR_STATES,
    OBJECT_NAMES,
    MiniGridNotInstalled,
    decode_mission,
    encode_mission,
    make_minigrid,
)
from langadapt.llm import LLMBackend
from langadapt.roles import oracle_for
from langadapt.roles.advisor import LLMAdvisor
from langadapt.roles.minigrid_oracle import BabyAIBotOracle, GridPlanOracle
from langadapt.roles.reward_shaping import RewardShaping

needs_minigrid = pytest.mark.skipif(
    find_spec("minigrid") is None,
    reason="minigrid is not installed (the optional extra: pip install 'langadapt[minigrid]')",
)
DOORKEY, GOTO = "MiniGrid-DoorKey-5x5-v0", "BabyAI-GoToObj-v0"
MISSION = "Mission: pick up the red ball. You face north and carry nothing. "


# --------------------------------------------------------------------------- hand-built grids
def handmade(objects, agent=(2, 3), direction=3, size=5):
    """A bridge on a walled ``size`` x ``size`` room with ``objects`` ({(x, y): WorldObj})."""
    from minigrid.core.grid import Grid
    from minigrid.core.mission import MissionSpace
    from minigrid.minigrid_env import MiniGridEnv

    class Handmade(MiniGridEnv):
        def __init__(self) -> None:
            super().__init__(mission_space=MissionSpace(mission_func=lambda: "pick up the red "
                                                        "ball"), grid_size=size, max_steps=20)

        def _gen_grid(self, width: int, height: int) -> None:
            self.grid = Grid(width, height)
            self.grid.wall_rect(0, 0, width, height)
            for (x, y), obj in objects.items():
                self.grid.set(x, y, obj)
            self.agent_pos, self.agent_dir = agent, direction
            self.mission = "pick up the red ball"

    return bridge_module.MiniGridBridge(Handmade())


def described(env, obs=None):
    if obs is None:
        obs, _ = env.reset(seed=0)
    return env.describer(obs)


@needs_minigrid
def test_encodings_are_minigrids_and_missions_round_trip():
    from minigrid.core import constants
    from minigrid.core.actions import Actions

    assert OBJECT_NAMES == tuple(constants.IDX_TO_OBJECT[i] for i in range(len(OBJECT_NAMES)))
    assert COLOR_NAMES == tuple(constants.IDX_TO_COLOR[i] for i in range(len(COLOR_NAMES)))
    assert DOOR_STATES == tuple(sorted(constants.STATE_TO_IDX, key=constants.STATE_TO_IDX.get))
    assert len(ACTION_NAMES) == len(Actions)
    for level in (DOORKEY, GOTO, "BabyAI-GoToLocal-v0", "BabyAI-SynthSeq-v0"):
        env = make_minigrid(level)
        for seed in range(3):
            env.reset(seed=seed)
            ids, bag = encode_mission(env.mission)
            assert decode_mission(ids) == env.mission and bag[-1] == 0  # all in the vocabulary
    ids, bag = encode_mission("fly to the moon, then land")
    assert decode_mission(ids) == "fly to the moon, then land" and bag[-1] == 3
    with pytest.raises(ValueError, match="has 5 words.*mission_words=4"):
        encode_mission("go to the red ball", words=4)


@needs_minigrid
def test_describer_key_and_goal_in_view():
    from minigrid.core.world_object import Goal, Key

    env = handmade({(1, 2): Key("yellow"), (3, 1): Goal()})
    assert described(env) == (
        MISSION + "Ahead of you is free space. You see a yellow key 1 step forward and 1 step "
        "left. You see a green goal 2 steps forward and 1 step right. You see a wall 3 steps "
        "forward. You see a wall 2 steps left. You see a wall 2 steps right.")


@needs_minigrid
def test_describer_locked_door_ahead_then_open():
    from minigrid.core.world_object import Door, Key

    env = handmade({(2, 2): Door("yellow", is_locked=True), (1, 3): Key("yellow")}, size=6)
    assert described(env) == (
        MISSION + "Ahead of you is a locked yellow door. You see a yellow key 1 step left. You "
        "see a locked yellow door 1 step forward. You see a wall 3 steps forward. You see a "
        "wall 2 steps left. You see a wall 3 steps right.")
    for action in (0, 3, 1, 5):  # turn to the key, pick it up, turn back, unlock the door
        obs, *_ = env.step(action)
    assert described(env, obs) == (
        "Mission: pick up the red ball. You face north and carry a yellow key. Ahead of you "
        "is an open yellow door. You see an open yellow door 1 step forward. You see a wall "
        "3 steps forward. You see a wall 2 steps left. You see a wall 3 steps right.")


@needs_minigrid
def test_describer_carrying_a_ball_and_nothing_behind():
    from minigrid.core.world_object import Ball, Box

    # the blue ball at (2, 4) is behind the agent: never described
    env = handmade({(2, 2): Ball("red"), (2, 4): Ball("blue"), (1, 1): Box("purple")})
    assert described(env) == (
        MISSION + "Ahead of you is a red ball. You see a red ball 1 step forward. You see a "
        "purple box 2 steps forward and 1 step left. You see a wall 3 steps forward. You see "
        "a wall 2 steps left. You see a wall 2 steps right.")
    obs, reward, terminated, *_ = env.step(3)  # pick up the red ball
    assert described(env, obs) == (
        "Mission: pick up the red ball. You face north and carry a red ball. Ahead of you is "
        "free space. You see a purple box 2 steps forward and 1 step left. You see a wall 3 "
        "steps forward. You see a wall 2 steps left. You see a wall 2 steps right.")
    assert "blue" not in described(env, obs)


@needs_minigrid
def test_unknown_objects_are_described_generically():
    from minigrid.core.world_object import Door, WorldObj

    class Gem(WorldObj):  # an object minigrid's encodings do not know
        def __init__(self) -> None:
            super().__init__("ball", "red")

        def encode(self) -> tuple[int, int, int]:
            return (42, 17, 9)

    class OddDoor(Door):  # a door in a state of its own
        def encode(self) -> tuple[int, int, int]:
            return (4, 1, 7)

    env = handmade({(2, 2): Gem(), (3, 2): OddDoor("green")})
    assert described(env) == (
        MISSION + "Ahead of you is an unknown object. You see an unknown object 1 step forward. "
        "You see a green door 1 step forward and 1 step right. You see a wall 3 steps forward. "
        "You see a wall 2 steps left. You see a wall 2 steps right.")


# --------------------------------------------------------------------------- the bridge
@needs_minigrid
def test_bridge_conventions():
    env = make_minigrid(DOORKEY)
    obs, info = env.reset(seed=3)
    assert obs.dtype == np.float32 and env.observation_space.contains(obs)
    assert info == {"legal_moves": [0, 1, 2, 3, 4, 5], "is_success": False,
                    "mission": "use the key to open the door and then get to the goal"}
    again, _ = env.reset(seed=3)
    np.testing.assert_array_equal(obs, again)
    with pytest.raises(ValueError, match="outside the action space"):
        env.step(7)
    oracle = GridPlanOracle()
    while True:
        obs, reward, terminated, truncated, info = env.step(oracle.best_move(env, [0, 1, 2, 3, 5]))
        if terminated or truncated:
            break
    assert terminated and reward > 0 and info["is_success"]
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(0)
    assert make_minigrid("BabyAI-GoToObj-v0", legal_moves="all").legal_moves == list(range(7))
    assert make_minigrid("MiniGrid-GoToObject-6x6-N2-v0").legal_moves == list(range(7))
    made = gym.make("langadapt/MiniGrid-DoorKey-5x5-v0", max_steps=7)
    assert made.unwrapped.minigrid.max_steps == 7
    assert "langadapt/BabyAI-GoToLocal-v0" in gym.registry
    with pytest.raises(ValueError, match="unknown MiniGrid/BabyAI level 'MiniGrid-Nope-v0'"):
        make_minigrid("MiniGrid-Nope-v0")
    with pytest.raises(ValueError, match="arguments \\['sise'\\]"):
        make_minigrid(DOORKEY, sise=3)
    with pytest.raises(ValueError, match="legal_moves="):
        make_minigrid(DOORKEY, legal_moves="some")


class Echo(LLMBackend):
    """An LLM whose description is the first line of its prompt."""

    name = "echo"

    def generate(self, messages, schema, max_tokens):
        return "echo: " + messages[-1]["content"].splitlines()[0]

    def resolve_identity(self):
        return "echo-1"


def each_adapter(env):
    return {"raw": adapters.make("raw", env),
            "language": adapters.make("language", env, encoder=CountingEncoder()),
            "llm": adapters.LLMAdapter(env, backend=Echo(cache_path=None),
                                       encoder=CountingEncoder(), action_history_length=0)}


@needs_minigrid
@pytest.mark.parametrize("level", [DOORKEY, GOTO])
def test_check_env_with_each_adapter(level):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "different from the unwrapped", "no spec"
        check_env(gym.make(f"langadapt/{level}").unwrapped, skip_render_check=True)
        for name, adapter in each_adapter(make_minigrid(level)).items():
            env = adapters.LanguageObservation(make_minigrid(level), adapter)
            check_env(env, skip_render_check=True)
            _, info = env.reset(seed=0)
            if name == "llm":
                assert info["description"].startswith("echo: Current state: Mission: go") or \
                    info["description"].startswith("echo: Current state: Mission: use")
            elif name == "language":
                assert info["description"].startswith("Mission: ")


@needs_minigrid
def test_language_spec_and_memo():
    env = make_minigrid(GOTO)
    spec = language_for(env)
    assert spec.action_names == ("turn left", "turn right", "move forward", "pick up", "drop",
                                 "toggle", "done") and "MiniGrid" in spec.task
    adapter = adapters.make("language", env, encoder=CountingEncoder())
    wrapped = adapters.LanguageObservation(env, adapter)
    seen = set()
    rng = np.random.default_rng(0)
    _, info = wrapped.reset(seed=0)
    seen.add(env.observation().tobytes())
    np.testing.assert_array_equal(spec.state_of(env), env.observation())
    assert info["description"] == spec.describe(env.observation())
    for _ in range(60):
        _, _, terminated, truncated, info = wrapped.step(int(rng.choice(info["legal_moves"])))
        seen.add(env.observation().tobytes())
        if terminated or truncated:
            _, info = wrapped.reset()
            seen.add(env.observation().tobytes())
    assert adapter.stats()["memo_misses"] == len(seen) < 61  # each distinct view once


# --------------------------------------------------------------------------- oracles
@needs_minigrid
@pytest.mark.parametrize(("level", "kind"), [(DOORKEY, GridPlanOracle), (GOTO, BabyAIBotOracle)])
def test_oracle_solves_twenty_episodes(level, kind):
    env = make_minigrid(level)
    oracle = oracle_for(env)
    assert isinstance(oracle, kind) and oracle_for(env) is oracle  # one per environment
    solved = 0
    for seed in range(20):
        _, info = env.reset(seed=seed)
        start = oracle.potential(env)
        assert -1.0 <= start < 0.0
        while True:
            before = oracle.potential(env)
            _, _, terminated, truncated, info = env.step(oracle.best_move(env, info["legal_moves"]))
            if terminated or truncated:
                break
            assert oracle.potential(env) > before  # every step of the plan is progress
        solved += info["is_success"]
    assert solved == 20


@needs_minigrid
def test_oracle_refuses_levels_it_cannot_plan():
    with pytest.raises(ValueError, match=r"no oracle can plan on MiniGrid-Fetch-5x5-N2-v0; "
                                         r"oracles plan on BabyAI-\* levels.*MiniGrid-DoorKey"):
        oracle_for(make_minigrid("MiniGrid-Fetch-5x5-N2-v0"))
    with pytest.raises(ValueError, match="cannot solve BabyAI-KeyInBox-v0"):
        oracle_for(make_minigrid("BabyAI-KeyInBox-v0"))


@needs_minigrid
def test_oracle_advice_reaches_the_goal_more_often():
    """Q-learning exploring at random on DoorKey-5x5 with 30 steps per episode: with the
    oracle's advice the training episodes reach the goal far more often (same seeds)."""
    outcomes = {}
    for advised in (False, True):
        wins = []
        for seed in range(3):
            env = make_minigrid(DOORKEY, max_steps=30)
            agent = agents.make_agent("qlearning", env.observation_space, env.action_space,
                                      seed=seed, epsilon_start=1.0, epsilon_min=1.0)
            advisor = LLMAdvisor({"source": "oracle", "probability": 0.9, "replace": "any",
                                  "decay_fraction": 1.0}, seed=seed) if advised else None
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a table keyed by 254-dim observations
                records = agents.train(agent, env, episodes=8, seed=seed, progress=False,
                                       advisor=advisor)
            wins += [r.success for r in records if r.phase == "train"]
        outcomes[advised] = (sum(wins), len(wins) - sum(wins))
    assert outcomes[True][0] > outcomes[False][0]
    assert fisher_exact([outcomes[True], outcomes[False]], alternative="greater").pvalue < 0.01


@needs_minigrid
def test_oracle_potential_shapes_rewards():
    env = make_minigrid(DOORKEY)
    shaper = RewardShaping(env, {"potential": "oracle", "gamma": 1.0})
    _, info = shaper.reset(seed=1)
    oracle = oracle_for(env)
    total = 0.0
    while True:
        _, reward, terminated, truncated, info = shaper.step(
            oracle.best_move(env, info["legal_moves"]))
        total += info["shaping"]
        if terminated or truncated:
            break
    assert 0.0 < total <= 1.0  # gamma 1: the shaping telescopes to -Phi(start)


# --------------------------------------------------------------------------- the extra
def test_a_level_without_minigrid_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "minigrid", None)  # `import minigrid` fails
    monkeypatch.setitem(sys.modules, "minigrid.minigrid_env", None)
    monkeypatch.setattr(bridge_module, "_LIVE_IDS_REGISTERED", False)
    for make in (lambda: make_minigrid(DOORKEY), lambda: gym.make(f"langadapt/{GOTO}")):
        with pytest.raises(MiniGridNotInstalled) as caught:
            make()
        message = str(caught.value)
        assert "\n" not in message and "pip install 'langadapt[minigrid]'" in message
        assert isinstance(caught.value, ValueError)


@pytest.mark.heavy
def test_importing_langadapt_does_not_import_minigrid():
    code = ("import sys, langadapt, langadapt.environments.minigrid, "
            "langadapt.roles.minigrid_oracle, gymnasium; "
            "assert 'minigrid' not in sys.modules, 'minigrid imported'; "
            "assert 'langadapt/MiniGrid-DoorKey-5x5-v0' in gymnasium.registry")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
