"""embedding: sentence_mean (adapters.representation): exact vectors on a 3-sentence toy, the
encoder's work per distinct sentence, and descriptions that have no sentences."""

from __future__ import annotations

import numpy as np
import pytest
from test_representations import TableEncoder, toy, vectors

from langadapt.adapters import LanguageAdapter
from langadapt.environments.frozenlake import FrozenLakeEnv


def test_the_vector_is_the_mean_of_the_sentences_vectors():
    # "Left. Near." -> mean([1,0,0], [0,0,1]); "Middle. Near." -> mean([0,1,0], [0,0,1])
    adapter, encoder = toy(embedding="sentence_mean")
    assert [v.tolist() for v in vectors(adapter)] == [
        [0.5, 0, 0.5], [0, 0.5, 0.5], [1, 1, 0]]
    assert encoder.encoded == ["Left.", "Near.", "Middle.", "Right."]  # "Near." once
    space = adapter.observation_space
    assert space.shape == (3,) and space.dtype == np.float32


def test_a_view_whose_sentences_are_all_cached_costs_no_encoder_call():
    adapter, encoder = toy(embedding="sentence_mean")
    vectors(adapter)  # "Left.", "Near.", "Middle.", "Right." now cached
    texts = {0: "Near. Left. Right.", 1: "Right. Middle."}  # views never seen as a whole
    other = LanguageAdapter(adapter.env, describer=lambda s, *_: texts[int(s[1])],
                            embedding_cache=adapter.embedding_cache, embedding="sentence_mean")
    first = other(np.array([0, 0], dtype=np.float32), [0, 1, 2, 3])
    np.testing.assert_allclose(first, [2 / 3, 1 / 3, 1 / 3], rtol=1e-6)
    other(np.array([0, 1], dtype=np.float32), [0, 1, 2, 3])
    assert encoder.encoded == ["Left.", "Near.", "Middle.", "Right."]
    assert other.stats()["encoder_calls"] == 0


@pytest.mark.parametrize("embedding", ["sentence_mean", "sentences"])
def test_a_describer_without_sentences_is_one_line_naming_setting_and_describer(embedding):
    def numbers(state, legal_moves, last_action):
        return "0, 1"

    adapter = LanguageAdapter(FrozenLakeEnv(desc=["SFG"], is_slippery=False), describer=numbers,
                              encoder=TableEncoder(), embedding=embedding)
    with pytest.raises(ValueError, match=rf"^embedding: {embedding} needs descriptions made of "
                                         r"sentences .*the describer numbers gave '0, 1'$"):
        adapter(np.array([0, 0], dtype=np.float32), [0, 1, 2, 3])
