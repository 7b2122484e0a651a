"""Language adapters: describers, encoder, embedding cache, adapters, wrapper, prerender."""

from __future__ import annotations

import json
import logging
import math
import re
import sqlite3
import subprocess
import sys
import textwrap
import warnings
from collections import deque
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from adapter_fixtures import CountingEncoder
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env

from langadapt import adapters
from langadapt.adapters import (
    STAT_KEYS,
    CacheError,
    EmbeddingCache,
    LanguageAdapter,
    LanguageObservation,
    RawAdapter,
    history_pairs,
    last_action,
    reachable_inputs,
)
from langadapt.environments import (
    MAZE_LAYOUTS,
    CartPoleDescriber,
    CartPoleEnv,
    Describer,
    FrozenLakeEnv,
    LanguageSpec,
    MazeDescriber,
    MazeEnv,
    SailingDescriber,
    SailingEnv,
    language_for,
    register_language,
)


def describer_for(env, **options):
    """The describer of ``env``'s language spec."""
    return language_for(env, **options).describer

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def minilm():
    """The process-wide MiniLM encoder, loaded once per test session."""
    encoder = adapters.get_encoder()
    assert encoder.dimension == 384
    return encoder


# --------------------------------------------------------------------------- describers
@pytest.mark.parametrize(
    ("state", "last", "sentence"),
    [
        (
            [0.0, 0.0],
            None,
            "The boat is in the middle of the river, heading directly into the wind.",
        ),
        (
            [-2.0, 0.3],
            1,
            "The boat is near the center of the river on the harbor side, heading into the "
            "wind with the wind on the port side. It last turned toward the center.",
        ),
        (
            [7.5, -0.6],
            0,
            "The boat is near the edge of the river on the beach side, sailing close hauled "
            "with the wind on the starboard side. It last turned toward the center.",
        ),
        (
            [7.5, -0.6],
            1,
            "The boat is near the edge of the river on the beach side, sailing close hauled "
            "with the wind on the starboard side. It last turned toward the beach.",
        ),
        (
            [-9.5, 1.5],
            0,
            "The boat is very close to the edge of the river on the harbor side, sailing "
            "across the wind with the wind on the port side. It last turned toward the harbor.",
        ),
        (
            [4.0, 1.0],
            None,
            "The boat is between the center and the edge of the river on the beach side, "
            "cutting the wind with the wind on the port side.",
        ),
    ],
)
def test_sailing_sentences(state, last, sentence):
    describer = describer_for(SailingEnv())
    assert isinstance(describer, SailingDescriber)
    assert describer(state, [0, 1], last) == sentence


def test_sailing_wind_side_matches_the_physics():
    """Positive theta moves the boat toward +x (the beach): the wind is then on port."""
    env = SailingEnv()
    env.reset(seed=0, options={"theta": 0.5})
    x0 = env.x
    env.step(1)
    assert env.x > x0
    assert "port side" in describer_for(env)([0.0, 0.6])


UMAZE_SENTENCES = {
    (1, 1): "The goal is near, two cells down and two cells to the right. There are walls "
    "left, up, up-left, down-left, up-right and down-right. You can move right or down.",
    (2, 3): "The goal is right next to you, one cell down. There are walls left, right, "
    "down-left, up-right and down-right. You can move up, down or up-left.",
    (3, 1): "The goal is near, two cells to the right. There are walls left, right, down, "
    "up-left, down-left, up-right and down-right. You can move up.",
    (3, 3): "You are at the goal. There are walls left, right, down, up-left, down-left, "
    "up-right and down-right. You can move up.",
}


@pytest.mark.parametrize("cell", sorted(UMAZE_SENTENCES))
def test_maze_sentences(cell):
    env = MazeEnv(maze="umaze")
    describer = describer_for(env)
    assert isinstance(describer, MazeDescriber)
    text = describer(env.observation_of(cell), env.legal_moves_at(cell))
    assert text == UMAZE_SENTENCES[cell]


def test_maze_far_goal_and_last_move():
    env = MazeEnv(maze="large")
    plain = describer_for(env)
    assert plain([1, 7], env.legal_moves_at((1, 7))).startswith(
        "The goal is far away, nine cells down."
    )
    with_move = describer_for(env, include_last_move=True)
    legal = env.legal_moves_at((1, 1))
    assert with_move([1, 1], legal, 2).endswith(" Your last move was up.")
    assert with_move([1, 1], legal, None).endswith(" You have not moved yet.")
    assert with_move.uses_last_action and not plain.uses_last_action
    assert MazeDescriber(env.grid, env.goal)([1, 1], []).endswith(" You cannot move.")


def _all_mazes():
    mazes = [MazeEnv(maze=name) for name in MAZE_LAYOUTS]
    mazes += [
        MazeEnv(maze="random", width=w, height=h, seed=s)
        for w, h, s in [(9, 9, 0), (12, 7, 3), (15, 15, 1)]
    ]
    return mazes


def test_every_free_cell_has_a_distinct_description_in_every_layout():
    for env in _all_mazes():
        for include_last_move in (False, True):
            describer = describer_for(env, include_last_move=include_last_move)
            cells = env.free_cells()
            texts = {describer(env.observation_of(c), env.legal_moves_at(c)) for c in cells}
            assert len(texts) == len(cells), (env.maze_name, include_last_move)


