"""Many environments per learner: adapters.vector.LanguageVectorEnv, the step learner over
its copies, and training.n_envs in experiment files (issue 31)."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest
from adapter_fixtures import CountingEncoder
from experiment_fixtures import raw_config

from langadapt import adapters, agents
from langadapt.adapters.vector import LanguageVectorEnv
from langadapt.agents.random_agent import RandomAgent
from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.one_run import train_run
from langadapt.experiments.results import runs_of
from langadapt.experiments.schema import ConfigError

UMAZE = ("langadapt/Maze-v0", {"maze": "umaze"})
SMALL_DQN = {"learning_starts": 50, "hidden_sizes": [16], "batch_size": 8}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def umaze() -> gym.Env:
    return gym.make(UMAZE[0], **UMAZE[1])


def language_copies(n: int, encoder: CountingEncoder | None = None) -> LanguageVectorEnv:
    adapter = adapters.make("language", umaze(), encoder=encoder or CountingEncoder())
    return LanguageVectorEnv([umaze() for _ in range(n)], adapter)


def rows_of(result) -> list[tuple]:
    return [(r.phase, r.episode, r.return_, r.length, r.success, r.total_steps) for r in result]


def test_a_batched_cold_step_encodes_the_new_texts_of_all_copies_in_one_call():
    encoder = CountingEncoder()
    batches: list[int] = []
    encode_many = encoder.encode_many
    encoder.encode_many = lambda texts: batches.append(len(texts)) or encode_many(texts)
    envs = language_copies(4, encoder)
    obs, infos = envs.reset(seed=0)
    assert batches == [1] and obs.shape == (4, 8)  # four copies at the one start: one text
    seen, rng = set(infos["description"]), np.random.default_rng(0)
    for _ in range(40):
        batches.clear()
        actions = [int(rng.choice(infos["legal_moves"][i])) for i in range(4)]
        _, _, _, _, infos = envs.step(np.array(actions))
        texts = set(infos["description"]) | set(infos.get("final_info", {}).get(
            "description", [None]*4)) - {None}
        new = texts - seen
        assert batches == ([len(new)] if new else [])  # every new text, one call
        seen |= texts
    assert len(seen) > 4


def test_the_copies_match_one_wrapper_each_and_the_final_obs_ends_the_episode():
    n = 3
    adapter = adapters.make("language", umaze(), encoder=CountingEncoder())
    copies = LanguageVectorEnv([umaze() for _ in range(n)], adapter)
    single = [adapters.LanguageObservation(umaze(), adapter) for _ in range(n)]
    obs, infos = copies.reset(seed=5)
    for i, env in enumerate(single):
        want, info = env.reset(seed=5 + i)
        np.testing.assert_array_equal(obs[i], want)
        assert infos["description"][i] == info["description"]
    rng, ended = np.random.default_rng(1), 0
    for _ in range(300):
        actions = [int(rng.choice(infos["legal_moves"][i])) for i in range(n)]
        obs, rewards, terminated, truncated, infos = copies.step(np.array(actions))
        for i, env in enumerate(single):
            want, reward, term, trunc, info = env.step(actions[i])
            assert (rewards[i], terminated[i], truncated[i]) == (reward, term, trunc)
            if term or trunc:  # the final obs in final_obs, the next episode's first in obs
                ended += 1
                np.testing.assert_array_equal(infos["final_obs"][i], want)
                assert infos["final_info"]["description"][i] == info["description"]
                want, info = env.reset()
            np.testing.assert_array_equal(obs[i], want)
            assert infos["description"][i] == info["description"]
    assert ended > 0


class Recorder(RandomAgent):
    """A random policy that keeps every transition it learns."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.transitions: list[tuple] = []

    def learn(self, obs, action, reward, next_obs, terminated, truncated,
              next_legal_moves=None, demonstration=False) -> None:
        self.transitions.append((np.array(obs), np.array(next_obs), terminated or truncated))


