"""BabyAI levels default to one MiniLM vector per sentence in slots (issue 41: it won on
success and cost there); the paragraph is one setting away; other MiniGrid levels keep it."""

from __future__ import annotations

import gymnasium as gym
import pytest
from adapter_fixtures import CountingEncoder

from langadapt import adapters

pytest.importorskip("minigrid")


def language_adapter(level: str, **settings):
    env = gym.make(f"langadapt/{level}")
    return adapters.make("language", env, encoder=CountingEncoder(), **settings)


def test_babyai_levels_encode_sentences_in_slots_by_default():
    adapter = language_adapter("BabyAI-GoToObj-v0")
    assert adapter.embedding == "sentences"
    assert adapter.observation_space.shape == (4 * CountingEncoder().dimension,)


def test_the_paragraph_is_one_setting_away_and_other_minigrid_levels_keep_it():
    assert language_adapter("BabyAI-GoToObj-v0", embedding="paragraph").embedding == "paragraph"
    doorkey = language_adapter("MiniGrid-DoorKey-5x5-v0")
    assert doorkey.embedding == "paragraph"
    assert doorkey.observation_space.shape == (CountingEncoder().dimension,)