@pytest.mark.parametrize(
    ("state", "sentence"),
    [
        (
            [0.1, -0.3, 0.03, 1.8],
            "The pole leans slightly right and is falling right quickly; the cart is near "
            "the center, moving left slowly.",
        ),
        (
            [0.0, 0.0, 0.0, 0.0],
            "The pole is upright and is nearly still; the cart is near the center, standing still.",
        ),
        (
            [-1.0, 0.8, -0.1, 0.6],
            "The pole leans left and is swinging back right; the cart is left of the center, "
            "moving right.",
        ),
        (
            [2.0, -2.0, 0.15, -0.2],
            "The pole leans far right and is swinging back left slowly; the cart is near the "
            "right edge, moving left quickly.",
        ),
    ],
)
def test_cartpole_sentences(state, sentence):
    describer = describer_for(CartPoleEnv())
    assert isinstance(describer, CartPoleDescriber)
    assert describer(state) == sentence


def test_cartpole_numbers_and_configurable_bins():
    with_numbers = CartPoleDescriber(include_numbers=True, decimals=1)
    assert with_numbers([0.1, -0.3, 0.03, 1.8]).endswith(
        "moving left slowly. (cart position 0.1 m, cart velocity -0.3 m/s, pole angle 0.0 rad, "
        "pole angular velocity 1.8 rad/s)"
    )
    wide = CartPoleDescriber(bins={"angle": (0.05, 0.1, 0.2)})
    assert wide([0.0, 0.0, 0.03, 0.0]).startswith("The pole is upright")
    assert CartPoleDescriber()([0.0, 0.0, 0.03, 0.0]).startswith("The pole leans slightly right")
    with pytest.raises(ValueError, match="increasing"):
        CartPoleDescriber(bins={"angle": (0.1, 0.05, 0.2)})
    with pytest.raises(ValueError, match="angel: unknown key"):
        CartPoleDescriber(bins={"angel": (0.1, 0.2, 0.3)})


@pytest.mark.parametrize(
    ("describer", "state", "match"),
    [
        (CartPoleDescriber(), [0.0, 0.0, 0.0], r"shape \(3,\); expected shape \(4,\)"),
        (CartPoleDescriber(), [0.0, math.nan, 0.0, 0.0], "NaN or inf"),
        (CartPoleDescriber(), [0.0, math.inf, 0.0, 0.0], "NaN or inf"),
        (CartPoleDescriber(), "left", "expected numbers"),
        (CartPoleDescriber(), [object()] * 4, "not numeric"),
        (SailingDescriber(), [[0.0, 0.0]], "expected shape"),
    ],
)
def test_describers_reject_bad_states(describer, state, match):
    with pytest.raises(ValueError, match=match):
        describer(state)


def test_maze_describer_rejects_walls_fractions_and_bad_moves():
    env = MazeEnv(maze="umaze")
    describer = describer_for(env)
    with pytest.raises(ValueError, match=r"\[0, 0\] is not a free cell"):
        describer([0, 0], [])
    with pytest.raises(ValueError, match="expected integer"):
        describer([1.5, 1.0], [])
    with pytest.raises(ValueError, match=r"outside \[0, 7\]"):
        describer([1, 1], [9])
    with pytest.raises(ValueError, match="repeat"):
        describer([1, 1], [1, 1])
    with pytest.raises(ValueError, match="last_action"):
        describer_for(env, include_last_move=True)([1, 1], [1], 8)


def test_language_for_unknown_environment_names_it():
    class Mystery(gym.Env):
        observation_space = spaces.Box(0, 1, (1,))
        action_space = spaces.Discrete(2)

    with pytest.raises(ValueError, match="no language spec for environment 'Mystery'.*MazeEnv"):
        language_for(Mystery())
    with pytest.raises(ValueError, match="unknown to gymnasium"):
        language_for("langadapt/Nothing-v0")
    with pytest.raises(ValueError, match="language options"):
        language_for(MazeEnv(), colour="red")


def test_language_for_ids_and_one_registration_serves_every_reader():
    assert isinstance(describer_for("langadapt/CartPole-v0"), CartPoleDescriber)

    class Dial(gym.Env):
        observation_space = spaces.Box(0, 10, (1,), dtype=np.float32)
        action_space = spaces.Discrete(2)

    class DialDescriber(Describer):
        env_name, state_shape, n_actions = "Dial", (1,), 2

        def describe(self, state, legal_moves, last_action):
            return f"The dial shows {int(state[0])}."

    register_language(Dial, lambda env, **options: LanguageSpec(
        DialDescriber(), ("turn down", "turn up"), "Set the dial to 5.",
        lambda e: np.array([3.0], dtype=np.float32)))
    spec = language_for(Dial())
    assert spec.describe([3.0]) == "The dial shows 3." and spec.action_label(1) == "1 (turn up)"
    assert LanguageAdapter(Dial(), encoder=CountingEncoder()).describe([3.0]) == "The dial shows 3."


