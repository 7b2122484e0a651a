"""Sentence sets (adapters.representation) and the features extractors that read them and raw
BabyAI views (agents.sb3_extractors): the layout, its padding, order invariance of the
pooled output, fit checks at file read, and a few hundred training steps from a file."""

from __future__ import annotations

from importlib.util import find_spec

import numpy as np
import pytest
import torch
from gymnasium import spaces
from test_representations import toy, vectors

from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.schema import ConfigError

needs_sb3_minigrid = pytest.mark.skipif(
    find_spec("sb3_contrib") is None or find_spec("minigrid") is None,
    reason="needs the sb3 and minigrid extras")


def test_each_sentence_has_its_row_with_its_presence_and_vector():
    adapter, encoder = toy(embedding="sentence_set", max_sentences=3)
    rows = [v.reshape(3, 4).tolist() for v in vectors(adapter)]
    assert rows[0] == [[1, 1, 0, 0], [1, 0, 0, 1], [0, 0, 0, 0]]  # "Left. Near."
    assert rows[1] == [[1, 0, 1, 0], [1, 0, 0, 1], [0, 0, 0, 0]]  # "Middle. Near."
    assert rows[2] == [[1, 1, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0]]  # "Right."
    assert encoder.encoded == ["Left.", "Near.", "Middle.", "Right."]  # each sentence once
    space = adapter.observation_space
    assert space.shape == (12,) and space.dtype == np.float32
    assert space.low.reshape(3, 4)[:, 0].tolist() == [0, 0, 0]
    assert space.high.reshape(3, 4)[:, 0].tolist() == [1, 1, 1]


def test_with_raw_puts_the_raw_state_after_the_set():
    adapter, _ = toy(embedding="sentence_set", max_sentences=2, with_raw=True)
    vector = adapter(np.array([0, 2], dtype=np.float32), [0, 1, 2, 3])
    assert vector.tolist() == [1, 1, 1, 0, 0, 0, 0, 0, 0, 2]
    assert adapter.observation_space.shape == (10,)


def test_a_set_larger_than_its_padding_is_one_line_naming_the_size():
    adapter, _ = toy(embedding="sentence_set", max_sentences=2)
    adapter(np.array([0, 0], dtype=np.float32), [0, 1, 2, 3])  # two sentences fit
    wide, _ = toy(embedding="sentence_set", max_sentences=2)
    object.__setattr__(wide, "_describer", lambda s, *_: "Left. Near. Right.")
    with pytest.raises(ValueError, match=r"^embedding: sentence_set holds max_sentences=2 "
                                         r"sentences; the describer .* gave 3 .*raise "
                                         r"max_sentences to at least 3$"):
        wide(np.array([0, 1], dtype=np.float32), [0, 1, 2, 3])


@pytest.mark.parametrize(("settings", "message"), [
    ({"embedding": "sentences", "max_sentences": 8}, "max_sentences applies to embedding: "
                                                     "sentence_set, not to embedding: sentences"),
    ({"embedding": "sentence_set", "normalise": "centre"}, "normalise: centre applies to one "
                                                           "vector per state"),
])
def test_settings_that_do_not_apply_to_sets_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        toy(**settings)


def _attention(rows: int = 5, dimension: int = 3, raw: int = 0):
    from langadapt.agents.sb3_extractors import SentenceSetAttention

    torch.manual_seed(0)
    space = spaces.Box(-1, 1, (rows * (1 + dimension) + raw,), np.float32)
    return SentenceSetAttention(space, max_sentences=rows, dimension=dimension, hidden=8,
                                heads=2, features_dim=6)


def _set(vectors: list[list[float]], rows: int = 5) -> np.ndarray:
    out = np.zeros((rows, 1 + len(vectors[0])), np.float32)
    for index, vector in enumerate(vectors):
        out[index] = [1.0, *vector]
    return out.ravel()


@pytest.mark.skipif(find_spec("stable_baselines3") is None, reason="needs the sb3 extra")
def test_the_pooled_output_ignores_the_order_of_the_sentences_after_the_first():
    extractor = _attention()
    first = [0.9, -0.1, 0.3]
    members = [[0.1, 0.2, 0.3], [-0.5, 0.4, 0.0], [0.7, -0.7, 0.2]]
    orders = [members, members[::-1], [members[1], members[2], members[0]]]
    outputs = [extractor(torch.tensor(_set([first, *m]))[None]) for m in orders]
    for output in outputs[1:]:
        torch.testing.assert_close(output, outputs[0])
    swapped = extractor(torch.tensor(_set([members[0], first, *members[1:]]))[None])
    assert not torch.allclose(swapped, outputs[0])  # the first sentence (the mission) is not
    padded = _set([first, *members])                 # a member: it conditions the pooling
    padded.reshape(5, 4)[4, 1:] = 5.0  # an absent row's values are ignored
    torch.testing.assert_close(extractor(torch.tensor(padded)[None]), outputs[0])


