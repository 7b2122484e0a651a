"""Instruction following: instructions, search, feedback, the wrapper, results, the shipped set."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from agent_fixtures import q_learning_from_random_starts
from gymnasium.utils.env_checker import check_env

from langadapt import adapters, agents
from langadapt.adapters import LanguageObservation
from langadapt.environments import MazeEnv
from langadapt.environments.maze import ACTION_DELTAS, MAZE_LAYOUTS, bfs_distances
from langadapt.roles.instruction_chain import (
    InstructionFollowing,
    SubGoal,
    cell_check,
    decompose_task,
    make_chain,
    split_task,
)
from langadapt.roles.instruction_search import (
    Exploration,
    LLMFeedback,
    SimulatedFeedback,
    explore,
    match,
    refine,
)
from langadapt.roles.instructions import (
    InstructionsConfig,
    follow_rate,
    load_instruction_set,
    prepare_instructions,
)

# umaze: start (3, 1), goal (3, 3); TL (1, 1), TR (1, 3); actions 0 left 1 right 2 up 3 down
TL, TR, GOAL = (1, 1), (1, 3), (3, 3)


class FakeLLM:
    """An object with ``chat``: replies from a list (cycled on the last one)."""

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.asked: list[list[dict[str, str]]] = []

    def chat(self, messages: list[dict[str, str]], schema: Any = None, **_: Any) -> str:
        self.asked.append(messages)
        return self.replies[min(len(self.asked), len(self.replies)) - 1]


@pytest.fixture(scope="module")
def umaze_adapter() -> Any:
    return adapters.make("language", MazeEnv("umaze"))


def language_umaze(adapter: Any, **params: Any) -> LanguageObservation:
    return LanguageObservation(MazeEnv("umaze", **params), adapter)


@pytest.fixture(scope="module")
def umaze_exploration(umaze_adapter: Any) -> Exploration:
    return explore(language_umaze(umaze_adapter), episodes=30, seed=0)


def unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def hand_exploration(texts: list[str], vectors: list[np.ndarray]) -> Exploration:
    return Exploration(texts, np.stack(vectors), [[(float(i), 0.0)] for i in range(len(texts))],
                       [1] * len(texts), [list(range(len(texts)))], {})


# ----------------------------------------------------------------------------- instructions
@pytest.mark.parametrize("bad", ["", "   ", None, 3, b"the goal", ["the goal", ""], []])
def test_empty_or_non_text_instruction_is_an_error_naming_it(bad: Any) -> None:
    with pytest.raises(ValueError, match="instruction|sub-goal"):
        make_chain(bad)


def test_chains_and_rule_split() -> None:
    assert make_chain("  the  goal ") == ("the goal",)
    assert make_chain(["the top left corner", "the goal"]) == ("the top left corner", "the goal")
    assert split_task("Go to the top left corner, then to the top right corner, and finish at "
                      "the goal.") == ("the top left corner", "the top right corner", "the goal")
    assert make_chain(task="Visit the dead end at the top right before you go to the goal.",
                      decompose="rules") == ("the dead end at the top right", "the goal")


def test_llm_decomposition_correction_then_error_naming_the_task() -> None:
    good = FakeLLM('{"subgoals": ["go1", "go2"]}',
                   '{"subgoals": ["the top left corner", "the goal"]}')
    assert decompose_task("Top left, then the goal.", good) == ("the top left corner", "the goal")
    assert len(good.asked) == 2 and "no usable sub-goal" in good.asked[1][-1]["content"]
    bad = FakeLLM('{"subgoals": ["<first place>"]}', "not json")
    with pytest.raises(ValueError, match="Reach the far corner"):
        decompose_task("Reach the far corner.", bad)
    assert len(bad.asked) == 2


# ----------------------------------------------------------------------------- matching
def test_matching_on_hand_written_descriptions(umaze_adapter: Any) -> None:
    texts = ["You are at the goal.", "There is a wall to your left.",
             "The room has a red door."]
    vectors = umaze_adapter.encode_many(texts)
    seen = hand_exploration(texts, list(vectors))
    seen.encode = umaze_adapter.encode_many
    best = match("you have reached the goal", seen, threshold=0.5, top_k=3)
    assert best.texts[0] == "You are at the goal." and not best.fallback
    assert best.scores[0] > 0.6
    loose = match("you have reached the goal", seen, threshold=-1.0, top_k=3, margin=None)
    assert len(loose.texts) == 3 and loose.scores == sorted(loose.scores, reverse=True)
    weak = match("bake a chocolate cake", seen, threshold=0.9)
    assert weak.fallback and len(weak.texts) == 1
    with pytest.raises(ValueError, match="chocolate cake.*no state above the threshold 0.9"):
        match("bake a chocolate cake", seen, threshold=0.9, strict=True)


def test_ties_break_by_text_not_by_visit_order() -> None:
    same = unit(1, 1, 0)
    for order in (["b state", "a state", "c state"], ["c state", "b state", "a state"]):
        vectors = [same if t != "c state" else unit(0, 0, 1) for t in order]
        seen = hand_exploration(order, vectors)
        found = match("x", seen, threshold=0.5, top_k=1, vector=unit(1, 1, 0))
        assert found.texts == ["a state"]
        both = match("x", seen, threshold=0.5, top_k=3, vector=unit(1, 1, 0))
        assert both.texts == ["a state", "b state"]


def test_exploration_records_states_and_costs(umaze_adapter: Any,
                                              umaze_exploration: Exploration) -> None:
    seen = umaze_exploration
    assert len(seen.texts) == 7 and seen.cells(range(7)) == set(MazeEnv("umaze").free_cells())
    assert seen.cost["episodes"] == 30 and seen.cost["steps"] > 30
    before = umaze_adapter.stats()["encoder_calls"]
    again = explore(language_umaze(umaze_adapter), episodes=5, seed=1)
    assert again.cost["encoder_calls"] == 0  # every text known: no encoder call
    assert umaze_adapter.stats()["encoder_calls"] == before
    json.dumps(seen.as_dict())


# ----------------------------------------------------------------------------- feedback
def test_simulated_feedback_moves_a_wrong_match_to_the_right_cell(
        umaze_exploration: Exploration) -> None:
    plain = refine("the top left corner", umaze_exploration, None)
    index = umaze_exploration.index()
    assert umaze_exploration.cells([index[t] for t in plain.texts]) != {TL}  # MiniLM misses it
    for rule in ("probe", "sets"):  # elsciRL's "vector" rule misses it (docs/instructions.md)
        fixed = refine("the top left corner", umaze_exploration, SimulatedFeedback([TL]),
                       rule=rule, rounds=3, per_round=3)
        assert umaze_exploration.cells([index[t] for t in fixed.texts]) == {TL}, rule
        assert sum(len(r) for r in fixed.feedback) <= 9 and len(fixed.feedback) <= 3
    with pytest.raises(ValueError, match="rounds"):
        refine("the top left corner", umaze_exploration, SimulatedFeedback([TL]), rounds=4)


def test_llm_feedback_parses_verdicts_and_rejects_bad_replies(
        umaze_exploration: Exploration) -> None:
    judge = LLMFeedback(FakeLLM('{"satisfied": false, "reason": "no"}',
                                '{"satisfied": true, "reason": "walls up and left"}'))
    found = refine("the top left corner", umaze_exploration, judge, rounds=1, per_round=2)
    assert len(found.confirmed) == 1 and not found.fallback
    assert judge.stats()["judgements"] == 2 and judge.stats()["llm_calls"] == 2
    with pytest.raises(ValueError, match="satisfied"):
        LLMFeedback(FakeLLM('{"verdict": 1}')).judge("x", "a state", [])


# ----------------------------------------------------------------------------- the wrapper
def test_wrapper_pays_each_subgoal_once_per_episode_and_in_order(umaze_adapter: Any) -> None:
    env = InstructionFollowing(language_umaze(umaze_adapter, step_reward=0.0, goal_reward=0.0),
                               [SubGoal("the top right corner", check=cell_check([TR])),
                                SubGoal("the top left corner", check=cell_check([TL]))],
                               form="instruction", bonus=1.0)
    obs, info = env.reset(seed=0)
    assert obs.shape == (384 + 3,) and obs[384:].tolist() == [1, 0, 0]
    assert info["description"].endswith("Current sub-goal: the top right corner.")
    rewards = []
    for action in (2, 2, 1, 1, 0, 0):  # up, up to TL (too early), right x2 to TR, left x2 to TL
        obs, reward, terminated, _, info = env.step(action)
        rewards.append(reward)
    assert rewards == [0, 0, 0, 1, 0, 1] and terminated and info["is_success"]
    assert info["description"].endswith("All sub-goals reached.")
    assert obs[384:].tolist() == [0, 0, 1]
    env.reset()
    for action in (2, 2, 1, 1, 0, 1, 1):  # TR, then back and forth: paid once
        _, reward, *_ = env.step(action)
        rewards.append(reward)
    assert rewards[6:] == [0, 0, 0, 1, 0, 0, 0]
    assert env.first_success_episode == 1


@pytest.mark.filterwarnings("ignore:.*different from the unwrapped version")
def test_wrapper_matches_descriptions_and_passes_check_env(umaze_adapter: Any,
                                                           umaze_exploration: Exploration) -> None:
    found = refine("the top right corner", umaze_exploration, SimulatedFeedback([TR]))
    env = InstructionFollowing(language_umaze(umaze_adapter), [found], form="potential",
                               gamma=0.9)
    check_env(env, skip_render_check=True)
    env.reset(seed=0)
    infos = [env.step(a)[4] for a in (2, 2, 1, 1)]
    assert [i["subgoal_index"] for i in infos] == [0, 0, 0, 1]
    assert infos[-1]["unshaped_reward"] == -0.001


@pytest.mark.parametrize(("settings", "message"), [
    ({"gamma": 1.5}, r"^gamma=1.5: .*less than or equal to 1$"),
    ({"bonus": float("nan")}, r"^bonus=NaN: .*finite number$"),
    ({"step_reward": True}, r"^step_reward=true: .*valid number$"),
    ({"form": "reward"}, r"""^form="reward": .*'potential' or 'instruction'$"""),
])
def test_bad_wrapper_settings_name_the_argument_and_value(settings, message) -> None:
    with pytest.raises(ValueError, match=message):
        InstructionFollowing(MazeEnv("umaze"), [SubGoal("TL", check=cell_check([TL]))],
                             **settings)


def test_potential_form_telescopes() -> None:
    rng = np.random.default_rng(0)
    env = InstructionFollowing(MazeEnv("umaze", max_steps=40),
                               [SubGoal("TL", check=cell_check([TL])),
                                SubGoal("TR", check=cell_check([TR]))],
                               form="potential", gamma=0.9, bonus=2.0)
    for episode in range(20):
        _, info = env.reset(seed=episode)
        phi0, discounted, t = env.potential(), 0.0, 0
        while True:
            legal = info["legal_moves"]
            _, reward, terminated, truncated, info = env.step(int(rng.choice(legal)))
            discounted += 0.9**t * (reward - info["unshaped_reward"])
            t += 1
            if terminated or truncated:
                break
        end = 0.0 if terminated else env.potential()
        assert discounted == pytest.approx(0.9**t * end - phi0, abs=1e-9)


def greedy_after_q_learning(env: gym.Env, episodes: int = 2000, seed: int = 0) -> Any:
    """Q-learning on (cell, sub-goal index) from random starts; returns the agent."""
    return q_learning_from_random_starts(env, episodes, seed)


def rollout(agent: Any, env: gym.Env) -> list[tuple[int, int]]:
    obs, info = env.reset(seed=0)
    path = [env.unwrapped.cell]
    for _ in range(20):
        obs, _, terminated, truncated, info = env.step(
            agent.act(obs, info["legal_moves"], False))
        path.append(env.unwrapped.cell)
        if terminated or truncated:
            break
    return path


def test_potential_form_keeps_the_optimal_policy_instruction_form_follows_the_chain() -> None:
    chain = [SubGoal("TL", check=cell_check([TL])), SubGoal("TR", check=cell_check([TR]))]
    distance = bfs_distances(MAZE_LAYOUTS["umaze"].grid(), GOAL)

    def maze() -> MazeEnv:
        return MazeEnv("umaze", step_reward=0.0, max_steps=30)

    plain = InstructionFollowing(maze(), chain, pay=False)
    shaped = InstructionFollowing(maze(), chain, form="potential", gamma=0.9, bonus=3.0)
    for env in (plain, shaped):
        agent = greedy_after_q_learning(env)
        for cell in maze().free_cells():  # every cell, every sub-goal index: optimal move
            if cell == GOAL:
                continue
            for k in range(3):
                obs = np.concatenate([np.array(cell, np.float32), np.eye(3, dtype=np.float32)[k]])
                if agent.key(obs) not in agent.table:
                    continue
                a = agent.act(obs, env.unwrapped.legal_moves_at(cell), False)
                target = (cell[0] + ACTION_DELTAS[a][0], cell[1] + ACTION_DELTAS[a][1])
                assert distance[target] == distance[cell] - 1, (cell, k, a)
        assert len(rollout(agent, env)) == 5  # start + 4 moves straight to the goal
    instructed = InstructionFollowing(maze(), [*chain, SubGoal("goal", check=cell_check([GOAL]))],
                                      form="instruction", gamma=0.9)
    path = rollout(greedy_after_q_learning(instructed), instructed)
    assert path.index(TL) < path.index(TR) < path.index(GOAL)


def test_stable_baselines3_trains_on_the_wrapper(umaze_adapter: Any) -> None:
    from stable_baselines3 import DQN

    env = InstructionFollowing(language_umaze(umaze_adapter, max_steps=30),
                               [SubGoal("TL", check=cell_check([TL])),
                                SubGoal("goal", check=cell_check([GOAL]))], form="instruction")
    model = DQN("MlpPolicy", env, learning_starts=50, seed=0, device="cpu", buffer_size=1000)
    model.learn(total_timesteps=300)
    assert model.num_timesteps == 300


# ----------------------------------------------------------------------------- end to end
def test_chain_on_umaze_solved_end_to_end(umaze_adapter: Any, tmp_path: Any) -> None:
    env = language_umaze(umaze_adapter, max_steps=40)
    plan = prepare_instructions(
        {"task": "Go to the top left corner, then the top right corner, then the goal.",
         "decompose": "rules", "feedback": "simulated", "truth": [[TL], [TR], [GOAL]],
         "form": "instruction", "exploration_episodes": 30}, env, seed=0)
    report = plan.report()
    assert [m["precision"] for m in report["matches"]] == [1.0, 1.0, 1.0]
    assert report["unreachable"] == [] and report["exploration"]["episodes"] == 30
    json.dumps(report)
    train_env = plan.wrap(env)
    agent = agents.make_agent("qlearning", train_env.observation_space, train_env.action_space,
                              seed=0, alpha=0.5, gamma=0.95, epsilon_decay=0.9)
    agents.train(agent, train_env, episodes=40, seed=0, progress=False)
    assert agent.table_key == "description" and train_env.first_success_episode is not None
    rate = follow_rate(agent, plan.wrap(language_umaze(umaze_adapter, max_steps=40)),
                       episodes=3, truth=[[TL], [TR], [GOAL]])
    assert rate["rate"] == 1.0 and rate["truth_rate"] == 1.0 and rate["mean_length"] == 6
    image = plan.picture(tmp_path / "matches.png")
    assert image.shape == (5 * 32, 5 * 32, 3) and (tmp_path / "matches.png").stat().st_size > 0


def test_unreachable_order_is_reported_and_config_is_checked(umaze_adapter: Any) -> None:
    plan = prepare_instructions({"chain": ["the goal", "the top left corner"],
                                 "feedback": "simulated", "truth": [[GOAL], [TL]],
                                 "exploration_episodes": 20}, language_umaze(umaze_adapter))
    assert plan.report()["unreachable"] == [2]  # the goal ends every episode
    with pytest.raises(ValueError, match="exactly one"):
        InstructionsConfig(instruction="the goal", chain=["the goal"])
    with pytest.raises(ValueError, match="ground truth"):
        InstructionsConfig(instruction="the goal", feedback="simulated")
    with pytest.raises(ValueError, match="truth has 1"):
        prepare_instructions({"chain": ["a", "b"], "truth": [[GOAL]]},
                             language_umaze(umaze_adapter))


# ----------------------------------------------------------------------------- the shipped set
def test_shipped_set_has_ground_truth_that_rules_and_hands_agree_on() -> None:
    items = load_instruction_set()
    assert len(items) >= 20 and {i.maze for i in items} == set(MAZE_LAYOUTS)
    assert any(len(i.steps) > 1 for i in items) and all(
        i.task for i in items if len(i.steps) > 1)
    for item in items:
        for step in item.steps:
            assert step.derived(item.maze) == sorted(step.cells), (item.id, step.text)


def test_a_plan_made_with_language_pays_a_raw_adapter_run_by_state(umaze_adapter: Any) -> None:
    plan = prepare_instructions({"instruction": "the top right corner", "feedback": "simulated",
                                 "truth": [[TR]], "match_on": "state", "form": "instruction",
                                 "exploration_episodes": 20}, language_umaze(umaze_adapter))
    raw = MazeEnv("umaze")
    env = plan.wrap(LanguageObservation(raw, adapters.make("raw", raw)))
    env.reset(seed=0)
    rewards = [env.step(a)[1] for a in (2, 2, 1, 1)]
    assert rewards == [0, 0, 0, 1] and env.observation_space.shape == (2 + 2,)


def test_an_experiment_file_with_an_instructions_block(tmp_path):
    """The runner explores, matches (simulated feedback), wraps training in the
    instruction-following reward and records the matches, the follow rate and a picture."""
    import json

    from langadapt.experiments import runner
    from langadapt.experiments.config import experiment_from_dict
    from langadapt.experiments.schema import ConfigError

    data = {"name": "instructed", "environment": {
                "id": "langadapt/Maze-v0", "params": {"maze": "umaze"},
                "instructions": {"set_id": "umaze-corners-then-goal", "feedback": "simulated",
                                 "form": "instruction", "exploration_episodes": 30}},
            "adapters": [{"type": "language"}],
            "agents": [{"type": "qlearning", "params": {"alpha": 0.5}}],
            "training": {"episodes": 30}, "seeds": 1,
            "evaluation": {"every": 10, "episodes": 1, "final_episodes": 2},
            "cache_dir": str(tmp_path / "cache")}
    out = runner.run_experiment(experiment_from_dict(data, "x.yaml"), tmp_path / "out",
                                progress=False, log=lambda s: None)
    done = json.loads((out / "runs" / "language__qlearning__seed0" / "done.json").read_text())
    record = done["instructions"]
    assert [m["subgoal"] for m in record["matches"]] == list(range(1, len(record["chain"]) + 1))
    assert all("precision" in m and "recall" in m for m in record["matches"])
    assert set(record["follow"]) >= {"rate", "truth_rate", "env_success"}
    assert (out / "runs" / "language__qlearning__seed0" / "instructions.png").stat().st_size
    data["environment"]["instructions"] = {"instruction": "  "}
    with pytest.raises(ConfigError, match="environment.instructions"):
        experiment_from_dict(data, "x.yaml")


def test_a_shipped_instruction_is_checked_when_the_file_is_read():
    from langadapt.experiments.config import experiment_from_dict
    from langadapt.experiments.schema import ConfigError

    data = {"name": "x", "environment": {"id": "langadapt/Maze-v0", "params": {"maze": "medium"},
                                         "instructions": {"set_id": "nope"}},
            "adapters": [{"type": "language"}], "agents": [{"type": "qlearning"}],
            "training": {"episodes": 2}, "seeds": 1}
    with pytest.raises(ConfigError, match="'nope' is not an entry of the shipped maze set"):
        experiment_from_dict(data, "x.yaml")
    data["environment"]["instructions"] = {"set_id": "umaze-top-left"}
    with pytest.raises(ConfigError, match="for the umaze maze .* expected langadapt/Maze-v0 "
                                          "with maze: umaze"):
        experiment_from_dict(data, "x.yaml")