def test_frozenlake_language_states():
    env = FrozenLakeEnv()  # SFFF / FHFH / FFFH / HFFG
    describer = describer_for(env)
    assert describer([0, 0], [0, 1, 2, 3]) == (
        "The goal is three cells down and three cells to the right. There are the edge of "
        "the lake to the left and the edge of the lake up. You can move left, down, right or up."
    )
    assert describer([2, 2]) == ("The goal is one cell down and one cell to the right. There "
                                 "is a hole to the right.")
    assert "a hole down" in describer([0, 1]) and "a hole to the right" in describer([2, 2])
    assert describer([3, 3]).startswith("You are in the goal.")
    texts = {describer([r, c]) for r in range(4) for c in range(4)}
    assert len(texts) == 16  # every cell distinct
    spec = language_for(env)
    assert spec.action_names == ("left", "down", "right", "up")
    env.reset(seed=0)
    assert spec.state_of(env).tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="outside the 4x4 lake"):
        describer([4, 0])


# --------------------------------------------------------------------------- history
def test_history_helpers():
    assert last_action([]) is None and last_action(None) is None
    assert last_action([1, 2]) == 2
    assert last_action(deque([(np.zeros(2), 3)])) == 3
    assert last_action([(None, np.int64(5))]) == 5
    assert last_action(np.array([4, 6])) == 6
    assert history_pairs([1, ("s", 2)]) == [(None, 1), ("s", 2)]
    with pytest.raises(ValueError, match="expected an int"):
        last_action([1.5])
    with pytest.raises(ValueError, match="3 elements"):
        last_action([(1, 2, 3)])


# --------------------------------------------------------------------------- encoder
def test_encoder_shape_dtype_and_determinism(minilm):
    a = minilm.encode("The goal is near.")
    b = minilm.encode_many(["The goal is near.", "The goal is far away."])
    assert a.shape == (384,) and a.dtype == np.float32
    assert b.shape == (2, 384) and b.dtype == np.float32
    np.testing.assert_allclose(a, b[0], atol=1e-6)
    np.testing.assert_array_equal(minilm.encode("The goal is near."), a)
    assert not np.allclose(b[0], b[1])
    assert minilm.encode_many([]).shape == (0, 384)
    assert adapters.get_encoder() is minilm
    with pytest.raises(ValueError, match="expected str"):
        minilm.encode_many(["fine", 3])
    with pytest.raises(ValueError, match="one str"):
        minilm.encode_many("not a list")


def test_encoder_bad_settings():
    with pytest.raises(ValueError, match="batch_size"):
        adapters.MiniLMEncoder(batch_size=0)
    with pytest.raises(ValueError, match="could not load"):
        adapters.MiniLMEncoder("/nonexistent/model-directory-xyz").encode("x")


# --------------------------------------------------------------------------- cache
def test_cache_counters_and_lru():
    encoder = CountingEncoder()
    cache = EmbeddingCache(encoder, capacity=2)
    first = cache.get_many(["a", "b", "a"])
    assert (cache.hits, cache.misses, encoder.calls) == (1, 2, 2)
    np.testing.assert_array_equal(first[0], first[2])
    cache.get_many(["a", "b"])
    assert (cache.hits, cache.misses) == (3, 2)
    cache.get("c")  # evicts "a", the least recently used
    assert len(cache) == 2
    cache.get("b")
    assert (cache.hits, cache.misses) == (4, 3)
    cache.get("a")
    assert (cache.hits, cache.misses, encoder.calls) == (4, 4, 4)
    vector = cache.get("a")
    assert not vector.flags.writeable
    with pytest.raises(ValueError, match="expected str"):
        cache.get_many([b"bytes"])


def test_persistent_cache_round_trip(tmp_path):
    path = tmp_path / "emb.sqlite"
    writer = EmbeddingCache(CountingEncoder(), path=path)
    expected = writer.get_many(["one", "two"])
    writer.close()
    encoder = CountingEncoder()
    reader = EmbeddingCache(encoder, path=path)
    np.testing.assert_array_equal(reader.get_many(["two", "one"]), expected[::-1])
    assert encoder.calls == 0 and reader.store_hits == 2 and reader.stored_count() == 2
    other = CountingEncoder(name="another-encoder")
    EmbeddingCache(other, path=path).get("one")
    assert other.calls == 1  # the key includes the encoder's name


def test_persistent_cache_never_returns_a_wrong_vector(tmp_path, caplog):
    path = tmp_path / "emb.sqlite"
    EmbeddingCache(CountingEncoder(), path=path).get_many(["one", "two"])
    with sqlite3.connect(path) as db:
        db.execute("UPDATE entries SET value = ?", (b"\x00" * 12,))
    encoder = CountingEncoder()
    cache = EmbeddingCache(encoder, path=path)
    with caplog.at_level(logging.WARNING, logger="langadapt.llm.store"):
        vectors = cache.get_many(["one", "two"])
    assert encoder.calls == 2 and "failed their check" in caplog.text
    np.testing.assert_array_equal(vectors, CountingEncoder().encode_many(["one", "two"]))


def test_corrupt_store_is_rebuilt_or_refused(tmp_path, caplog):
    path = tmp_path / "emb.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with caplog.at_level(logging.WARNING, logger="langadapt.llm.store"):
        cache = EmbeddingCache(CountingEncoder(), path=path)
    assert "moved it to" in caplog.text
    assert list(tmp_path.glob("emb.sqlite.corrupt-*"))
    cache.get("fresh")
    assert cache.stored_count() == 1
    with pytest.raises(CacheError, match="is a directory"):
        EmbeddingCache(CountingEncoder(), path=tmp_path)


