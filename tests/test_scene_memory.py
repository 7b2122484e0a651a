"""Issue 57: memory in the state, numbers kept beside the words, the mission's grounding as
the pooling's prior, and the extractors that read them (docs/adapters.md, docs/agents.md)."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest
import torch
from adapter_fixtures import CountingEncoder

from langadapt import adapters
from langadapt.adapters.memory import Memory
from langadapt.adapters.numbers import NUMBER, PLACEHOLDER, split_numbers
from langadapt.adapters.vector import LanguageVectorEnv

pytest.importorskip("minigrid")
BABYAI = "langadapt/BabyAI-MixedTrainLocal-v0"
MEMORY = {"observations": 3, "actions": 2}


def _babyai() -> gym.Env:
    return gym.make(BABYAI, num_dists=8, goal="mixed")


# ------------------------------------------------------------------------- memory
def test_memory_frames_are_the_observations_of_k_steps_ago_and_reset_at_an_episode_start():
    env = gym.make("langadapt/Maze-v0", maze="umaze")
    plain = adapters.make("raw", env)
    remembered = adapters.make("raw", env, memory=MEMORY)
    frame = plain.observation_space.shape[0]
    n = env.action_space.n
    assert remembered.observation_space.shape == (3 * frame + 2 * n,)
    wrapped = adapters.LanguageObservation(env, remembered)
    obs, _ = wrapped.reset(seed=0)
    seen = [obs[:frame].copy()]
    assert not obs[frame:].any()  # nothing before the episode's start
    actions = [1, 2, 3, 0, 1]
    for t, action in enumerate(actions):
        obs, *_ = wrapped.step(action)
        seen.append(obs[:frame].copy())
        for k in range(3):  # frame k is the observation of k steps ago (zeros before the start)
            expected = seen[-1 - k] if len(seen) > k else np.zeros(frame)
            np.testing.assert_array_equal(obs[k * frame:(k + 1) * frame], expected)
        last = obs[3 * frame:3 * frame + n]
        assert last.argmax() == action and last.sum() == 1
        if t >= 1:
            assert obs[3 * frame + n:].argmax() == actions[t - 1]
    obs, _ = wrapped.reset(seed=1)
    assert not obs[frame:].any()


def test_memory_is_the_same_with_one_copy_and_with_n_copies():
    adapter = adapters.make("language", _babyai(), embedding="sentences", memory=MEMORY,
                            encoder=CountingEncoder())
    single = [adapters.LanguageObservation(_babyai(), adapter) for _ in range(2)]
    vector = LanguageVectorEnv([_babyai(), _babyai()], adapter)
    batch, _ = vector.reset(seed=5)
    for index, env in enumerate(single):
        obs, _ = env.reset(seed=5 + index)
        np.testing.assert_array_equal(obs, batch[index])
    rng = np.random.default_rng(0)
    for _ in range(80):  # long enough for episodes to end and restart
        actions = rng.integers(0, 6, size=2)
        batch, _, terminated, truncated, infos = vector.step(actions)
        for index, env in enumerate(single):
            obs, _, done, cut, _ = env.step(int(actions[index]))
            if done or cut:
                np.testing.assert_array_equal(obs, infos["final_obs"][index])
                obs, _ = env.reset()
            np.testing.assert_array_equal(obs, batch[index])


def test_past_states_cost_no_encoder_call():
    env = _babyai()
    counts = []
    for memory in (None, MEMORY):
        adapter = adapters.make("language", env, embedding="sentences", memory=memory,
                                encoder=CountingEncoder())
        wrapped = adapters.LanguageObservation(_babyai(), adapter)
        wrapped.reset(seed=3)
        for action in [2, 2, 1, 2, 0, 2, 2, 1]:
            wrapped.step(action)
        counts.append(adapter.stats()["encoder_calls"])
    assert counts[0] == counts[1] > 0


@pytest.mark.parametrize(("adapter", "setting", "value"), [
    ("raw", "memory: {observations", 0), ("raw", "memory: {observations", 99),
    ("raw", "memory: {actions", 17), ("language", "memory: {actions", -1),
    ("language", "numbers", 65), ("language", "numbers", -2)])
def test_memory_and_numbers_bounds_are_one_line_naming_the_key_and_value(tmp_path, adapter,
                                                                          setting, value):
    from langadapt.experiments.config import load_config
    from langadapt.experiments.schema import ConfigError

    closing = "}" if setting.startswith("memory") else ""
    path = tmp_path / "bad.yaml"
    path.write_text(
        "name: bad\nenvironment: {id: langadapt/Maze-v0}\n"
        f"adapters: [{{type: {adapter}, settings: {{{setting}: {value}{closing}}}}}]\n"
        "agents: [{type: random}]\ntraining: {episodes: 1}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    line = str(caught.value).strip().splitlines()[-1]
    key = setting.split("{")[-1].split(":")[0]
    assert key in line and f"={value}" in line


# ------------------------------------------------------------------------- numbers
@pytest.mark.parametrize("text", [
    "You see a grey box 3 steps forward and 1 step right.",
    "The pole is at -0.53 rad, moving 1e-3 rad/s; nine cells down and forty-two left.",
    "Angle 12.5 degrees, speed +0.25.",
])
def test_numbers_round_trip_in_order(text):
    template, values = split_numbers(text)
    tokens = NUMBER.findall(text) if not NUMBER.groups else [m.group(0) for m in
                                                              NUMBER.finditer(text)]
    assert template.count(PLACEHOLDER) == len(values) == len(tokens)
    rebuilt = template
    for token in tokens:
        rebuilt = rebuilt.replace(PLACEHOLDER, token, 1)
    assert rebuilt == text
    assert not re.search(r"\d", template)


def _describer_texts(env_id: str, steps: int = 40, **params) -> list[str]:
    """The shipped describer's texts along a random walk (described, not encoded)."""
    env = gym.make(env_id, **params)
    adapter = adapters.make("language", env)
    rng = np.random.default_rng(0)
    obs, info = env.reset(seed=0)
    env.action_space.seed(0)
    history: list = []
    texts = []
    for _ in range(steps):
        legal = info.get("legal_moves", list(range(getattr(env.action_space, "n", 0))))
        texts.append(adapter.describe(obs, legal, history))
        action = (env.action_space.sample() if isinstance(env.action_space, gym.spaces.Box)
                  else int(rng.choice(legal)))
        history.append((obs, action if isinstance(action, int) else tuple(action)))
        obs, _, done, cut, info = env.step(action)
        if done or cut:
            (obs, info), history = env.reset(), []
    return texts