def test_the_learner_learns_each_copy_in_order_and_an_episode_ends_on_its_final_obs():
    n = 4
    envs = language_copies(n)
    agent = Recorder(envs.single_observation_space, envs.single_action_space, seed=0)
    started = time.perf_counter()
    result = agents.train(agent, envs, steps=400, progress=False, seed=2)
    assert sum(r.wall_time for r in result) <= time.perf_counter() - started  # no overlap
    assert len(agent.transitions) == 400 and result[-1].total_steps <= 400
    start, _ = adapters.LanguageObservation(umaze(), envs.adapter).reset(seed=0)  # fixed
    finals = 0
    for i in range(n):
        mine = agent.transitions[i::n]
        for (_, next_obs, done), (obs, _, _) in zip(mine, mine[1:], strict=False):
            if done:  # the final obs (the goal), then the next episode from the start
                finals += 1
                assert not np.array_equal(next_obs, start)
                np.testing.assert_array_equal(obs, start)
            else:
                np.testing.assert_array_equal(obs, next_obs)
    assert finals == sum(1 for r in result if r.phase == "train") > 0
    with pytest.raises(ValueError, match="eval_env"):
        agents.train(agent, envs, steps=10, eval_every=1, progress=False)


@pytest.mark.parametrize("kind", ["qlearning", "dqn"])
def test_n_copies_give_the_same_rows_for_a_seed_across_two_runs(kind):
    results = []
    for _ in range(2):
        envs = language_copies(4)
        agent = agents.make_agent(kind, envs.single_observation_space, envs.single_action_space,
                                  seed=0, **(SMALL_DQN if kind == "dqn" else {}))
        eval_env = adapters.LanguageObservation(umaze(), envs.adapter)
        results.append(rows_of(agents.train(agent, envs, steps=800, seed=3, eval_every=5,
                                            eval_episodes=2, eval_env=eval_env,
                                            progress=False)))
        if kind == "qlearning":
            assert agent.table_key == "description"
    assert results[0] == results[1] and len(results[0]) > 5
    assert {row[0] for row in results[0]} == {"train", "eval"}