_WRITER = textwrap.dedent(
    """
    import sys
    sys.path[:0] = [{repo!r}, {repo!r} + "/tests"]
    from adapter_fixtures import CountingEncoder
    from langadapt.adapters.embedding_cache import EmbeddingCache
    cache = EmbeddingCache(CountingEncoder(), path={path!r}, capacity=1)
    for i in range(150):
        cache.get_many([f"shared {{i}}", f"{{sys.argv[1]}} {{i}}"])
    print(cache.misses)
    """
)


@pytest.mark.heavy
def test_two_processes_share_the_store(tmp_path):
    path = str(tmp_path / "emb.sqlite")
    script = _WRITER.format(repo=str(REPO), path=path)
    procs = [
        subprocess.Popen([sys.executable, "-c", script, name], stdout=subprocess.PIPE, text=True)
        for name in ("alpha", "beta")
    ]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    cache = EmbeddingCache(CountingEncoder(), path=path)
    assert cache.stored_count() == 450  # 150 shared + 150 + 150 private, no duplicates


# --------------------------------------------------------------------------- adapters
def test_make_and_registry():
    assert {"raw", "language"} <= set(adapters.available_adapters())
    with pytest.raises(ValueError, match=r"unknown adapter 'words'; expected one of \[.*'raw'"):
        adapters.make("words", MazeEnv())
    assert isinstance(adapters.make("raw", "langadapt/Maze-v0"), RawAdapter)
    with pytest.raises(ValueError, match="RawAdapter takes only memory, got \\['cache_path'\\]"):
        adapters.make("raw", MazeEnv(), cache_path="x")


def test_raw_adapter():
    env = CartPoleEnv()
    raw = adapters.make("raw", env)
    state = np.array([0.1, -0.2, 0.03, 0.4], dtype=np.float64)
    vector = raw(state)
    assert vector.dtype == np.float32 and vector.shape == (4,)
    np.testing.assert_allclose(vector, state, rtol=1e-6)
    assert raw(state, encode=False) == "Observation: 0.1, -0.2, 0.03, 0.4."
    assert raw.observation_space.shape == (4,) and raw.observation_space.dtype == np.float32
    assert set(STAT_KEYS) <= set(raw.stats()) and not any(raw.stats().values())
    with pytest.raises(ValueError, match="NaN or inf"):
        raw([0.0, math.nan, 0.0, 0.0])
    with pytest.raises(ValueError, match="expected shape"):
        raw([0.0, 0.0])


@pytest.fixture(scope="module")
def maze_adapter(minilm):
    return adapters.make("language", MazeEnv(maze="umaze"), encoder=minilm)


def test_language_adapter_call_shape(maze_adapter, minilm):
    env = MazeEnv(maze="umaze")
    obs, info = env.reset(seed=0)
    text = maze_adapter(obs, info["legal_moves"], (), encode=False)
    assert text == UMAZE_SENTENCES[(3, 1)]
    vector = maze_adapter(obs, info["legal_moves"])
    assert vector.shape == (384,) and vector.dtype == np.float32
    assert not vector.flags.writeable
    np.testing.assert_allclose(vector, minilm.encode(text), atol=1e-5)
    assert maze_adapter.observation_space == spaces.Box(-1.0, 1.0, (384,), np.float32)
    # The same state as a list or float64 array gives the very same vector.
    assert maze_adapter([3, 1], [2]) is vector
    assert maze_adapter(np.array([3.0, 1.0]), (2,)) is vector
    assert maze_adapter.describe([3, 1], [2]) == text
    assert maze_adapter.describe_many([([3, 1], [2], ()), ([3, 3], [2], ())]) == [
        text,
        UMAZE_SENTENCES[(3, 3)],
    ]
    assert set(STAT_KEYS) <= set(maze_adapter.stats())


def test_language_adapter_memo_and_counters(minilm):
    env = MazeEnv(maze="umaze")
    adapter = LanguageAdapter(env, encoder=minilm)
    obs = env.observation_of((1, 2))
    legal = env.legal_moves_at((1, 2))
    adapter(obs, legal)
    stats = adapter.stats()
    assert (stats["encoder_calls"], stats["embedding_cache_misses"], stats["memo_misses"]) == (
        1,
        1,
        1,
    )
    for _ in range(3):
        adapter(obs, list(legal))
    stats = adapter.stats()
    assert (stats["encoder_calls"], stats["memo_misses"], stats["memo_size"]) == (1, 1, 1)
    # Another state with the same legal moves but a different sentence is a new entry.
    other = LanguageAdapter(env, encoder=minilm, embedding_cache=adapter.embedding_cache)
    other(obs, legal)
    assert other.stats()["embedding_cache_hits"] == 1 and other.stats()["encoder_calls"] == 0


