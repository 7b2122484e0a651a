"""The representation settings (adapters.representation): exact vectors on a 3-text toy.

The toy: a 1x3 lake ``SFG`` whose three cells a describer names with three texts, and an
encoder that returns a fixed vector per text (and fails on any other text).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from langadapt.adapters import LanguageAdapter, RawAdapter
from langadapt.environments.frozenlake import FrozenLakeEnv
from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.schema import ConfigError

TEXTS = ("Left. Near.", "Middle. Near.", "Right.")
TABLE = {
    "Left. Near.": [2, 1, 0], "Middle. Near.": [0, 1, 0], "Right.": [1, 1, 0],  # paragraphs
    "Left.": [1, 0, 0], "Middle.": [0, 1, 0], "Near.": [0, 0, 1],  # sentences ("Right." above)
}


class TableEncoder:
    """Text -> the fixed vector of ``TABLE``; ``encoded`` lists every text encoded."""

    name = "table-test-encoder"
    dimension = 3
    normalized = False

    def __init__(self) -> None:
        self.encoded: list[str] = []

    def encode_many(self, texts: Sequence[str]) -> np.ndarray:
        self.encoded.extend(texts)
        return np.array([TABLE[text] for text in texts], dtype=np.float32)


def by_column(state: np.ndarray, legal_moves: Sequence[int], last_action: int | None) -> str:
    return TEXTS[int(state[1])]


def toy(**settings) -> tuple[LanguageAdapter, TableEncoder]:
    encoder = TableEncoder()
    env = FrozenLakeEnv(desc=["SFG"], is_slippery=False)
    return LanguageAdapter(env, describer=by_column, encoder=encoder, **settings), encoder


def vectors(adapter: LanguageAdapter) -> list[np.ndarray]:
    return [adapter(np.array([0, col], dtype=np.float32), [0, 1, 2, 3]) for col in range(3)]


def test_paragraph_is_the_encoder_vector_of_the_whole_text():
    adapter, encoder = toy()
    assert [v.tolist() for v in vectors(adapter)] == [TABLE[t] for t in TEXTS]
    assert encoder.encoded == list(TEXTS)


def test_centre_subtracts_the_fit_sets_mean():
    adapter, encoder = toy(normalise="centre")
    assert [v.tolist() for v in vectors(adapter)] == [[1, 0, 0], [-1, 0, 0], [0, 0, 0]]
    assert sorted(encoder.encoded) == sorted(TEXTS)  # fit set = the three; each encoded once
    assert adapter.observation_space.shape == (3,)
    assert np.isinf(adapter.observation_space.high).all()


def test_whiten_is_shrunk_zca_of_the_fit_set():
    # centred fit set [1,0,0], [-1,0,0], [0,0,0]: one eigenvalue 2/3 = eps, so that
    # direction is scaled by 1/sqrt(4/3) and every other one by 1/sqrt(2/3)
    adapter, _ = toy(normalise="whiten")
    half_root3 = math.sqrt(3) / 2
    np.testing.assert_allclose(np.array(vectors(adapter)),
                               [[half_root3, 0, 0], [-half_root3, 0, 0], [0, 0, 0]], atol=1e-6)
    unseen = adapter.standardiser(np.array([1, 2, 0], dtype=np.float32))  # centred [0, 1, 0]
    np.testing.assert_allclose(unseen, [0, math.sqrt(1.5), 0], atol=1e-6)


def test_sentences_fill_fixed_slots_and_encode_each_sentence_once():
    adapter, encoder = toy(embedding="sentences", sentence_slots=2)
    assert [v.tolist() for v in vectors(adapter)] == [
        [1, 0, 0, 0, 0, 1], [0, 1, 0, 0, 0, 1], [1, 1, 0, 0, 0, 0]]
    assert encoder.encoded == ["Left.", "Near.", "Middle.", "Right."]  # "Near." once
    assert adapter.observation_space.shape == (6,)


def test_sentences_past_the_last_slot_are_averaged_into_it():
    adapter, _ = toy(embedding="sentences", sentence_slots=1)
    assert vectors(adapter)[0].tolist() == [0.5, 0, 0.5]


def test_with_raw_appends_the_raw_observation():
    adapter, _ = toy(with_raw=True)
    assert [v.tolist() for v in vectors(adapter)] == [
        [2, 1, 0, 0, 0], [0, 1, 0, 0, 1], [1, 1, 0, 0, 2]]
    space = adapter.observation_space
    assert space.shape == (5,) and space.low[3:].tolist() == [0, 0]
    assert space.high[3:].tolist() == [0, 2]


def test_settings_compose_centre_sentences_and_raw():
    adapter, _ = toy(embedding="sentences", sentence_slots=2, normalise="centre", with_raw=True)
    # slot means over the fit set: [2/3, 2/3, 0] and [0, 0, 2/3]; "Right." is [1, 1, 0]
    np.testing.assert_allclose(vectors(adapter)[2],
                               [1 / 3, 1 / 3, 0, 0, 0, -2 / 3, 0, 2], atol=1e-6)


def test_the_fit_is_the_same_in_every_adapter_and_only_its_seed_moves_it():
    first, _ = toy(normalise="whiten", fit_steps=50)
    again, _ = toy(normalise="whiten", fit_steps=50)
    np.testing.assert_array_equal(first.standardiser.mean, again.standardiser.mean)
    np.testing.assert_array_equal(first.standardiser.matrix, again.standardiser.matrix)


def test_a_fit_set_of_one_description_is_refused():
    encoder = TableEncoder()
    adapter = LanguageAdapter(FrozenLakeEnv(desc=["SFG"], is_slippery=False),
                              describer=lambda *_: "Right.", encoder=encoder, normalise="centre")
    with pytest.raises(ValueError, match="1 distinct descriptions.*raise fit_steps"):
        adapter(np.array([0, 0], dtype=np.float32), [0, 1, 2, 3])


@pytest.mark.parametrize(("settings", "message"), [
    ({"sentence_slots": 3}, "sentence_slots applies to embedding: sentences, not to "
                            "embedding: paragraph"),
    ({"fit_steps": 10}, "fit_steps applies to normalise: centre or whiten, not to normalise: none"),
    ({"normalise": "center"}, "normalise"),
    ({"with_raw": "yes"}, "with_raw"),
])
def test_settings_that_do_not_apply_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        toy(**settings)


def test_a_representation_setting_on_the_raw_adapter_names_both():
    with pytest.raises(ValueError, match="normalise: .* does not apply to the raw adapter"):
        RawAdapter(FrozenLakeEnv(), normalise="centre")


def test_the_experiment_file_names_the_setting_and_the_raw_adapter():
    data = {"name": "t", "environment": {"id": "langadapt/FrozenLake-v0"},
            "adapters": [{"type": "raw", "settings": {"with_raw": True}}],
            "agents": [{"type": "dqn"}], "training": {"episodes": 1}}
    with pytest.raises(ConfigError, match=r"adapters\.0\.settings\.with_raw: .*raw adapter"):
        experiment_from_dict(data)


def test_frozenlakes_language_states_are_whitened_by_default_and_paragraph_is_one_setting_away():
    encoder = TableEncoder()
    assert LanguageAdapter(FrozenLakeEnv(), encoder=encoder).normalise == "whiten"
    paragraph = LanguageAdapter(FrozenLakeEnv(), encoder=encoder, normalise="none")
    assert paragraph.normalise == "none"
    plain = LanguageAdapter(FrozenLakeEnv(), describer=by_column, encoder=encoder)
    assert plain.normalise == "none"  # a describer of your own: the paragraph, as before
