"""BALROG's BabyAI suite: the MixedTrainLocal level, its five goal types and their words.

Needs the optional ``minigrid`` package (skipped without it)."""

from __future__ import annotations

import re

import gymnasium as gym
import pytest

pytest.importorskip("minigrid")

from minigrid.utils.baby_ai_bot import BabyAIBot  # noqa: E402

from langadapt.environments.minigrid import GLAM_EXCLUDED, GOAL_TYPES, VOCABULARY  # noqa: E402

SUITE = "langadapt/BabyAI-MixedTrainLocal-v0"

MISSIONS = {
    "goto": r"go to (a|the) \w+ (key|ball|box)",
    "pickup": r"pick up (a|the) \w+ (key|ball|box)",
    "open": r"open the (\w+ )?door",
    "putnext": r"put (a|the) \w+ (key|ball|box) next to (a|the) \w+ (key|ball|box)",
    "pick_up_seq_go_to": r"(pick up (a|the) \w+ \w+, then go to (a|the) \w+ \w+"
                         r"|go to (a|the) \w+ \w+ after you pick up (a|the) \w+ \w+)",
}


def _bot_episode(env: gym.Env, seed: int, on_step=None) -> bool:
    env.reset(seed=seed)
    level = env.unwrapped.minigrid
    bot = BabyAIBot(level)
    while True:
        _, _, terminated, truncated, info = env.step(int(bot.replan()))
        if on_step is not None:
            on_step(env)
        if terminated or truncated:
            return bool(info["is_success"])


@pytest.mark.parametrize("goal", GOAL_TYPES)
def test_each_goal_type_gives_its_missions_and_the_bot_solves_20_seeded_episodes(goal):
    env = gym.make(SUITE, goal=goal)
    solved = 0
    for seed in range(20):
        solved += _bot_episode(env, seed)
        assert re.fullmatch(MISSIONS[goal], env.unwrapped.mission), env.unwrapped.mission
    assert solved == 20


def test_an_unknown_goal_type_names_the_five():
    with pytest.raises(ValueError, match="goal='fetch'.*goto, pickup, open, putnext, "
                                         "pick_up_seq_go_to"):
        gym.make(SUITE, goal="fetch")


@pytest.mark.parametrize("goal, objects", [("goto", 1), ("pickup", 1), ("putnext", 2),
                                           ("pick_up_seq_go_to", 2), ("open", 1)])
def test_num_dists_adds_distractors_to_balrogs_zero(goal, objects):
    for num_dists in (0, 3):
        env = gym.make(SUITE, goal=goal, num_dists=num_dists)
        env.reset(seed=5)
        level = env.unwrapped.minigrid
        things = [c for c in level.grid.grid if c is not None and c.type in ("key", "ball", "box")]
        assert len(things) == objects + num_dists  # open: the door's key and the distractors


def test_open_has_two_rooms_and_a_locked_door_whose_key_is_in_the_agents_room():
    env = gym.make(SUITE, goal="open")
    for seed in range(10):
        env.reset(seed=seed)
        level = env.unwrapped.minigrid
        doors = [c for c in level.grid.grid if c is not None and c.type == "door"]
        assert (level.num_rows, level.num_cols) == (1, 2) and len(doors) == 1
        door = doors[0]
        assert door.is_locked
        keys = [c for c in level.grid.grid if c is not None and c.type == "key"]
        assert [k.color for k in keys] == [door.color]
        assert level.room_from_pos(*keys[0].cur_pos) is level.room_from_pos(*level.agent_pos)


def test_glams_excluded_phrases_never_appear_unless_allowed():
    seen = {goal: set() for goal in ("goto", "open")}
    for goal in seen:
        env = gym.make(SUITE, goal=goal)
        for seed in range(150):
            env.reset(seed=seed)
            seen[goal].add(env.unwrapped.mission)
    assert not [m for ms in seen.values() for m in ms if any(p in m for p in GLAM_EXCLUDED)]
    env = gym.make(SUITE, goal="goto", excluded=())
    missions = set()
    for seed in range(150):
        env.reset(seed=seed)
        missions.add(env.unwrapped.mission)
    assert [m for m in missions if any(p in m for p in GLAM_EXCLUDED)]