def test_adapt_many_equals_adapt_and_encodes_a_cold_batch_at_once():
    env = MazeEnv(maze="umaze")
    cells = [(1, 1), (1, 2), (1, 3), (1, 2), (1, 1)]  # two repeats inside the batch
    inputs = [(env.observation_of(c), env.legal_moves_at(c), ()) for c in cells]
    one_by_one = LanguageAdapter(env, encoder=CountingEncoder())
    expected = [one_by_one.adapt(*item) for item in inputs]
    encoder = CountingEncoder()
    batches = []
    encode_many = encoder.encode_many
    encoder.encode_many = lambda texts: batches.append(len(texts)) or encode_many(texts)
    adapter = LanguageAdapter(env, encoder=encoder)
    adapter.adapt(*inputs[0])  # one warm input in the batch
    batches.clear()
    pairs = adapter.adapt_many(inputs)
    assert batches == [2]  # the two cold texts, one encoder call
    assert [text for _, text in pairs] == [text for _, text in expected]
    for (vector, _), (want, _) in zip(pairs, expected, strict=True):
        np.testing.assert_array_equal(vector, want)
    assert pairs[1][0] is pairs[3][0] and adapter.stats()["memo_misses"] == 3
    assert adapter.adapt_many(inputs[:2]) == pairs[:2] and batches == [2]  # now all warm
    raw = RawAdapter(env)
    assert [text for _, text in raw.adapt_many(inputs)] == [raw.adapt(*i)[1] for i in inputs]
    with pytest.raises(ValueError, match="iterable"):
        adapter.adapt_many("text")


def test_language_adapter_rejects_bad_input_even_when_warm(maze_adapter):
    maze_adapter([1, 1], [1, 3])
    with pytest.raises(ValueError, match="expected shape"):
        maze_adapter(np.array([[1.0, 1.0]], dtype=np.float32), [1, 3])
    with pytest.raises(ValueError, match="NaN or inf"):
        maze_adapter(np.array([1.0, math.nan], dtype=np.float32), [1, 3])
    with pytest.raises(ValueError, match="not numeric"):
        maze_adapter(["a", "b"], [1, 3])
    with pytest.raises(ValueError, match="not an int action"):
        maze_adapter([1, 1], [1.0, 3])
    maze_adapter(np.array([1.0, 2.0], dtype=np.float32), [0])
    with pytest.raises(ValueError, match="not a sequence of actions"):
        maze_adapter(np.array([1.0, 2.0], dtype=np.float32), 1)  # bytes(1) == bytes([0])
    with pytest.raises(ValueError, match="expected a Describer"):
        LanguageAdapter(MazeEnv(), describer="words")
    with pytest.raises(ValueError, match="extra"):
        adapters.make("language", MazeEnv(), cache_size=3)


def test_history_reaches_describers_that_use_it(minilm):
    adapter = adapters.make("language", SailingEnv(), encoder=minilm)
    state = np.array([-2.0, 0.3], dtype=np.float32)
    turned_beach = adapter(state, [0, 1], [(None, 1)], encode=False)
    turned_harbor = adapter(state, [0, 1], [0, 0], encode=False)
    assert turned_beach.endswith("toward the center.")
    assert turned_harbor.endswith("toward the harbor.")
    assert adapter(state, [0, 1], [1]) is not adapter(state, [0, 1], [0])


# --------------------------------------------------------------------------- wrapper
def test_wrapper_passes_check_env_and_fills_info(maze_adapter):
    env = LanguageObservation(gym.make("langadapt/Maze-v0", maze="umaze"), maze_adapter)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    # The only warning is the one every wrapper gets ("different from the unwrapped").
    assert [str(w.message) for w in caught if "unwrapped" not in str(w.message)] == []
    obs, info = env.reset(seed=0)
    assert (
        obs.shape == (384,)
        and obs.flags.writeable
        and info["description"] == UMAZE_SENTENCES[(3, 1)]
    )
    assert env.observation_space is maze_adapter.observation_space
    obs2, _, _, _, info2 = env.step(2)
    assert info2["description"] == maze_adapter([2, 1], info2["legal_moves"], encode=False)
    assert len(env.history) == 1
    previous, action = env.history[0]
    np.testing.assert_array_equal(previous, [3.0, 1.0])
    assert action == 2
    env.step(np.int64(3))
    assert env.history[-1][1] == 3 and type(env.history[-1][1]) is int
    env.reset()
    assert len(env.history) == 0


def test_wrapper_history_length_and_missing_legal_moves(minilm):
    short = LanguageObservation(
        SailingEnv(), adapters.make("language", SailingEnv(), encoder=minilm), history_length=2
    )
    short.reset(seed=0)
    for action in (1, 1, 0):
        short.step(action)
    assert [a for _, a in short.history] == [1, 0]

    class NoInfo(gym.Wrapper):
        def reset(self, **kwargs):
            obs, _ = self.env.reset(**kwargs)
            return obs, {}

        def step(self, action):
            obs, r, te, tr, _ = self.env.step(action)
            return obs, r, te, tr, {}

    wrapped = LanguageObservation(
        NoInfo(MazeEnv(maze="umaze")),
        adapters.make("language", MazeEnv(maze="umaze"), encoder=minilm),
    )
    _, info = wrapped.reset(seed=0)
    assert info["description"].endswith(
        "You can move left, right, up, down, up-left, down-left, up-right or down-right."
    )
    with pytest.raises(ValueError, match="history_length"):
        LanguageObservation(MazeEnv(), wrapped.adapter, history_length=-1)
    with pytest.raises(ValueError, match="no adapt"):
        LanguageObservation(MazeEnv(), object())