SHIPPED = [("langadapt/Maze-v0", {}), ("langadapt/Sailing-v0", {}), ("langadapt/CartPole-v0", {}),
           ("langadapt/FrozenLake-v0", {}), ("langadapt/FrozenLakeMaps-v0", {}),
           (BABYAI, {"num_dists": 8, "goal": "mixed"}), ("Pendulum-v1", {}),
           ("MountainCarContinuous-v0", {}), ("Taxi-v4", {}), ("CliffWalking-v1", {})]


@pytest.mark.parametrize(("env_id", "params"), SHIPPED)
def test_numbers_are_taken_out_of_every_shipped_describer(env_id, params):
    for text in _describer_texts(env_id, **params):
        template, values = split_numbers(text)
        rebuilt = template
        for match in NUMBER.finditer(text):
            rebuilt = rebuilt.replace(PLACEHOLDER, match.group(0), 1)
        assert rebuilt == text
        assert len(values) == template.count(PLACEHOLDER)
        assert not re.search(r"\d", template), template


def test_sentences_differing_in_a_number_share_the_text_vector():
    env = _babyai()
    adapter = adapters.make("language", env, embedding="paragraph", numbers=3)
    one, three = adapter.text_vectors(["You see a grey box 1 step forward.",
                                       "You see a grey box 4 step forward."])
    np.testing.assert_array_equal(one[:384], three[:384])
    assert one[384] == 1 and three[384] == 4 and not one[385:].any()