def _phrase(obj) -> str:
    if obj.type == "door":
        state = "open" if obj.is_open else "locked" if obj.is_locked else "closed"
        return f"{state} {obj.color} door"
    return f"{obj.color} {obj.type}"


@pytest.mark.parametrize("goal", GOAL_TYPES)
def test_the_describer_says_every_object_door_and_carried_thing_in_view(goal):
    """Against the level's own grid: each object the agent sees, each door's state and what
    it carries is in the description, at every step of the bot's episodes."""
    env = gym.make(SUITE, goal=goal, num_dists=2)
    checked = {"objects": 0, "carried": 0}

    def check(env) -> None:
        level = env.unwrapped.minigrid
        text = env.unwrapped.describer.describe(env.unwrapped.observation(), (), None)
        assert text.startswith(f"Mission: {level.mission}.")
        if level.carrying is None:
            assert "carry nothing" in text
        else:
            assert f"carry a {_phrase(level.carrying)}." in text
            checked["carried"] += 1
        for obj in level.grid.grid:
            if obj is not None and obj.type != "wall" and level.agent_sees(*obj.cur_pos):
                assert _phrase(obj) in text, (_phrase(obj), text)
                checked["objects"] += 1

    for seed in range(5):
        env.reset(seed=seed)
        assert set(env.unwrapped.mission.replace(",", " ,").split()) <= set(VOCABULARY)
        _bot_episode(env, seed, check)
    assert checked["objects"] > 0
    if goal != "goto":
        assert checked["carried"] > 0


# ----------------------------------------------------- GLAM's test missions, mixed goals
WITHHELD_PAIR = re.compile(r"(yellow box|red key|red door|green ball|grey door)")
ANY_PAIR = re.compile(r"\b(red|green|blue|purple|yellow|grey) (key|ball|box|door)")


@pytest.mark.parametrize("goal", GOAL_TYPES)
def test_test_missions_name_only_withheld_pairs_and_the_bot_solves_20_seeded_episodes(goal):
    env = gym.make(SUITE, goal=goal, missions="test")
    solved = 0
    for seed in range(20):
        solved += _bot_episode(env, seed)
        mission = env.unwrapped.mission
        assert re.fullmatch(MISSIONS[goal], mission), mission
        pairs = [m.group(0) for m in ANY_PAIR.finditer(mission)]
        assert pairs and all(WITHHELD_PAIR.fullmatch(p) for p in pairs), mission
    assert solved == 20


def test_training_missions_never_name_a_withheld_pair():
    env = gym.make(SUITE, goal="mixed")
    for seed in range(60):
        env.reset(seed=seed)
        assert not WITHHELD_PAIR.search(env.unwrapped.mission), env.unwrapped.mission


def test_mixed_goal_draws_every_goal_type_with_its_rooms_and_step_limit():
    env = gym.make(SUITE, goal="mixed")
    seen = {}
    for seed in range(60):
        env.reset(seed=seed)
        level = env.unwrapped.minigrid
        seen[level.goal] = (level.width, level.max_steps)
        assert re.fullmatch(MISSIONS[level.goal], env.unwrapped.mission)
    assert seen == {"goto": (8, 64), "pickup": (8, 64), "open": (15, 128),
                    "putnext": (8, 128), "pick_up_seq_go_to": (8, 128)}
    first = [gym.make(SUITE, goal="mixed").reset(seed=7)[1]["mission"] for _ in range(2)]
    assert first[0] == first[1]  # the goal is drawn from the seeded generator


def test_an_unknown_mission_set_names_the_two_and_excluded_with_test_is_refused():
    with pytest.raises(ValueError, match="missions='valid': expected one of train, test"):
        gym.make(SUITE, missions="valid")
    with pytest.raises(ValueError, match="excluded=.*missions='test'.*one of them"):
        gym.make(SUITE, missions="test", excluded=["red ball"])
