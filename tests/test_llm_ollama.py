"""OllamaAdapter against a real HTTP server speaking Ollama's protocol (tests/fake_ollama.py)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from fake_ollama import FakeOllama
from pydantic import ValidationError

from langadapt import adapters, environments
from langadapt.adapters.llm import LlamaCppAdapter, LLMAdapter, OllamaAdapter, make_llm_adapter
from langadapt.llm import (
    LLMBackend,
    LLMError,
    LLMReplyError,
    LLMUnavailableError,
    ModelNotFoundError,
    OllamaBackend,
)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def fake():
    server = FakeOllama(models=("llama3.2",), default_answer="A cell near the goal.").start()
    yield server
    server.stop()


@pytest.fixture
def maze():
    return environments.MazeEnv(maze="umaze")


def _adapter(env, fake, tmp_path, **settings):
    settings.setdefault("backoff", 0.01)
    return OllamaAdapter(env, host=fake.host, cache_path=tmp_path / "llm.sqlite", **settings)


def _first_input(env):
    obs, info = env.reset(seed=0)
    return obs, info["legal_moves"]


@pytest.mark.parametrize("stream", [False, True])
def test_happy_path_over_http(fake, maze, tmp_path, stream):
    adapter = _adapter(maze, fake, tmp_path, stream=stream, keep_alive="10m", seed=7)
    obs, legal = _first_input(maze)
    assert adapter(obs, legal, (), encode=False) == "A cell near the goal."
    body = fake.chat_bodies[-1]
    assert body["model"] == "llama3.2"
    assert body["stream"] is stream
    assert body["keep_alive"] == "10m"
    assert body["options"] == {"temperature": 0.0, "num_predict": 96, "seed": 7, "num_ctx": 2048}
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user"]
    assert "Legal actions:" in body["messages"][1]["content"]
    assert fake.requests["/api/tags"] == 1  # the model's digest, once
    stats = adapter.stats()
    assert set(adapters.STAT_KEYS) <= set(stats)
    assert stats["llm_calls"] == 1 and stats["llm_failures"] == 0
    assert stats["llm_seconds"] > 0


def test_vector_is_the_encoding_of_the_description(fake, maze, tmp_path):
    adapter = _adapter(maze, fake, tmp_path)
    obs, legal = _first_input(maze)
    vector = adapter(obs, legal)
    assert vector.shape == (384,) and vector.dtype == np.float32
    expected = adapter.encode_many(["A cell near the goal."])[0]
    np.testing.assert_allclose(vector, expected, atol=1e-6)
    assert adapter.observation_space.shape == (384,)
    again = adapter(obs, legal)
    assert again is vector  # the memo: a repeated input is a lookup
    assert fake.chat_requests == 1


def test_model_missing_names_model_and_pull_command(fake, maze, tmp_path):
    adapter = _adapter(maze, fake, tmp_path, model="qwen2.5:0.5b")
    obs, legal = _first_input(maze)
    with pytest.raises(ModelNotFoundError) as info:
        adapter.describe(obs, legal)
    assert "qwen2.5:0.5b" in str(info.value)
    assert "ollama pull qwen2.5:0.5b" in str(info.value)
    assert fake.chat_requests == 0


def test_nothing_listening_names_host_and_how_to_start(maze, tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    host = f"http://127.0.0.1:{port}"
    adapter = OllamaAdapter(maze, host=host, cache_path=tmp_path / "c.sqlite")
    obs, legal = _first_input(maze)
    with pytest.raises(LLMUnavailableError) as info:
        adapter.describe(obs, legal)
    assert host in str(info.value)
    assert "ollama serve" in str(info.value)


def test_host_defaults_to_ollama_host_env(monkeypatch, tmp_path):
    monkeypatch.setenv("OLLAMA_HOST", "http://10.1.2.3:9999")
    assert OllamaBackend(cache_path=None).host == "http://10.1.2.3:9999"
    monkeypatch.delenv("OLLAMA_HOST")
    assert OllamaBackend(cache_path=None).host == "http://127.0.0.1:11434"


def test_timeout_is_reported_and_nothing_cached(fake, maze, tmp_path):
    fake.latency = 1.0
    adapter = _adapter(maze, fake, tmp_path, timeout=0.2, retries=1)
    obs, legal = _first_input(maze)
    with pytest.raises(LLMError, match=r"within timeout=0.2 s, 2 attempt"):
        adapter.describe(obs, legal)
    assert len(adapter.backend.cache) == 0
    assert adapter.stats()["llm_failures"] == 1


def test_retries_then_success(fake, maze, tmp_path):
    fake.queue_faults("500", "slow:3", "503")
    adapter = _adapter(maze, fake, tmp_path, timeout=1.0, retries=3)
    obs, legal = _first_input(maze)
    assert adapter.describe(obs, legal) == "A cell near the goal."
    assert fake.chat_requests == 4
    assert adapter.stats()["llm_retries"] == 3
    assert adapter.stats()["llm_calls"] == 1 and adapter.stats()["llm_failures"] == 0


def test_5xx_then_failure(fake, maze, tmp_path):
    fake.queue_faults("500", "502", "500")
    adapter = _adapter(maze, fake, tmp_path, retries=2)
    obs, legal = _first_input(maze)
    with pytest.raises(LLMError, match=r"HTTP 500.*3 attempt\(s\) in total; giving up"):
        adapter.describe(obs, legal)
    assert fake.chat_requests == 3
    assert len(adapter.backend.cache) == 0


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("fault", ["empty", "malformed", "non_text"])
def test_bad_replies_are_clear_errors_and_not_cached(fake, maze, tmp_path, fault, stream):
    fake.queue_faults(fault)
    adapter = _adapter(maze, fake, tmp_path, stream=stream)
    obs, legal = _first_input(maze)
    with pytest.raises(LLMReplyError, match="empty answer|not a valid chat response|expected text"):
        adapter.describe(obs, legal)
    assert len(adapter.backend.cache) == 0
    assert fake.chat_requests == 1  # a bad reply is not retried
    # the next request succeeds and is the one cached
    assert adapter.describe(obs, legal) == "A cell near the goal."
    assert len(adapter.backend.cache) == 1


def test_fallback_is_counted_marked_and_not_cached(fake, maze, tmp_path):
    fake.queue_faults("500", "500")
    adapter = _adapter(maze, fake, tmp_path, retries=1, fallback=True)
    obs, legal = _first_input(maze)
    text = adapter.describe(obs, legal)
    assert text == adapter.rule_description(obs, legal)
    assert adapter.last_was_fallback
    stats = adapter.stats()
    assert stats["llm_fallbacks"] == 1 and stats["llm_failures"] == 1
    assert len(adapter.backend.cache) == 0
    # not memoised either: the next call asks the server again and gets the real answer
    assert adapter(obs, legal, (), encode=False) == "A cell near the goal."
    assert not adapter.last_was_fallback
    assert len(adapter.backend.cache) == 1


def test_cache_hit_sends_no_request(fake, maze, tmp_path):
    first = _adapter(maze, fake, tmp_path)
    obs, legal = _first_input(maze)
    first.describe(obs, legal)
    assert fake.chat_requests == 1
    second = _adapter(maze, fake, tmp_path)  # a new adapter, same persistent cache
    assert second.describe(obs, legal) == "A cell near the goal."
    assert fake.chat_requests == 1
    assert second.stats()["llm_cache_hits"] == 1 and second.stats()["llm_calls"] == 0


def test_options_and_model_are_part_of_the_key(fake, maze, tmp_path):
    obs, legal = _first_input(maze)
    _adapter(maze, fake, tmp_path).describe(obs, legal)
    _adapter(maze, fake, tmp_path, temperature=0.5).describe(obs, legal)
    _adapter(maze, fake, tmp_path, max_tokens=50).describe(obs, legal)
    assert fake.chat_requests == 3


@pytest.mark.heavy
def test_persistence_across_processes(fake, maze, tmp_path):
    cache = tmp_path / "shared.sqlite"
    script = textwrap.dedent(
        f"""
        from langadapt import environments
        from langadapt.adapters.llm import OllamaAdapter
        env = environments.MazeEnv(maze="umaze")
        obs, info = env.reset(seed=0)
        a = OllamaAdapter(env, host={fake.host!r}, cache_path={str(cache)!r})
        print(a.describe(obs, info["legal_moves"]))
        print(a.stats()["llm_calls"])
        """
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                         text=True, timeout=120, check=True)
    assert out.stdout.split("\n")[:2] == ["A cell near the goal.", "1"]
    assert fake.chat_requests == 1
    here = OllamaAdapter(maze, host=fake.host, cache_path=cache)
    obs, legal = _first_input(maze)
    assert here.describe(obs, legal) == "A cell near the goal."
    assert fake.chat_requests == 1  # answered from the other process's cache


def test_prerender_respects_concurrency_bound_and_keeps_order(fake, tmp_path):
    fake.latency = 0.3
    fake.answer = lambda messages, options: "desc of " + messages[1]["content"].split("\n")[0]
    medium = environments.MazeEnv(maze="medium")
    adapter = _adapter(medium, fake, tmp_path, concurrency=3, action_history_length=0)
    inputs = adapters.reachable_inputs(medium)[:9]
    summary = adapter.prerender(inputs, progress=False)
    assert summary["inputs"] == 9 and summary["generated"] == summary["distinct_prompts"]
    assert fake.max_in_flight == 3
    assert fake.chat_requests == summary["distinct_prompts"]
    state, legal, history = inputs[4]
    # after prerender the call is a memo lookup, and the text belongs to this input
    assert adapter(state, legal, history, encode=False).startswith("desc of Current state:")
    assert adapter.describe(state, legal, history) == (
        "desc of " + adapter.build_prompt(state, legal, history).user.split("\n")[0]
    )
    assert fake.chat_requests == summary["distinct_prompts"]
    assert len(adapter.backend.cache) == summary["distinct_prompts"]


def test_interrupted_prerender_keeps_what_finished(fake, maze, tmp_path):
    fake.queue_faults("slow:0", "slow:0", "slow:0", "500")
    adapter = _adapter(maze, fake, tmp_path, concurrency=1, retries=0, action_history_length=0)
    inputs = adapters.reachable_inputs(maze)[:6]
    with pytest.raises(LLMError):
        adapter.prerender(inputs, progress=False)
    assert len(adapter.backend.cache) == 3
    fresh = _adapter(maze, fake, tmp_path, concurrency=1, action_history_length=0)
    fresh.describe_many(inputs)
    assert fresh.stats()["llm_cache_hits"] == 3
    assert fresh.stats()["llm_calls"] == len({fresh.build_prompt(*i) for i in inputs}) - 3


def test_make_llm_registered_and_auto_picks_ollama(fake, maze, tmp_path):
    adapter = adapters.make("llm", maze, backend="auto", host=fake.host, model="llama3.2",
                            cache_path=tmp_path / "c.sqlite")
    assert isinstance(adapter, OllamaAdapter)
    assert adapter.backend.name == "ollama"
    assert "has model" in adapter.backend.choice_reason
    explicit = adapters.make("llm", "langadapt/Maze-v0", backend="ollama", host=fake.host,
                             cache_path=None)
    assert isinstance(explicit, OllamaAdapter) and explicit.backend.cache_path is None


def test_auto_falls_back_to_llamacpp_without_the_model(fake, maze, tmp_path):
    adapter = make_llm_adapter(maze, backend="auto", host=fake.host, model="mistral",
                               timeout=5, cache_path=tmp_path / "c.sqlite")
    assert isinstance(adapter, LlamaCppAdapter)
    assert adapter.backend.name == "llamacpp"
    assert "no model 'mistral'" in adapter.backend.choice_reason
    assert adapter.backend.model is None  # the Ollama name is not a GGUF file: not used


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"action_history_length": -1}, "action_history_length"),
        ({"model": ""}, "model"),
        ({"model": "   "}, "model"),
        ({"temperature": -0.1}, "temperature"),
        ({"concurrency": 0}, "concurrency"),
        ({"timeout": 0}, "timeout"),
        ({"hots": "x"}, "hots"),
        ({"backend": "gpt4"}, "backend"),
    ],
)
def test_invalid_settings_name_the_field(maze, settings, field):
    with pytest.raises(ValueError) as info:  # pydantic's ValidationError is a ValueError
        adapters.make("llm", maze, **{"backend": "ollama", "cache_path": None, **settings})
    assert field in str(info.value)


def test_context_length_too_small_for_the_system_prompt_is_rejected(maze):
    with pytest.raises(ValueError, match="context_length=100"):
        OllamaAdapter(maze, context_length=100, max_tokens=64, cache_path=None)


def test_prompt_is_cut_to_the_context_deterministically(fake, maze, tmp_path):
    adapter = _adapter(maze, fake, tmp_path, context_length=330, max_tokens=64,
                       action_history_length=50)
    obs, legal = _first_input(maze)
    history = [(obs, 2), (obs, 3)] * 20
    prompt = adapter.build_prompt(obs, legal, history)
    assert prompt.cut
    assert prompt == adapter.build_prompt(obs, legal, history)
    kept = prompt.user.count("took action")
    assert 0 < kept < 40
    assert prompt.user.rstrip().endswith("took action 3 (down)")  # the newest is kept
    adapter.describe(obs, legal, history)
    assert adapter.stats()["prompt_cuts"] == 1


def test_jsonl_export_import_round_trip(fake, maze, tmp_path):
    fake.answer = lambda messages, options: f"answer {len(messages[1]['content'])}"
    source = _adapter(maze, fake, tmp_path, action_history_length=0)
    inputs = adapters.reachable_inputs(maze)[:4]
    texts = source.describe_many(inputs)
    path = tmp_path / "shared" / "descriptions.jsonl"
    assert source.export_jsonl(path) == len(set(texts))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert {"messages", "answer", "model", "identity", "options", "created"} <= set(lines[0])
    requests = fake.chat_requests
    target = OllamaAdapter(maze, host=fake.host, cache_path=tmp_path / "other.sqlite",
                           action_history_length=0)
    assert target.import_jsonl(path) == len(lines)
    assert target.import_jsonl(path) == 0  # importing twice adds nothing
    assert target.describe_many(inputs) == texts
    assert fake.chat_requests == requests


def test_jsonl_import_rejects_bad_lines(tmp_path, maze):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "p", "description": "", "model": "m"}\n')
    adapter = OllamaAdapter(maze, cache_path=tmp_path / "c.sqlite")
    with pytest.raises(ValueError, match='bad.jsonl:1: description="": '):
        adapter.import_jsonl(bad)


def test_llm_adapter_takes_any_backend_and_a_backend_only_needs_generate(maze):
    class Echo(LLMBackend):
        name = "echo"

        def generate(self, messages, schema, max_tokens):
            return "echo: " + messages[-1]["content"].splitlines()[0]

        def resolve_identity(self):
            return "echo-1"

    with pytest.raises(ValueError, match="needs backend="):
        LLMAdapter(maze)
    with pytest.raises(NotImplementedError, match="does not implement"):
        LLMBackend(cache_path=None).complete("s", "u")
    echo = LLMAdapter(maze, backend=Echo(cache_path=None))
    obs, legal = _first_input(maze)
    assert echo.describe(obs, legal).startswith("echo: Current state: The goal is")
    assert echo.backend.identity == "echo-1" and echo.stats()["llm_calls"] == 1
    with pytest.raises(ValueError, match="backend settings belong to the backend"):
        LLMAdapter(maze, backend=Echo(cache_path=None), host="x")


def test_public_names_and_the_wrapper(fake, maze, tmp_path):
    from langadapt.adapters import LanguageObservation
    from langadapt.adapters import LlamaCppAdapter as L
    from langadapt.adapters import LLMAdapter as B
    from langadapt.adapters import OllamaAdapter as O

    assert (B, O, L) == (LLMAdapter, OllamaAdapter, LlamaCppAdapter)
    adapter = _adapter(maze, fake, tmp_path, action_history_length=2)
    env = LanguageObservation(maze, adapter)
    obs, info = env.reset(seed=0)
    assert obs.shape == (384,) and info["description"] == "A cell near the goal."
    obs, _, _, _, info = env.step(info["legal_moves"][0])
    # the second prompt carries the history line of the first step
    assert "Recent history" in fake.chat_bodies[-1]["messages"][1]["content"]
    assert adapter.stats()["llm_calls"] == 2


def test_fake_server_speaks_the_documented_endpoints(fake):
    import httpx
    import ollama

    client = ollama.Client(host=fake.host)
    assert [m.model for m in client.list().models] == ["llama3.2:latest"]
    assert httpx.get(f"{fake.host}/api/version").json() == {"version": "0.6.0"}
    with pytest.raises(ollama.ResponseError) as info:
        client.chat(model="nope", messages=[{"role": "user", "content": "hi"}])
    assert info.value.status_code == 404
    assert info.value.error == 'model "nope" not found, try pulling it first'
    chunks = list(client.chat(model="llama3.2", messages=[{"role": "user", "content": "hi"}],
                              stream=True))
    assert "".join(c.message.content for c in chunks) == "A cell near the goal."
    assert chunks[-1].done and chunks[-1].done_reason == "stop"
    assert fake.requests["/api/chat"] == 2 and fake.requests["/api/tags"] == 1


def test_environment_without_describer_uses_raw_numbers(fake, tmp_path):
    import gymnasium

    env = gymnasium.make("CartPole-v1")
    adapter = _adapter(env, fake, tmp_path, action_history_length=1)
    obs, _ = env.reset(seed=0)
    prompt = adapter.build_prompt(obs, [0, 1], [(obs, 1)])
    assert prompt.user.startswith("Current state: [")
    assert "Legal actions: 0, 1" in prompt.user
    assert adapter.describe(obs, [0, 1]) == "A cell near the goal."


def test_prerender_with_fallback_counts_and_does_not_memoise(fake, maze, tmp_path):
    fake.queue_faults("500")
    adapter = _adapter(maze, fake, tmp_path, concurrency=1, retries=0, fallback=True,
                       action_history_length=0)
    inputs = adapters.reachable_inputs(maze)
    summary = adapter.prerender(inputs, progress=False)
    assert summary["fallbacks"] == 1 and summary["generated"] == len(inputs)
    assert len(adapter.backend.cache) == len(inputs) - 1
    assert adapter.stats()["memo_size"] == len(inputs) - 1
    state, legal, history = inputs[0]
    assert adapter(state, legal, history, encode=False) == "A cell near the goal."
    assert len(adapter.backend.cache) == len(inputs)


def test_wrapper_warm_steps_send_no_request_and_fallbacks_are_asked_again(fake, maze, tmp_path):
    from langadapt.adapters import LanguageObservation

    # one distinct answer per prompt, so a stale memo entry would show as a wrong description
    fake.answer = lambda messages, options: "Seen: " + messages[1]["content"].split("\n")[0]
    adapter = _adapter(maze, fake, tmp_path, action_history_length=0, retries=1, fallback=True)
    assert adapter.state_dtype == np.float32 and adapter.state_shape == (2,)
    fake.queue_faults("500", "500")  # the start cell's first description fails
    env = LanguageObservation(maze, adapter)
    _, info = env.reset(seed=0)
    assert info["description"] == adapter.rule_description(*_first_input(maze))
    adapter.prerender(adapters.reachable_inputs(maze), progress=False)
    requests = fake.chat_requests
    assert adapter.stats()["llm_fallbacks"] == 1
    base = env.unwrapped

    def expected():
        return adapter.describe(base.observation_of(base.cell), base.legal_moves_at(base.cell))

    # every reachable cell is warm now, the start cell included: stepping is a memo lookup
    _, info = env.reset(seed=0)
    assert info["description"] == expected() and info["description"].startswith("Seen: ")
    seen = {info["description"]}
    for action in (2, 6, 7, 3, 2):  # the shortest path to the goal, then up from the start
        obs, _, terminated, _, info = env.step(action)
        assert info["description"] == expected() and info["description"].startswith("Seen: ")
        seen.add(info["description"])
        assert obs.flags.writeable and obs.shape == (384,)
        if terminated:
            env.reset(seed=0)
    assert len(seen) >= 4  # the cells really got different answers
    assert fake.chat_requests == requests

@pytest.mark.parametrize(
    ("bad_item", "match"),
    [
        ("pair", "history action None"),
        (None, "history action None"),
        ("triple", "has 3 elements"),
        ("text", "history action 'x'"),
    ],
)
def test_bad_history_items_are_value_errors(fake, maze, tmp_path, bad_item, match):
    adapter = _adapter(maze, fake, tmp_path, action_history_length=2)
    obs, legal = _first_input(maze)
    item = {"pair": (obs, None), "triple": (obs, 1, 2), "text": "x"}.get(bad_item, bad_item)
    for history in ([item], [(obs, 1), item], (item,)):
        with pytest.raises(ValueError, match=match):
            adapter(obs, legal, history)
    assert fake.chat_requests == 0
    # plain actions and (state, action) pairs of the same actions give the same prompt key
    assert adapter.history_key([1, 2]) == adapter.history_key([(None, 1), (None, 2)])


@pytest.mark.parametrize("timeout", [None, "x", 0, -1.0])
def test_auto_with_a_bad_timeout_names_the_field(fake, maze, timeout):
    with pytest.raises(ValidationError, match="timeout") as info:
        make_llm_adapter(maze, backend="auto", host=fake.host, timeout=timeout, cache_path=None)
    assert repr(timeout) in str(info.value) or str(timeout) in str(info.value)
    assert fake.requests.get("/api/tags", 0) == 0 and fake.requests.get("/api/show", 0) == 0


def test_llm_prerender_and_history_reject_wrong_types(fake, maze, tmp_path):
    adapter = _adapter(maze, fake, tmp_path, action_history_length=2)
    with pytest.raises(ValueError, match="inputs=5: expected an iterable"):
        adapter.prerender(5, progress=False)
    obs, legal = _first_input(maze)
    for bad in (5, {1: 2}):
        with pytest.raises(ValueError, match="not an ordered sequence"):
            adapter(obs, legal, bad)
    assert fake.chat_requests == 0