def test_numbers_per_sentence_in_a_set_and_in_slots():
    env = _babyai()
    text = "Mission: go to the red ball. You see a red ball 2 steps forward and 3 steps left."
    for embedding, row in (("sentence_set", 1 + 384 + 2), ("sentences", 384 + 2)):
        adapter = adapters.make("language", env, embedding=embedding, numbers=2)
        vector = adapter.text_vectors([text])[0]
        start = row + (1 + 384 if embedding == "sentence_set" else 384)  # the 2nd sentence
        assert list(vector[start:start + 2]) == [2.0, 3.0]
        assert not vector[row - 2:row].any()  # the mission has no numbers
        assert adapter.observation_space.contains(adapter.adapt(*_first_input(env))[0])


def _first_input(env):
    obs, info = env.reset(seed=0)
    return obs, info["legal_moves"], ()


def test_more_numbers_than_the_width_is_refused_naming_the_sentence():
    adapter = adapters.make("language", _babyai(), embedding="sentences", numbers=1)
    with pytest.raises(ValueError) as caught:
        adapter.text_vectors(["You see a box 2 steps forward and 1 step left."])
    line = str(caught.value)
    assert "\n" not in line and "numbers: 1" in line and "2 steps forward" in line


STEPS, RATIO = 2000, 0.5
"""A random walk's distinct texts encoded with numbers kept, at most half of those without
(issue 57's target; 0.49 here, 0.46 at 10,000 steps; training runs in docs/performance.md)."""


def test_numbers_kept_cut_the_distinct_texts_encoded():
    counts = []
    for numbers in (0, 2):
        adapter = adapters.make("language", _babyai(), embedding="sentence_set", numbers=numbers,
                                encoder=CountingEncoder())
        wrapped = adapters.LanguageObservation(_babyai(), adapter)
        wrapped.reset(seed=0)
        rng = np.random.default_rng(1)
        for _ in range(STEPS):
            _, _, done, cut, _ = wrapped.step(int(rng.integers(0, 6)))
            if done or cut:
                wrapped.reset()
        counts.append(adapter.stats()["encoder_calls"])
    assert counts[1] < counts[0] * RATIO


# ------------------------------------------------------------------------- grounding
def test_grounded_pooling_starts_on_the_sentence_naming_the_missions_object():
    from langadapt.agents.sb3_extractors import GroundedSentenceSet

    env = _babyai()
    adapter = adapters.make("language", env, embedding="sentence_set", max_sentences=8,
                            numbers=2)
    scene = ("Mission: pick up the grey box. You face north and carry nothing. "
             "Ahead of you is free space. You see a red ball 1 step forward and 2 steps left. "
             "You see a grey box 3 steps forward and 1 step right. "
             "You see a green key 2 steps forward. You see a wall 4 steps left.")
    obs = torch.as_tensor(np.array(adapter.text_vectors([scene])[0])[None])
    extractor = GroundedSentenceSet(adapter.observation_space, max_sentences=8, dimension=384,
                                    numbers=2)
    rows = obs.reshape(1, 8, 1 + 384 + 2)
    with torch.no_grad():
        scores = extractor.scores(rows, extractor.sentence(rows[:, :, 1:]))[0, :, 0, :6]
    # member 3 (row 4) is the grey box, in every head
    assert (scores.argmax(dim=-1) == 3).all()


# ------------------------------------------------------------------------- extractors
def test_a_set_extractor_on_a_memory_observation_reads_each_frame():
    from langadapt.agents.sb3_extractors import SentenceSetAttention

    adapter = adapters.make("language", _babyai(), embedding="sentence_set", max_sentences=24,
                            numbers=2, memory=MEMORY)
    wrapped = adapters.LanguageObservation(_babyai(), adapter)
    obs, _ = wrapped.reset(seed=0)
    extractor = SentenceSetAttention(adapter.observation_space, max_sentences=24, numbers=2,
                                     frames=3, actions=14)
    assert extractor(torch.as_tensor(obs[None])).shape == (1, 256)
    with pytest.raises(ValueError, match="3 frames then 13 action values"):
        SentenceSetAttention(adapter.observation_space, numbers=2, frames=3, actions=13)