def test_raw_adapter_in_the_wrapper():
    env = LanguageObservation(MazeEnv(maze="umaze"), adapters.make("raw", MazeEnv(maze="umaze")))
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=0)
    np.testing.assert_array_equal(obs, [3.0, 1.0])
    assert info["description"] == "Observation: 3, 1."


# --------------------------------------------------------------------------- prerender
def test_reachable_inputs_and_prerender_make_training_encoder_free(minilm):
    env = MazeEnv(maze="medium", max_steps=50)
    inputs = reachable_inputs(env)
    assert len(inputs) == len(env.free_cells())  # every free cell of "medium" is reachable
    assert len(reachable_inputs(env, with_last_action=True)) == 9 * len(inputs)
    adapter = adapters.make("language", env, encoder=minilm)
    assert adapter.prerender(inputs, progress=False)["distinct_texts"] == len(inputs)
    before = adapter.stats()["encoder_calls"]
    wrapped = LanguageObservation(env, adapter)
    rng = np.random.default_rng(0)
    wrapped.reset(seed=0)
    for _ in range(300):
        _, _, terminated, truncated, _ = wrapped.step(int(rng.integers(8)))
        if terminated or truncated:
            wrapped.reset()
    stats = adapter.stats()
    assert stats["encoder_calls"] == before and stats["memo_misses"] == 0
    with pytest.raises(ValueError, match="discrete grid environment"):
        reachable_inputs(SailingEnv())
    assert adapters.make("raw", env).prerender(inputs)["distinct_texts"] == 0


@pytest.mark.heavy
def test_second_process_reads_the_persistent_cache_without_encoding(tmp_path, minilm):
    path = tmp_path / "emb.sqlite"
    env = MazeEnv(maze="umaze")
    first = adapters.make("language", env, encoder=minilm, embedding_cache_path=str(path))
    first.prerender(reachable_inputs(env), progress=False)
    assert first.stats()["encoder_calls"] == 7
    expected = first([3, 1], [2])
    np.save(tmp_path / "expected.npy", expected)
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        import numpy as np
        from langadapt import adapters, environments
        env = environments.MazeEnv(maze="umaze")
        adapter = adapters.make("language", env, embedding_cache_path={str(path)!r})
        adapter.prerender(adapters.reachable_inputs(env), progress=False)
        wrapped = adapters.LanguageObservation(env, adapter)
        obs, _ = wrapped.reset(seed=0)
        for action in (2, 2, 1, 1, 3, 3):
            wrapped.step(action)
        assert np.array_equal(obs, np.load({str(tmp_path / "expected.npy")!r}))
        print(adapter.stats()["encoder_calls"], adapter.embedding_cache.encoder.calls,
              adapter.embedding_cache.store_hits)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0", "0", "7"]


# --------------------------------------------------------------------------- SB3
def _sb3_dqn_learns(minilm, steps: int, maze: str) -> None:
    dqn = pytest.importorskip("stable_baselines3").DQN
    env = MazeEnv(maze=maze, max_steps=60)
    adapter = adapters.make("language", env, encoder=minilm)
    adapter.prerender(reachable_inputs(env), progress=False)
    wrapped = LanguageObservation(env, adapter)
    model = dqn(
        "MlpPolicy",
        wrapped,
        learning_starts=100,
        buffer_size=5_000,
        train_freq=4,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [64]},
    )
    model.learn(total_timesteps=steps)
    assert model.num_timesteps >= steps
    action, _ = model.predict(wrapped.reset(seed=0)[0], deterministic=True)
    assert 0 <= int(action) < 8
    assert adapter.stats()["memo_misses"] == 0


def test_sb3_dqn_smoke(minilm):
    _sb3_dqn_learns(minilm, steps=300, maze="umaze")


@pytest.mark.slow
def test_sb3_dqn_learns_a_few_thousand_steps(minilm):
    _sb3_dqn_learns(minilm, steps=4_000, maze="medium")


# --------------------------------------------------------------------------- warm state index
class _SwitchingMoves(gym.Wrapper):
    """Maze whose info["legal_moves"] alternates between the true list and ``[0]`` (and
    whose observations can be reshaped), to test the state-bytes index of the memo."""

    def __init__(self, env, reshape=None):
        super().__init__(env)
        self.count = 0
        self.reshape = reshape

    def step(self, action):
        obs, r, te, tr, info = self.env.step(action)
        self.count += 1
        if self.count % 2:
            info["legal_moves"] = [0]
        if self.reshape is not None:
            obs = obs.reshape(self.reshape)
        return obs, r, te, tr, info


def test_state_index_never_returns_a_stale_description():
    env = MazeEnv(maze="umaze")
    adapter = LanguageAdapter(env, encoder=CountingEncoder())
    obs = env.observation_of((1, 2))
    full = env.legal_moves_at((1, 2))
    for _ in range(2):  # alternate: the index holds one entry per state, the memo both
        a = adapter(obs, full, encode=False)
        b = adapter(obs, [0], encode=False)
        assert a != b and a == adapter.describe(obs, full) and b == adapter.describe(obs, [0])
        assert adapter(obs, tuple(full), encode=False) == a  # a tuple takes the full key
        assert adapter(obs, np.array(full), encode=False) == a
        assert adapter.adapt(obs, full)[1] == a and adapter.adapt(obs, [0])[1] == b
    assert adapter.stats()["memo_size"] == 2 and adapter.stats()["memo_misses"] == 2
    assert list(adapter.memo.by_state) == [obs.tobytes()]


