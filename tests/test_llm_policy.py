"""LLM policy: prompts from the language spec, the action parser, structured and text
decoding, counters."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import langadapt.environments  # noqa: F401
from langadapt.agents import evaluate, make_agent
from langadapt.environments import language_for
from langadapt.llm import LLMBackend, StructuredOutputError
from langadapt.roles.llm_policy import LLMPolicy, trained_prompt_style
from langadapt.roles.prompts import ActionParseError, DiscreteActionParser, format_state

sys.path.insert(0, str(Path(__file__).parent))
from fake_ollama import FakeOllama  # noqa: E402


class ScriptedBackend(LLMBackend):
    """An LLM backend whose model is a Python function of the request (real cache and
    counters of the LLM layer; memory-only cache unless ``cache_path`` is given)."""

    name: ClassVar[str] = "scripted"
    script: Any = None
    cache_path: Path | None = None

    def generate(self, messages: list[dict[str, str]], schema: dict | None, n: int) -> str:
        self.asked.append(json.dumps(messages))
        return self.script(messages, schema)

    @property
    def asked(self) -> list[str]:
        return self.runtime.once("asked", list)

    def resolve_identity(self) -> str:
        return "scripted-model"


def first_legal(messages: list[dict[str, str]], schema: dict | None) -> str:
    """Picks the first legal action listed in the last user message."""
    legal = re.search(r"Legal actions: (\d+)", messages[-1]["content"]).group(1)
    return json.dumps({"action": int(legal)}) if schema else f"Action: {legal}"


def maze(name: str = "umaze", **params: Any) -> gym.Env:
    return gym.make("langadapt/Maze-v0", maze=name, **params)


def policy_for(env: gym.Env, backend: Any, **config: Any) -> LLMPolicy:
    policy = LLMPolicy(env.observation_space, env.action_space, config, backend=backend)
    policy.bind(env)
    return policy


# --------------------------------------------------------------------------- parser
@pytest.mark.parametrize(
    ("text", "action"),
    [
        ("Action: 3", 3),
        ("   action :   5  ", 5),
        ("I will go down.\nACTION: 3\n", 3),
        ("Action: 2\nOn second thought:\nAction: 5.", 5),
        ("**Action:** 7", 7),
        ("Reasoning first.\n\nAction: 2 (up)", 2),
    ],
)
def test_parser_reads_the_last_action_line(text: str, action: int) -> None:
    assert DiscreteActionParser(n_actions=8).parse(text, [2, 3, 5, 7]) == action


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("Action: 9", "outside [0, 8)"),
        ("Action: -1", "outside [0, 8)"),
        ("Action: 4", "not legal here"),
        ("I would move down.", "no line 'Action: N'"),
        ("The action is 3", "no line 'Action: N'"),
        ("Action: 3.5", "no line 'Action: N'"),
        ("", "no line 'Action: N'"),
    ],
)
def test_parser_says_why_a_reply_holds_no_legal_action(text: str, reason: str) -> None:
    with pytest.raises(ActionParseError, match=re.escape(reason)):
        DiscreteActionParser(n_actions=8).parse(text, [2, 3, 5, 7])


def test_parser_schema_and_json_replies() -> None:
    parser = DiscreteActionParser(n_actions=8)
    schema = parser.schema([1, 6])
    assert schema["properties"]["action"]["enum"] == [1, 6]
    assert parser.parse_json('{"action": 6}', [1, 6]) == 6
    for bad in ('{"action": 2}', '{"act": 1}', "Action: 1", '{"action": true}'):
        with pytest.raises(ActionParseError):
            parser.parse_json(bad, [1, 6])
    assert "Action: N" in parser.action_format([1, 6]) and "1, 6" in parser.action_format([1, 6])


# --------------------------------------------------------------------------- prompts
def test_cartpole_prompt_shows_the_four_numbers_and_the_actions() -> None:
    env = gym.make("langadapt/CartPole-v0")
    spec = language_for(env)
    text = format_state(spec, [0.1, -0.25, 0.031, 0.5], [0, 1])
    for part in ("Cart position: 0.10 m", "Cart velocity: -0.25 m/s", "Pole angle: 0.03 rad",
                 "Pole angular velocity: 0.50 rad/s", "0 (push left)", "1 (push right)"):
        assert part in text
    assert "Action 0 pushes the cart to the left" in spec.task


def test_maze_sailing_and_frozenlake_prompts_use_the_describers() -> None:
    env = maze("medium")
    text = format_state(language_for(env), [1, 1], env.unwrapped.legal_moves_at((1, 1)),
                        [([1, 2], 0)])
    assert text.startswith(
        "The goal is a fair way off, five cells down and five cells to the right.")
    assert "Your previous actions, oldest first: left." in text
    sailing = format_state(language_for("langadapt/Sailing-v0"), [0.0, 0.0], [0, 1])
    assert "heading directly into the wind" in sailing
    lake = format_state(language_for("langadapt/FrozenLake-v0"), [0, 1], [0, 1, 2, 3])
    assert "a hole down" in lake and "3 (up)" in lake


def test_prompt_rejects_bad_states_and_moves() -> None:
    spec = language_for(maze())
    with pytest.raises(ValueError, match=r"expected shape \(2,\)"):
        format_state(spec, [1.0, 2.0, 3.0], [0])
    with pytest.raises(ValueError, match="expected distinct actions in"):
        format_state(spec, [3, 1], [9])


def test_llm_policy_on_an_environment_without_language_spec_is_an_error() -> None:
    class Unknown(gym.Env):
        observation_space = spaces.Box(0, 1, (2,))
        action_space = spaces.Discrete(2)

    env = Unknown()
    policy = LLMPolicy(env.observation_space, env.action_space, backend=ScriptedBackend(
        script=first_legal))
    with pytest.raises(ValueError, match="no language spec for environment 'Unknown'"):
        policy.bind(env)
    with pytest.raises(ValueError, match="has no language spec"):
        policy.act([0.5, 0.5], [0, 1])


def test_llm_policy_needs_raw_observations() -> None:
    env = maze()
    policy = LLMPolicy(spaces.Box(0, 1, (384,)), env.action_space,
                       backend=ScriptedBackend(script=first_legal))
    with pytest.raises(ValueError, match=r"raw states of shape \(2,\).*shape \(384,\)"):
        policy.bind(env)


def test_a_schema_the_backend_cannot_honour_fails_before_acting() -> None:
    class NoSchemas(ScriptedBackend):
        def check_schema_support(self, schema: dict) -> None:
            raise StructuredOutputError("this model cannot follow an enum")

    env = maze()
    with pytest.raises(ValueError, match="needs the action schema .*cannot honour"):
        policy_for(env, NoSchemas(script=first_legal))
    policy_for(env, NoSchemas(script=first_legal), decoding="text")  # text mode needs none


def test_bad_settings_name_the_value() -> None:
    env = maze()
    with pytest.raises(ValueError, match="decoding"):
        make_agent("llm_policy", env.observation_space, env.action_space, decoding="json")
    with pytest.raises(ValueError, match="few_shot"):
        make_agent("llm_policy", env.observation_space, env.action_space, few_shot=-1)


# --------------------------------------------------------------------------- decoding
def test_structured_decoding_counts_and_caches() -> None:
    env = maze("medium")
    backend = ScriptedBackend(script=first_legal)
    policy = policy_for(env, backend)
    evaluate(policy, env, episodes=2, seed=0)
    stats = policy.stats()
    distinct = len(set(backend.asked))
    assert stats["llm_calls"] == distinct == len(backend.asked)
    asked = stats["llm_calls"] + stats["llm_cache_hits"]
    assert asked <= stats["decisions"]  # single-move states need no call
    assert asked > distinct  # the second episode repeats the first: cache hits
    assert stats["parse_failures"] == stats["corrections"] == stats["llm_fallbacks"] == 0


def test_text_mode_corrects_then_falls_back_and_counts() -> None:
    env = maze("medium")
    replies = iter(["I go right.", "Action: 1",  # recovered by the correction
                    "no idea", "still no idea"])  # falls back

    def script(messages: list[dict[str, str]], schema: dict | None) -> str:
        return next(replies, "Action: 99")

    policy = policy_for(env, ScriptedBackend(script=script), decoding="text")
    legal = [1, 3, 7]
    assert policy.act(np.array([1, 1], np.float32), legal) == 1
    action = policy.act(np.array([1, 2], np.float32), legal)
    assert action in legal
    stats = policy.stats()
    assert stats["corrections"] == 2 and stats["llm_fallbacks"] == 1
    assert stats["parse_failures"] == 3
    assert stats["llm_calls"] == 4 == stats["decisions"] + stats["corrections"]
    # out-of-range replies mid-episode: never an exception, each one counted; the model is
    # asked once per prompt (the reply and the correction's reply come from the cache)
    for _ in range(3):
        assert policy.act(np.array([3, 2], np.float32), [2, 3]) in (2, 3)
    stats = policy.stats()
    assert stats["llm_fallbacks"] == 4 and stats["corrections"] == 5
    assert stats["llm_calls"] == 6 and stats["llm_cache_hits"] == 4


def test_fake_ollama_receives_the_schema_in_format() -> None:
    env = maze("medium")
    with FakeOllama(models=["llama3.2"]) as fake:
        spec = {"backend": "ollama", "host": fake.host, "model": "llama3.2", "cache_path": None}
        policy = make_agent("llm_policy", env.observation_space, env.action_space, backend=spec)
        policy.bind(env)
        legal = env.unwrapped.legal_moves_at((1, 1))
        action = policy.act(np.array([1, 1], np.float32), legal)
        body = fake.chat_bodies[-1]
    assert body["format"] == DiscreteActionParser(n_actions=8).schema(legal)
    assert action == legal[0]  # the fake answers the smallest value that fits: enum[0]
    assert body["options"]["temperature"] == 0 and body["options"]["seed"] == 0
    assert body["options"]["num_ctx"] == 2048


def test_few_shot_puts_the_best_episode_into_the_prompt(tmp_path: Path) -> None:
    env = maze("umaze")
    backend = ScriptedBackend(script=first_legal)
    policy = policy_for(env, backend, few_shot=2)
    assert policy.learns
    obs = np.array([3, 1], np.float32)
    policy.act(obs, [2])
    policy.learn(obs, 2, 0.0, np.array([2, 1], np.float32), False, False, [2, 3])
    policy.act(np.array([2, 1], np.float32), [2, 3])
    policy.learn(np.array([2, 1], np.float32), 2, 1.0, np.array([1, 1], np.float32), True,
                 False, [1, 3])
    assert policy.best_return == 1.0 and len(policy.best_episode) == 2
    policy.act(np.array([1, 2], np.float32), [0, 1])
    messages = json.loads(backend.asked[-1])
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user",
                                             "assistant", "user"]
    assert messages[2]["content"] == '{"action": 2}'
    path = tmp_path / "policy.pt"
    policy.save(path)
    again = policy_for(env, backend, few_shot=2)
    again.load(path)
    assert again.best_return == 1.0 and len(again.best_episode) == 2


# --------------------------------------------------------------------------- llama.cpp
@pytest.fixture(scope="module")
def smollm() -> Any:
    from langadapt.llm import make_backend

    return make_backend({"backend": "llamacpp", "cache_path": None})


@pytest.mark.slow  # SmolLM2 replies: ~1 s each on an idle machine, 10x that on a busy one
@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    cell=st.sampled_from(maze("large").unwrapped.free_cells()),
    moves=st.lists(st.integers(0, 7), min_size=2, max_size=8, unique=True),
)
def test_structured_decoding_on_llamacpp_is_always_legal(smollm: Any, cell: Any,
                                                         moves: list[int]) -> None:
    env = maze("large")
    policy = policy_for(env, smollm)
    action = policy.act(np.array(cell, np.float32), sorted(moves))
    assert action in moves
    assert policy.stats()["llm_fallbacks"] == 0


@pytest.mark.slow
def test_llamacpp_is_deterministic_and_a_rerun_makes_no_call(tmp_path: Path) -> None:
    from langadapt.llm import make_backend

    env = maze("medium")
    cells = env.unwrapped.free_cells()[:4]
    runs = []
    for _ in range(2):  # two processes' worth: fresh backends on one persistent cache
        backend = make_backend({"backend": "llamacpp", "cache_path": tmp_path / "a.sqlite"})
        policy = policy_for(env, backend)
        runs.append([policy.act(np.array(c, np.float32), env.unwrapped.legal_moves_at(c))
                     for c in cells])
        runs.append(policy.stats()["llm_calls"])
    assert runs[0] == runs[2]
    assert runs[1] > 0 and runs[3] == 0
    fresh = make_backend({"backend": "llamacpp", "cache_path": None})
    policy = policy_for(env, fresh)
    assert [policy.act(np.array(c, np.float32), env.unwrapped.legal_moves_at(c))
            for c in cells] == runs[0]


def test_compact_prompt_style_says_the_same_in_fewer_words() -> None:
    from langadapt.roles import decision_messages

    env = maze("medium")
    spec = language_for(env)
    cell = (1, 1)
    legal = env.unwrapped.legal_moves_at(cell)
    verbose = decision_messages(spec, list(cell), legal)
    compact = decision_messages(spec, list(cell), legal, style="compact")
    assert compact[-1]["content"] == (
        "goal: 5 down, 5 right\nmoves: 1 right, 3 down, 7 down-right")
    assert compact[0]["content"] == spec.compact_task != verbose[0]["content"]
    assert len(compact[-1]["content"]) < 0.5 * len(verbose[-1]["content"])
    for env_id, state, moves, part in (
            ("langadapt/CartPole-v0", [0.1, -0.25, 0.031, 0.5], [0, 1], "angle 0.03"),
            ("langadapt/FrozenLake-v0", [1, 0], [0, 1, 2, 3], "holes: right"),
            ("langadapt/Sailing-v0", [-2.0, 0.3], [0, 1], "heading 0.3 rad")):
        text = format_state(language_for(env_id), state, moves, style="compact")
        assert part in text and "moves: 0 " in text
    policy = policy_for(env, ScriptedBackend(script=first_legal), prompt_style="compact")
    assert policy.messages([1, 1], legal)[-1]["content"].startswith("goal: 5 down")


def test_the_prompt_style_an_adapter_folder_records(tmp_path):
    info = tmp_path / "policy.json"
    assert trained_prompt_style(tmp_path) is None  # a bare peft adapter: nothing recorded
    info.write_text(json.dumps({"decoding": "structured", "prompt_style": "compact"}))
    assert trained_prompt_style(tmp_path) == "compact"
    info.write_text(json.dumps({"decoding": "structured"}))  # saved before the setting
    assert trained_prompt_style(tmp_path) == "verbose"
    for damaged in ("{not json", "[1, 2]", json.dumps({"prompt_style": 3})):
        info.write_text(damaged)
        assert trained_prompt_style(tmp_path) is None
