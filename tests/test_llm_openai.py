"""The ``openai`` backend: a real OpenAI-compatible server (llama-cpp-python's own
``python -m llama_cpp.server`` serving the packaged SmolLM2 GGUF, started and stopped
here), and the stand-in server (tests/standin_server.py) playing what a healthy
server never does (401, 429 with Retry-After, 5xx, slow or trickled replies, 404, a reply
that ignores the schema).

The llama.cpp server needs llama-cpp-python's ``server`` extra (uvicorn, fastapi,
sse-starlette, starlette-context, pydantic-settings); without it those tests are skipped.
"""

from __future__ import annotations

import csv
import importlib.util
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from standin_server import StandInServer

import langadapt.environments  # noqa: F401
from langadapt.llm import (
    BACKENDS,
    LLMError,
    LLMUnavailableError,
    ModelNotFoundError,
    OpenAIBackend,
    StructuredOutputError,
    backend_fields,
    default_gguf_path,
    make_backend,
)
from langadapt.roles import LLMPolicy

ROOT = Path(__file__).resolve().parents[1]
LANGADAPT = Path(sys.executable).with_name("langadapt")
KEY_ENV = "LANGADAPT_TEST_OPENAI_API_KEY"
#: A dummy key; no file a run writes may hold it.
KEY = "sk-test-9f2c1e77d0b84a55-never-write-me"
MODEL = "smollm2"
ACTION_SCHEMA = {"type": "object",
                 "properties": {"action": {"type": "integer", "enum": [0, 2, 3]}},
                 "required": ["action"], "additionalProperties": False}
SERVER_EXTRA = ("uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")