def test_the_reproduced_baseline_trains_from_a_file(tmp_path):
    pytest.importorskip("sb3_contrib")
    from langadapt.experiments.config import load_config
    from langadapt.experiments.runner import run_experiment

    path = tmp_path / "baseline.yaml"
    path.write_text(f"""
name: baseline
environment: {{id: {BABYAI}, params: {{num_dists: 2, goal: goto}}}}
adapters:
  - {{type: raw, label: symbolic_ppo, settings: {{memory: {{observations: 3, actions: 2}}}}}}
agents:
  - type: sb3
    params: {{algorithm: MaskablePPO, n_steps: 32, batch_size: 64, n_epochs: 1,
              extractor: babyai11, extractor_kwargs: {{channels: 8}},
              policy_kwargs: {{net_arch: [16]}}}}
training: {{steps: 256, n_envs: 2}}
seeds: [0]
evaluation: {{episodes: 2, heldout_seeds: {{first: 1000000, count: 2}}}}
""")
    out = run_experiment(load_config(path), out_dir=tmp_path / "out", progress=False,
                         log=lambda _: None)
    assert (out / "summary.csv").is_file()


def test_an_extractor_that_does_not_fit_memory_is_refused_at_read(tmp_path):
    from langadapt.experiments.config import load_config
    from langadapt.experiments.schema import ConfigError

    path = tmp_path / "bad.yaml"
    path.write_text(f"""
name: bad
environment: {{id: {BABYAI}}}
adapters: [{{type: language, settings: {{embedding: sentences, memory: {{observations: 2}}}}}}]
agents: [{{type: sb3, params: {{algorithm: MaskablePPO, extractor: sentence_grounded}}}}]
training: {{steps: 64}}
""")
    with pytest.raises(ConfigError, match="sentence_grounded cannot read adapter language"):
        load_config(path)


def test_memory_round_trips_through_its_model():
    assert Memory(**MEMORY).action_size(gym.spaces.Discrete(7)) == 14
    assert Memory(observations=2, actions=1).action_size(gym.spaces.Box(-1, 1, (3,))) == 3


def test_box_actions_with_n_copies_are_recorded_and_remembered_as_one_copy_does():
    """Pendulum's torque (a Box action) through `LanguageVectorEnv`: the same observations
    (memory of the last actions' values included) and histories as one wrapper per copy."""
    adapter = adapters.make("language", gym.make("Pendulum-v1"), memory=MEMORY,
                            encoder=CountingEncoder())
    single = [adapters.LanguageObservation(gym.make("Pendulum-v1"), adapter) for _ in range(2)]
    vector = LanguageVectorEnv([gym.make("Pendulum-v1"), gym.make("Pendulum-v1")], adapter)
    assert vector.action_space.shape == (2, 1)
    batch, _ = vector.reset(seed=3)
    for index, env in enumerate(single):
        obs, _ = env.reset(seed=3 + index)
        np.testing.assert_array_equal(obs, batch[index])
    rng = np.random.default_rng(0)
    taken = []
    for _ in range(5):
        actions = rng.uniform(-2.0, 2.0, size=(2, 1)).astype(np.float32)
        taken.append(actions)
        batch, *_ = vector.step(actions)
        for index, env in enumerate(single):
            obs, *_ = env.step(actions[index])
            np.testing.assert_array_equal(obs, batch[index])
            assert list(vector._histories[index])[-1][1] == env.history[-1][1] == (
                float(actions[index, 0]),)
    frame = adapter.frame_space.shape[0]  # the last two actions' values, the latest first
    np.testing.assert_array_equal(batch[:, 3 * frame:], np.c_[taken[-1], taken[-2]])
    with pytest.raises(ValueError, match=r"actions has shape \(2,\), expected \(2, 1\)"):
        vector.step(np.zeros(2, dtype=np.float32))


def test_memory_of_observations_alone_takes_any_action_space():
    multi = gym.spaces.MultiDiscrete([2, 3])
    frame = gym.spaces.Box(0, 1, (3,))
    assert Memory(observations=2).space(frame, multi).shape == (6,)
    with pytest.raises(ValueError, match=r"memory\.actions.*MultiDiscrete"):
        Memory(observations=2, actions=1).space(frame, multi)