@pytest.mark.skipif(find_spec("stable_baselines3") is None, reason="needs the sb3 extra")
def test_a_set_extractor_on_a_flat_vector_is_one_line_naming_both():
    from langadapt.agents.sb3_extractors import BabyAI11Extractor, SentenceSetAttention

    with pytest.raises(ValueError, match=r"^extractor sentence_attention expects a sentence set "
                                         r"of 24 rows .*\(9240\).* has 1536 values"):
        SentenceSetAttention(spaces.Box(-1, 1, (1536,), np.float32))
    with pytest.raises(ValueError, match=r"^extractor babyai11 expects 1 MiniGrid/BabyAI raw "
                                         r"observation\(s\) of 254 values .*has 9240"):
        BabyAI11Extractor(spaces.Box(-1, 1, (9240,), np.float32))


@needs_sb3_minigrid
def test_the_babyai11_extractor_reads_a_bridged_view():
    from langadapt.agents.sb3_extractors import BabyAI11Extractor
    from langadapt.environments.minigrid import make_minigrid

    env = make_minigrid("BabyAI-GoToLocal-v0")
    obs, _ = env.reset(seed=3)
    torch.manual_seed(0)
    extractor = BabyAI11Extractor(env.observation_space, channels=16).eval()
    features = extractor(torch.tensor(np.stack([obs, obs]), dtype=torch.float32))
    assert features.shape == (2, 16 + 4)
    assert features[0, -4:].tolist() == obs[147:151].tolist()  # the compass, as it is


GLAM_SHRUNK = {
    "name": "glam_shrunk",
    "environment": {"id": "langadapt/BabyAI-MixedTrainLocal-v0",
                    "params": {"num_dists": 8, "goal": "mixed"}},
    "adapters": [{"type": "language", "label": "sentence_set",
                  "settings": {"embedding": "sentence_set", "max_sentences": 24}},
                 {"type": "raw", "label": "raw_babyai11"}],
    "agents": [{"type": "sb3", "label": "ppo", "params": {
        "algorithm": "MaskablePPO", "n_steps": 64, "batch_size": 64, "n_epochs": 1,
        "deterministic": False},
        "per_adapter": {"sentence_set": {"extractor": "sentence_attention"},
                        "raw_babyai11": {"extractor": "babyai11",
                                         "extractor_kwargs": {"channels": 16}}}}],
    "training": {"steps": 256, "n_envs": 2},
    "seeds": [0],
    "evaluation": {"episodes": 2, "heldout_seeds": {"first": 1000000, "count": 3}},
}


@pytest.mark.parametrize(("adapter", "extractor", "message"), [
    ({"type": "raw"}, "sentence_attention", "extractor sentence_attention cannot read adapter "
     "raw's observations .raw views of .*; it takes a language or llm adapter with embedding: "
     "sentence_set"),
    ({"type": "language", "settings": {"embedding": "sentences"}}, "babyai11",
     "extractor babyai11 cannot read adapter language's observations .language states with "
     "embedding: sentences.; it takes raw views of a MiniGrid/BabyAI level"),
])
@needs_sb3_minigrid
def test_an_extractor_that_does_not_fit_an_adapter_is_refused_when_the_file_is_read(
        adapter, extractor, message):
    data = {**GLAM_SHRUNK, "adapters": [adapter],
            "agents": [{"type": "sb3", "params": {"algorithm": "MaskablePPO",
                                                  "extractor": extractor}}]}
    with pytest.raises(ConfigError, match=message):
        experiment_from_dict(data)


@needs_sb3_minigrid
def test_unknown_extractor_keywords_are_refused_when_the_file_is_read():
    data = {**GLAM_SHRUNK, "agents": [{"type": "sb3", "params": {
        "algorithm": "MaskablePPO", "extractor": "babyai11", "extractor_kwargs": {"chanels": 8}}}],
        "adapters": [{"type": "raw"}]}
    with pytest.raises(ConfigError, match=r"extractor_kwargs.chanels=8: expected one of "
                                          r"view_size, mission_words, channels, words"):
        experiment_from_dict(data)


@needs_sb3_minigrid
def test_both_extractors_train_a_few_hundred_steps_from_a_file(tmp_path):
    from langadapt.experiments.runner import run_experiment

    config = experiment_from_dict({**GLAM_SHRUNK, "cache_dir": str(tmp_path / "cache")})
    folder = run_experiment(config, tmp_path / "out", progress=False, log=lambda _: None)
    csv = (folder / "episodes.csv").read_text().splitlines()
    header = csv[0].split(",")
    phases = {(r.split(",")[header.index("adapter")], r.split(",")[header.index("phase")])
              for r in csv[1:]}
    for adapter in ("sentence_set", "raw_babyai11"):
        assert (adapter, "train") in phases and (adapter, "final") in phases


@needs_sb3_minigrid
@pytest.mark.parametrize(("key", "value"), [("max_sentences", 4), ("dimension", 100)])
def test_a_set_layout_other_than_the_adapters_is_refused_by_the_check(tmp_path, key, value):
    from langadapt.experiments.one_run import check_build, make_env

    data = {**GLAM_SHRUNK, "adapters": GLAM_SHRUNK["adapters"][:1],
            "agents": [{"type": "sb3", "label": "ppo", "params": {
                "algorithm": "MaskablePPO", "extractor": "sentence_attention",
                "extractor_kwargs": {key: value}}}]}
    config = experiment_from_dict(data)
    with pytest.raises(ConfigError, match=rf"^agents.0.params \(ppo on adapters.0 "
                                          rf"\(sentence_set\)\): extractor_kwargs.{key}={value}"
                                          r": the adapter's observation has"):
        check_build(config, make_env(config))