@pytest.fixture(autouse=True)
def _key_and_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setenv("LANGADAPT_CACHE_DIR", str(tmp_path / "llm-cache"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def one_line(error: BaseException, *parts: str) -> str:
    """``error``'s message, asserted to be one line naming every part (and never the key)."""
    text = str(error)
    assert "\n" not in text, text
    assert KEY not in text, text
    for part in parts:
        assert part in text, (part, text)
    return text


# --------------------------------------------------------------------------- llama.cpp server
class LlamaServer:
    """``python -m llama_cpp.server`` on 127.0.0.1 serving the packaged SmolLM2; only the
    process started here is ever stopped."""

    def __init__(self, log: Path) -> None:
        missing = [m for m in SERVER_EXTRA if importlib.util.find_spec(m) is None]
        if missing:
            pytest.skip(f"llama-cpp-python's server extra is not installed (missing {missing}):"
                        " pip install uvicorn fastapi sse-starlette 'starlette-context<0.4' "
                        "pydantic-settings  (the packages of llama-cpp-python[server])")
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.log = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "llama_cpp.server", "--model", str(default_gguf_path()),
                 "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", "2048",
                 "--n_threads", "1", "--n_threads_batch", "1"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            self._wait_ready(time_limit=90.0)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, time_limit: float) -> None:
        end = time.monotonic() + time_limit
        while time.monotonic() < end:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited ({self.process.returncode}): "
                                   f"{self.log.read_text(errors='replace')[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                time.sleep(0.25)
        raise RuntimeError(f"llama_cpp.server did not answer GET /v1/models within "
                           f"{time_limit} s: {self.log.read_text(errors='replace')[-2000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    server = LlamaServer(tmp_path_factory.mktemp("llama-server") / "server.log")
    try:
        yield server
    finally:
        server.stop()


def openai_spec(base_url: str, **fields: Any) -> dict[str, Any]:
    return {"backend": "openai", "base_url": base_url, "model": MODEL, "api_key_env": KEY_ENV,
            **fields}


def files_holding(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_structured_decisions_through_llama_cpp_server_are_legal_and_a_rerun_makes_no_call(
        llama_server: LlamaServer, tmp_path: Path) -> None:
    env = gym.make("langadapt/Maze-v0", maze="large")
    maze = env.unwrapped
    cells = [c for c in maze.free_cells() if len(maze.legal_moves_at(c)) >= 2][:20]
    assert len(cells) == 20
    cache = tmp_path / "answers.sqlite"
    runs = []
    for _ in range(2):  # two processes' worth: fresh backends on one persistent cache
        backend = make_backend(openai_spec(llama_server.base_url, cache_path=cache))
        policy = LLMPolicy(env.observation_space, env.action_space, {}, backend=backend)
        policy.bind(env)
        actions = [policy.act(np.array(c, np.float32), maze.legal_moves_at(c)) for c in cells]
        assert all(a in maze.legal_moves_at(c) for a, c in zip(actions, cells, strict=True))
        stats = policy.stats()
        assert stats["llm_fallbacks"] == 0 and stats["parse_failures"] == 0, stats
        runs.append((actions, backend.stats()["llm_calls"], backend.stats()["llm_cache_hits"]))
    assert runs[0][1] == 20 and runs[0][2] == 0  # 20 distinct prompts, 20 requests
    assert runs[1] == (runs[0][0], 0, 20)  # the rerun: same actions, no request
    identity = backend.identity
    assert identity.startswith(f"openai:{llama_server.base_url}#{MODEL}@")
    assert identity.endswith(default_gguf_path().name)  # the file the server says it serves
    assert not files_holding(tmp_path, KEY.encode())


def test_text_replies_and_per_call_seeds_through_llama_cpp_server(
        llama_server: LlamaServer) -> None:
    backend = make_backend(openai_spec(llama_server.base_url, cache_path=None))
    text = backend.complete("You are terse.", "Name a colour.", max_tokens=12)
    assert text.strip() and backend.complete("You are terse.", "Name a colour.",
                                             max_tokens=12) == text
    backend.complete("You are terse.", "Name a colour.", max_tokens=12, seed=7)
    assert backend.stats()["llm_calls"] == 2 and backend.stats()["llm_cache_hits"] == 1


RUN_FILE = """\
name: openai_tiny
environment:
  id: langadapt/Maze-v0
  params: {maze: umaze, max_steps: 6}
adapters:
  - type: raw
agents:
  - type: llm_policy
    params:
      backend: {backend: openai, base_url: BASE_URL, model: smollm2, api_key_env: KEY_ENV}
training: {episodes: 1}
seeds: 1
evaluation: {every: 1, episodes: 1, final_episodes: 1}
cache_dir: CACHE
"""


def test_langadapt_run_through_the_server_writes_the_key_nowhere(
        llama_server: LlamaServer, tmp_path: Path) -> None:
    path, out = tmp_path / "openai_tiny.yaml", tmp_path / "results"
    path.write_text(RUN_FILE.replace("BASE_URL", llama_server.base_url)
                    .replace("KEY_ENV", KEY_ENV).replace("CACHE", str(tmp_path / "cache")))
    done = subprocess.run([str(LANGADAPT), "run", str(path), "--out", str(out), "--no-progress"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, KEY_ENV: KEY})
    assert done.returncode == 0, done.stderr[-3000:]
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".sqlite" for p in written), written  # the answers were cached
    with (out / "summary.csv").open() as fh:
        row = next(csv.DictReader(fh))
    assert int(row["llm_calls"]) > 0 and int(row["llm_fallbacks"]) == 0, row
    assert not files_holding(tmp_path, KEY.encode())
    assert KEY not in done.stdout + done.stderr
    config = (out / "config.yaml").read_text()
    assert KEY_ENV in config and llama_server.base_url in config


def test_a_server_killed_mid_request_ends_in_one_line_and_nothing_is_cached(
        tmp_path: Path) -> None:
    server = LlamaServer(tmp_path / "doomed.log")  # its own server: this test kills it
    try:
        backend = make_backend(openai_spec(server.base_url, cache_path=tmp_path / "a.sqlite",
                                           retries=1, backoff=0.1, timeout=60))
        assert backend.identity.endswith(default_gguf_path().name)  # the server is up
        long = {"type": "string", "minLength": 1000, "maxLength": 1000}  # ~20 s to write
        outcome: dict[str, Any] = {}

        def ask() -> None:
            started = time.monotonic()
            try:
                outcome["reply"] = backend.complete("Write.", "Write words.", schema=long,
                                                    max_tokens=1500)
            except LLMError as error:
                outcome["error"] = error
            outcome["seconds"] = time.monotonic() - started

        worker = threading.Thread(target=ask)
        worker.start()
        time.sleep(3.0)  # the request is being answered
        server.process.kill()
        worker.join(timeout=60)
    finally:
        server.stop()
    assert "error" in outcome, outcome
    assert isinstance(outcome["error"], LLMUnavailableError)
    one_line(outcome["error"], server.base_url, MODEL, "2 attempt(s)")
    assert outcome["seconds"] < 30
    assert len(backend.cache) == 0 and backend.stats()["llm_failures"] == 1


# --------------------------------------------------------------------------- fault injector
# The stand-in server (tests/standin_server.py) plays what a healthy server
# never does (401, 429 with Retry-After, 5xx, slow or trickled replies, 404, a reply that
# ignores the schema), queued per chat request in ``faults``.
@pytest.fixture
def fake() -> Iterator[StandInServer]:
    with StandInServer(latency=0.0, model=MODEL, reply='{"action": 2}') as server:
        yield server


def backend_for(fake: StandInServer, **fields: Any) -> OpenAIBackend:
    spec = openai_spec(fake.base_url, cache_path=None, backoff=0.05, **fields)
    return make_backend(spec)  # type: ignore[return-value]


def ask(backend: OpenAIBackend) -> str:
    return backend.complete("You play a maze.", "Which move?", schema=ACTION_SCHEMA)


def test_the_request_carries_the_key_the_schema_and_the_options(fake: StandInServer) -> None:
    backend = backend_for(fake, seed=5, temperature=0.3)
    assert ask(backend) == '{"action": 2}'
    body = fake.bodies[-1]
    assert fake.authorizations == [f"Bearer {KEY}"]
    assert body["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "reply", "schema": ACTION_SCHEMA, "strict": True}}
    assert (body["model"], body["seed"], body["temperature"], body["max_tokens"]) == (
        MODEL, 5, 0.3, 256)
    assert backend.identity == f"openai:{fake.base_url}#{MODEL}"
    assert KEY.encode() not in pickle.dumps(backend) and KEY not in repr(backend.runtime)


def test_401_is_one_line_naming_the_variable_not_retried_and_the_key_cut_out(
        fake: StandInServer) -> None:
    fake.faults.extend(["401"] * 5)
    with pytest.raises(LLMError) as caught:
        ask(backend_for(fake))
    text = one_line(caught.value, fake.base_url, MODEL, KEY_ENV, "HTTP 401")
    assert "***" in text and len(fake.bodies) == 1


def test_429_waits_the_retry_after_then_answers(fake: StandInServer) -> None:
    fake.faults.append("429:1")
    backend = backend_for(fake)
    assert ask(backend) == '{"action": 2}'
    assert fake.times[1] - fake.times[0] >= 0.95
    assert backend.stats()["llm_retries"] == 1


def test_a_retry_after_past_the_deadline_gives_up_at_once(fake: StandInServer) -> None:
    fake.faults.append("503:30")
    started = time.monotonic()
    with pytest.raises(LLMError) as caught:
        ask(backend_for(fake, deadline=5))
    one_line(caught.value, fake.base_url, MODEL, "HTTP 503", "Retry-After: 30 s", "deadline")
    assert time.monotonic() - started < 3 and len(fake.bodies) == 1


def test_5xx_is_retried_then_one_line_and_nothing_is_cached(fake: StandInServer) -> None:
    fake.faults.extend(["500"] * 3)
    backend = backend_for(fake, retries=2)
    with pytest.raises(LLMError) as caught:
        ask(backend)
    one_line(caught.value, fake.base_url, MODEL, "HTTP 500", "3 attempt(s)")
    assert len(fake.bodies) == 3 and len(backend.cache) == 0
    assert ask(backend) == '{"action": 2}' and len(fake.bodies) == 4  # asked again


def test_a_slow_reply_ends_at_timeout(fake: StandInServer) -> None:
    fake.faults.extend(["slow:3"] * 2)
    started = time.monotonic()
    with pytest.raises(LLMUnavailableError) as caught:
        ask(backend_for(fake, timeout=0.5, retries=1))
    one_line(caught.value, fake.base_url, MODEL, "timeout=0.5 s")
    assert time.monotonic() - started < 2.5


def test_a_trickled_reply_is_cut_off_at_timeout_as_a_whole(fake: StandInServer) -> None:
    fake.faults.append("trickle:0.05")  # ~300 bytes: 15 s, every read well under timeout
    started = time.monotonic()
    with pytest.raises(LLMUnavailableError) as caught:
        ask(backend_for(fake, timeout=1.0, retries=0))
    one_line(caught.value, fake.base_url, MODEL, "timeout=1.0 s")
    assert time.monotonic() - started < 3


def test_404_says_base_url_is_not_an_openai_compatible_server(fake: StandInServer) -> None:
    backend = make_backend(openai_spec(fake.base_url.removesuffix("/v1"), cache_path=None))
    with pytest.raises(LLMUnavailableError) as caught:
        ask(backend)
    one_line(caught.value, "is not an OpenAI-compatible server", fake.base_url.removesuffix("/v1"),
             MODEL, "/v1")
    assert len(fake.bodies) == 1  # not retried
    fake.faults.append("404-model")
    with pytest.raises(ModelNotFoundError) as missing:
        ask(backend_for(fake))
    one_line(missing.value, fake.base_url, MODEL, "/models")


def test_a_reply_that_ignores_the_schema_names_server_model_and_fix(fake: StandInServer) -> None:
    fake.faults.append("ignore")
    backend = backend_for(fake)
    with pytest.raises(StructuredOutputError) as caught:
        ask(backend)
    one_line(caught.value, fake.base_url, MODEL, "response_format", "structured outputs")
    assert len(backend.cache) == 0 and len(fake.bodies) == 1


def test_nothing_listening_is_one_line_naming_the_server() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(LLMUnavailableError) as caught:
        ask(make_backend(openai_spec(url, cache_path=None, retries=1, backoff=0.05)))
    one_line(caught.value, f"no server is answering at {url}", MODEL, "2 attempt(s)")


def test_the_api_key_variable(fake: StandInServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(LLMError) as caught:
        ask(backend_for(fake))
    one_line(caught.value, KEY_ENV, "api_key_env: null")
    assert not fake.bodies
    assert ask(backend_for(fake, api_key_env=None)) == '{"action": 2}'
    assert fake.authorizations == ["Bearer no-key-needed"]
    with pytest.raises(ValueError, match="api_key_env") as bad:
        make_backend(openai_spec(fake.base_url, api_key_env=KEY))  # the key where a name belongs
    assert KEY not in str(bad.value)


# --------------------------------------------------------------------------- settings, extras
@pytest.mark.parametrize(("url", "problem"), [
    ("127.0.0.1:8000/v1", "no scheme"), ("ftp://127.0.0.1/v1", "not http or https"),
    ("http://127.0.0.1:70000/v1", "port"), ("http:///v1", "no host"),
])
def test_bad_base_urls_are_refused_naming_the_field(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match="base_url") as caught:
        make_backend(openai_spec(url))
    assert problem in str(caught.value)


def test_the_factory_and_experiment_checks_know_the_backend() -> None:
    assert BACKENDS["openai"] is OpenAIBackend and OpenAIBackend.supports_scoring is False
    spec = {"backend": "openai", "base_url": "http://127.0.0.1:8000/v1/", "model": MODEL,
            "options": {"temperature": 0.5}}
    assert backend_fields(spec) == [(OpenAIBackend, {"base_url": "http://127.0.0.1:8000/v1/",
                                                     "model": MODEL, "temperature": 0.5})]
    backend = make_backend(spec)
    assert backend.base_url == "http://127.0.0.1:8000/v1" and backend.temperature == 0.5
    with pytest.raises(ValueError, match="base_url"):
        make_backend({"backend": "openai", "model": MODEL})


def test_openai_is_optional(monkeypatch: pytest.MonkeyPatch) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import sys, langadapt, langadapt.llm, langadapt.roles, "
         "langadapt.experiments.config; print('openai' in sys.modules)"],
        capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "False", done.stderr[-2000:]
    monkeypatch.setitem(sys.modules, "openai", None)  # as if not installed
    with pytest.raises(LLMUnavailableError) as caught:
        make_backend(openai_spec("http://127.0.0.1:8000/v1"))
    assert str(caught.value).count("\n") == 0
    assert "pip install 'langadapt[openai]'" in str(caught.value)


def test_describe_and_prompt_reach_a_key_less_server_with_api_key_env_none(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from experiment_fixtures import run_cli

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with StandInServer(latency=0.0, model=MODEL,
                       reply="You stand two cells from the goal.") as server:
        llm = ["--backend", "openai", "--base-url", server.base_url, "--model", MODEL]
        code, _, err = run_cli(capsys, "describe", "maze", "--adapter", "llm", *llm,
                               "--steps", "0")
        assert code == 2 and "OPENAI_API_KEY" in err and "--api-key-env none" in err
        code, out, err = run_cli(capsys, "describe", "maze", "--adapter", "llm", *llm,
                                 "--steps", "0", "--api-key-env", "none")
        assert code == 0, err
        assert "You stand two cells from the goal." in out
        assert server.authorizations and set(server.authorizations) == {
            "Bearer no-key-needed"}
        code, out, err = run_cli(capsys, "prompt", "maze", *llm, "--api-key-env", "none")
        assert code == 0, err
        code, out, err = run_cli(capsys, "describe", "maze", "--adapter", "llm", *llm,
                                 "--api-key-env", KEY_ENV, "--steps", "0")
        assert code == 0 and KEY not in out + err
    code, _, err = run_cli(capsys, "prompt", "maze", "--backend", "ollama",
                           "--api-key-env", "none")
    assert code == 2 and "--api-key-env 'none' is for --backend openai" in err