def test_wrapper_warm_step_checks_legal_moves_and_gives_fresh_arrays():
    adapter = LanguageAdapter(MazeEnv(maze="umaze"), encoder=CountingEncoder())
    adapter.prerender(reachable_inputs(MazeEnv(maze="umaze")), progress=False)
    env = LanguageObservation(_SwitchingMoves(MazeEnv(maze="umaze")), adapter)
    obs, _ = env.reset(seed=0)
    seen = [obs]
    for action in [1, 1, 2, 2, 0, 0, 3, 3] * 3:
        obs, _, terminated, truncated, info = env.step(action)
        raw = env.unwrapped.observation_of(env.unwrapped.cell)
        assert info["description"] == adapter.describe(raw, info["legal_moves"])
        np.testing.assert_array_equal(obs, adapter(raw, info["legal_moves"]))
        assert obs.flags.writeable and not any(np.shares_memory(obs, o) for o in seen)
        seen.append(obs)
        if terminated or truncated:
            env.reset()
    assert [a for _, a in env.history][-2:] == [3, 3]
    # A warm state of the wrong shape still errors (the slow path checks it).
    bad = LanguageObservation(_SwitchingMoves(MazeEnv(maze="umaze"), reshape=(1, 2)), adapter)
    bad.reset(seed=0)
    with pytest.raises(ValueError, match="expected shape"):
        bad.step(1)


def test_state_index_follows_memo_eviction_and_clear():
    env = MazeEnv(maze="umaze")
    adapter = LanguageAdapter(env, encoder=CountingEncoder(), memo_capacity=2)
    cells = env.free_cells()[:4]
    for cell in cells:
        adapter(env.observation_of(cell), env.legal_moves_at(cell))
        keys = {adapter.memo._split(k)[0] for k in adapter.memo.entries}
        assert set(adapter.memo.by_state) <= keys and len(adapter.memo.by_state) <= 2
    assert set(adapter.memo.by_state) == {env.observation_of(c).tobytes() for c in cells[2:]}
    adapter.clear_memo()
    assert adapter.memo.by_state == {} and adapter.stats()["memo_size"] == 0
    # Text that depends on the history: no state index, the full key every time.
    history_dependent = LanguageAdapter(
        env, encoder=CountingEncoder(), describer_options={"include_last_move": True}
    )
    assert history_dependent.memo.history_key is not None
    wrapped = LanguageObservation(MazeEnv(maze="umaze"), history_dependent)
    wrapped.reset(seed=0)
    _, _, _, _, info = wrapped.step(2)
    cell = wrapped.unwrapped.observation_of(wrapped.unwrapped.cell)
    assert info["description"] == history_dependent.describe(cell, info["legal_moves"], [2])
    assert info["description"] != history_dependent.describe(cell, info["legal_moves"], [3])


def test_plain_function_describer_is_accepted():
    env = MazeEnv(maze="umaze")

    def describe(state, legal_moves, last):
        assert last is None
        return f"cell {int(state[0])} {int(state[1])} moves {list(legal_moves)}"

    adapter = LanguageAdapter(env, describer=describe, encoder=CountingEncoder())
    assert adapter.uses_history is False
    obs = env.observation_of((1, 2))
    text = adapter(obs, [0, 1], [(obs, 1)], encode=False)
    assert text == describe(obs, (0, 1), None)


def test_bytes_legal_moves_are_rejected_even_when_warm():
    env = MazeEnv(maze="umaze")
    adapter = LanguageAdapter(env, encoder=CountingEncoder())
    obs = env.observation_of((1, 2))
    adapter(obs, [0, 1])
    adapter(obs, (0, 1))  # warm under both the state index and the full key
    for call in (adapter, adapter.adapt):
        with pytest.raises(ValueError, match="not a sequence of actions"):
            call(obs, b"\x00\x01")
    with pytest.raises(ValueError, match="not a sequence of actions"):
        adapter(obs, b"\x00\x01", encode=False)


def test_encode_many_rejects_a_single_string():
    encoder = CountingEncoder()
    cache = EmbeddingCache(encoder)
    with pytest.raises(ValueError, match="'abc' is a single str"):
        cache.lookup_many("abc")
    adapter = LanguageAdapter(MazeEnv(maze="umaze"), embedding_cache=cache)
    with pytest.raises(ValueError, match="'abc' is a single str"):
        adapter.encode_many("abc")
    assert encoder.calls == 0
    assert adapter.encode_many(["abc"]).shape == (1, encoder.dimension)