def test_a_sync_vector_env_of_wrappers_trains_to_the_same_rows():
    """The learner takes any SAME_STEP vector env: N wrappers give the batched env's rows."""
    results = []
    for batched in (True, False):
        adapter = adapters.make("language", umaze(), encoder=CountingEncoder())
        envs = LanguageVectorEnv([umaze() for _ in range(3)], adapter) if batched else \
            gym.vector.SyncVectorEnv([lambda a=adapter: adapters.LanguageObservation(umaze(), a)]
                                     * 3, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        agent = agents.make_agent("dqn", envs.single_observation_space,
                                  envs.single_action_space, seed=1, **SMALL_DQN)
        results.append(rows_of(agents.train(agent, envs, steps=300, seed=4, progress=False)))
    assert results[0] == results[1] and len(results[0]) > 3


def test_the_learner_refuses_an_advisor_and_other_learners_a_vector_env():
    envs = language_copies(2)
    space, actions = envs.single_observation_space, envs.single_action_space
    with pytest.raises(ValueError, match="advisor"):
        agents.StepLearner(RandomAgent(space, actions), override=object()).learn(
            envs, agents.Budget(steps=10))
    sync = gym.vector.SyncVectorEnv([lambda: adapters.LanguageObservation(
        umaze(), envs.adapter)], autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
    with pytest.raises(ValueError, match="SAME_STEP"):
        agents.train(RandomAgent(space, actions), sync, steps=10, progress=False)


def _runner_rows(data: dict) -> list[tuple]:
    config = experiment_from_dict(data)
    rows: list[dict] = []
    for run in runs_of(config):
        train_run(config, run, rows.append)
    return [(r["agent"], r["seed"], r["phase"], r["episode"], r["success"], r["return"],
             r["length"]) for r in rows]


def test_n_envs_1_gives_the_rows_of_a_file_without_it_and_n_copies_repeat(tmp_path):
    data = raw_config(tmp_path, seeds=[0], agents=[{"type": "qlearning"}],
                      training={"steps": 300})
    today = _runner_rows(data)
    assert _runner_rows({**data, "training": {"steps": 300, "n_envs": 1}}) == today
    four = {**data, "training": {"steps": 300, "n_envs": 4}}
    rows = _runner_rows(four)
    assert rows == _runner_rows(four) and rows != today
    assert {row[2] for row in rows} == {"train", "eval", "final"}
    shaped = {**four, "environment": {**data["environment"],
                                      "reward_shaping": {"potential": "oracle"}}}
    shaped_rows = _runner_rows(shaped)  # each copy shaped: the training returns change
    assert [r[5] for r in shaped_rows if r[2] == "train"] != [
        r[5] for r in rows if r[2] == "train"]
    assert (experiment_from_dict(four).fingerprint()
            != experiment_from_dict(data).fingerprint()
            == experiment_from_dict({**data, "training": {"steps": 300, "n_envs": 1}})
            .fingerprint())


@pytest.mark.parametrize("value", [0, -2, 2.5, True, "4"])
def test_a_bad_n_envs_names_the_key(tmp_path, value):
    with pytest.raises(ConfigError, match="n_envs"):
        experiment_from_dict(raw_config(tmp_path, training={"steps": 10, "n_envs": value}))


@pytest.mark.parametrize("change, named", [
    ({"agents": [{"type": "llm_policy"}]}, "llm_policy"),
    ({"agents": [{"type": "dqn", "advisor": {"backend": "ollama"}}]}, "advisor"),
    ({"agents": [{"type": "qlearning", "training": {"steps": 10, "n_envs": 2}},
                 {"type": "llm_policy_search"}]}, "llm_policy_search"),
    ({"environment": {"id": "langadapt/Maze-v0", "params": {"maze": "umaze"}, "instructions": {
        "set_id": "umaze-corners-then-goal", "feedback": "simulated"}}}, "instructions"),
])
def test_an_unsupported_combination_with_n_envs_is_a_config_error(tmp_path, change, named):
    data = raw_config(tmp_path, training={"steps": 10, "n_envs": 2}, **change)
    with pytest.raises(ConfigError, match=f"n_envs.*{named}|{named}.*n_envs"):
        experiment_from_dict(data)


def test_tensorboard_probes_the_copies_of_a_vector_env(tmp_path):
    envs = language_copies(2)
    agent = agents.make_agent("qlearning", envs.single_observation_space,
                              envs.single_action_space)
    log = agents.TensorBoardLog(tmp_path / "tb", probes=3)
    agents.train(agent, envs, steps=100, progress=False, callbacks=[log])
    assert len(log.states) == 3 and all(isinstance(obs, str) for obs, _ in log.states)
    assert list((tmp_path / "tb").iterdir())


def test_the_vector_bench_runs_an_arm_and_checks_its_steps(capsys):
    pytest.importorskip("minigrid")
    from langadapt.benchmarks.vector_bench import arm
    from langadapt.experiments.cli import main

    figures = arm("raw", 4, 64, seed=0)
    assert figures["steps_per_s"] > 0 and figures["peak_mb"] > 0
    assert main(["bench", "--only", "vector", "--steps", "0"]) == 2
    assert "--steps 0: expected an int from 1 to 1,000,000,000" in capsys.readouterr().err


@pytest.mark.slow  # loads MiniLM (about 3 s)
def test_the_runner_trains_on_language_copies_with_minilm(tmp_path):
    """The experiment path end to end: MiniLM, the store in cache_dir, 4 copies, Q-learning
    keyed by descriptions; the second run (warm store) gives the same rows."""
    data = raw_config(tmp_path, seeds=[0], adapters=[{"type": "language"}],
                      agents=[{"type": "qlearning"}], training={"steps": 200, "n_envs": 4})
    first = _runner_rows(data)
    assert first == _runner_rows(data) and {row[2] for row in first} == {"train", "eval", "final"}


def test_an_llm_adapter_on_n_copies_keeps_n_requests_in_flight(tmp_path, monkeypatch):
    from langadapt.experiments import one_run
    from langadapt.experiments.schema import AdapterSpec

    made: list[dict] = []
    monkeypatch.setattr(one_run.adapters, "make", lambda kind, env, **settings: made.append(
        {"kind": kind, **settings}))
    llm = AdapterSpec(type="llm", settings={"backend": "openai"})
    for spec, n_envs in ((llm, 1), (llm, 16), (llm, 200), (AdapterSpec(type="llm", settings={
            "backend": "openai", "concurrency": 2}), 16), (AdapterSpec(type="language"), 16)):
        one_run.make_adapter(spec, None, str(tmp_path), n_envs)
    assert [m.get("concurrency") for m in made] == [None, 16, 64, 2, None]