def test_public_entry_points_reject_wrong_types_with_value_errors():
    env = MazeEnv(maze="umaze")
    adapter = LanguageAdapter(env, encoder=CountingEncoder())
    for bad in (5, "abc"):
        with pytest.raises(ValueError, match=f"inputs={bad!r}: expected an iterable"):
            adapter.prerender(bad, progress=False)
    for bad in (5, {1: 2}, {3}, "ab", b"\x01"):
        for helper in (last_action, history_pairs):
            with pytest.raises(ValueError, match=re.escape(f"history {bad!r} (type")):
                helper(bad)
        with pytest.raises(ValueError, match="not an ordered sequence"):
            LanguageAdapter(
                env, encoder=CountingEncoder(), describer_options={"include_last_move": True}
            )(env.observation_of((1, 2)), [0], bad)
    assert last_action(deque([(None, 3)])) == 3 and history_pairs(iter([1])) == [(None, 1)]
    with pytest.raises(ValueError, match=r"bins=5: expected a CartPoleBins or a dict"):
        CartPoleDescriber(bins=5)
    with pytest.raises(ValueError, match=r"bins=\[1, 2\]: expected a SailingBins or a dict"):
        SailingDescriber(bins=[1, 2])
    for goal in (5, "ab", (1,)):
        expected = re.escape(f"goal={goal!r}: expected a (row, col) pair")
        with pytest.raises(ValueError, match=expected):
            MazeDescriber(env.grid, goal=goal)
    assert MazeDescriber(env.grid, goal=np.array(env.goal)).goal == tuple(env.goal)


# --------------------------------------------------------------------------- FrozenLake
def test_frozenlake_through_the_language_and_llm_adapters(tmp_path):
    """FrozenLake's language spec serves the language adapter (rule sentences) and the LLM
    adapter (its prompt holds the describer's sentence and the action names)."""
    from fake_ollama import FakeOllama

    lake = FrozenLakeEnv(is_slippery=False)
    language = LanguageObservation(FrozenLakeEnv(is_slippery=False),
                                   LanguageAdapter(lake, encoder=CountingEncoder()))
    obs, info = language.reset(seed=0)
    assert obs.shape == (8,) and info["description"].startswith("The goal is three cells down")
    _, _, _, _, info = language.step(1)  # down: next to the hole at (1, 1)
    assert "a hole to the right" in info["description"]
    with FakeOllama(default_answer="You stand on the ice at the top left.") as fake:
        llm = adapters.make("llm", lake, backend="ollama", host=fake.host, model="llama3.2",
                            cache_path=None, encoder=CountingEncoder())
        env = LanguageObservation(FrozenLakeEnv(is_slippery=False), llm)
        obs, info = env.reset(seed=0)
        assert info["description"] == "You stand on the ice at the top left."
        prompt = json.dumps(fake.chat_bodies[-1]["messages"])
        assert "The goal is three cells down and three cells to the right" in prompt
        assert "1 (down)" in prompt and "3 (up)" in prompt


# ------------------------------------------------ the cold step: each input checked once
def _cold_step(env_id: str, monkeypatch) -> tuple[dict[str, int], set[str], str]:
    """One cold wrapper step of the language adapter on ``env_id``: how often each check
    ran, the langadapt files the step crossed, and the description."""
    import os

    from langadapt.adapters import base as adapter_base
    from langadapt.environments import language

    counts: dict[str, int] = {}

    def spy(owner, name):
        real = getattr(owner, name)

        def counted(*args, **kwargs):
            counts[name] = counts.get(name, 0) + 1
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)

    env = gym.make(env_id)
    adapter = LanguageAdapter(env, encoder=CountingEncoder())
    wrapper = LanguageObservation(env, adapter)
    _, info = wrapper.reset(seed=0)
    before = info["description"]
    spy(adapter_base, "check_state")          # the state: type, shape, finite
    spy(adapter_base, "check_legal_moves")    # the legal moves
    spy(language.Describer, "check_bounds")  # the state: the describer's bounds
    spy(language.Describer, "check_last_action")
    spy(language, "check_state")              # the describer's own boundary: not on the path
    spy(language.Describer, "__call__")
    root = Path(adapter_base.__file__).resolve().parents[1]
    files: set[str] = set()

    def profile(frame, event, arg):
        if event == "call":
            name = frame.f_code.co_filename
            path = Path(os.path.realpath(name))
            if (not name.startswith("<") and path.is_relative_to(root)
                    and not {".venv", "tests"} & set(path.relative_to(root).parts)):
                files.add(path.relative_to(root).as_posix())

    for move in info["legal_moves"]:
        sys.setprofile(profile)
        try:
            _, _, _, _, info = wrapper.step(move)
        finally:
            sys.setprofile(None)
        if info["description"] != before:
            return counts, files, info["description"]
        files.clear()
        counts.clear()
    raise AssertionError("no move gave a new state")


def test_a_cold_step_checks_each_input_once_on_a_describer_with_bounds_and_last_action(
        monkeypatch):
    counts, files, text = _cold_step("langadapt/Sailing-v0", monkeypatch)
    assert "last turned" in text  # the last action was described
    assert counts == {"check_state": 1, "check_legal_moves": 1, "check_bounds": 1,
                      "check_last_action": 1}


def test_a_cold_maze_step_crosses_the_files_of_docs_development(monkeypatch):
    counts, files, _ = _cold_step("langadapt/Maze-v0", monkeypatch)
    assert counts == {"check_state": 1, "check_legal_moves": 1, "check_bounds": 1}
    assert files == {"environments/maze.py", "adapters/wrapper.py", "adapters/base.py",
                     "adapters/language.py", "environments/language.py",
                     "adapters/embedding_cache.py", "llm/store.py"}
