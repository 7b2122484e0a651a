"""Fault tests of a received results folder (experiments.received, experiments.evaluate): its
``config.yaml`` is data — it chooses no LLM server, API key, cache file or folder; ``evaluate``,
``play`` and ``load_run`` take those from the user, and say in one line what they ignored."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from experiment_fixtures import run_cli

from langadapt.experiments.benchmarks.standin_server import StandInServer
from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.evaluate import load_run
from langadapt.experiments.runner import run_experiment

KEY_ENV = "LANGADAPT_TEST_RECEIVED_API_KEY"
KEY = "sk-received-test-3c9e1d-never-send-me"

MAZE = {
    "name": "received",
    "environment": {"id": "langadapt/Maze-v0", "params": {"maze": "umaze"}},
    "adapters": [{"type": "language"}],
    "agents": [{"type": "qlearning"}],
    "training": {"episodes": 2},
    "seeds": 1,
    "evaluation": {"every": 2, "episodes": 1, "final_episodes": 1},
}


class Recorder:
    """A loopback HTTP server that records every request (path, Authorization) and answers
    404: the address a crafted folder names."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str | None]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                recorder.requests.append((self.command, self.path,
                                          self.headers.get("Authorization")))
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_PUT = do_HEAD = _any  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def theirs() -> Iterator[Recorder]:
    recorder = Recorder()
    yield recorder
    recorder.close()


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("trained")
    config = experiment_from_dict({**MAZE, "cache_dir": str(tmp / "cache")})
    return run_experiment(config, tmp / "folder", progress=False, log=lambda _: None)


def _received(trained: Path, tmp_path: Path, adapter: dict[str, Any] | None = None,
              **top: Any) -> Path:
    """A copy of ``trained`` whose config.yaml was edited by the sender."""
    folder = tmp_path / "received"
    run = folder / "runs" / "language__qlearning__seed0"
    run.mkdir(parents=True)
    for name in ("episodes.csv", "config.yaml"):
        (folder / name).write_bytes((trained / name).read_bytes())
    source = trained / "runs" / run.name
    for path in source.iterdir():
        if path.is_file():
            (run / path.name).write_bytes(path.read_bytes())
    data = yaml.safe_load((folder / "config.yaml").read_text())
    if adapter is not None:
        data["adapters"] = [{"label": "language", **adapter}]
    data.update(top)
    (folder / "config.yaml").write_text(yaml.safe_dump(data))
    return folder


@pytest.fixture()
def user(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The user's environment: a key in the environment, no Ollama server, their folder."""
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OLLAMA_HOST", "http://127.0.0.1:9")  # nothing listens (discard port)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_received_folder_never_sends_the_users_key_to_the_server_it_names(
        trained, tmp_path, theirs, user, capsys):
    folder = _received(trained, tmp_path, {"type": "llm", "settings": {
        "backend": "openai", "base_url": f"{theirs.url}/v1", "model": "m",
        "api_key_env": KEY_ENV}})
    code, out, err = run_cli(capsys, "evaluate", str(folder), "--out", str(tmp_path / "x"))
    assert theirs.requests == []  # not one request, let alone one carrying the key
    assert "adapters.language.settings.base_url" in out and theirs.url in out
    assert "api_key_env" in out and KEY not in out + err
    assert code == 0 or len(err.strip().splitlines()) == 1, err  # the user's default LLM


def test_play_and_load_run_take_no_server_from_the_folder_either(
        trained, tmp_path, theirs, user, capsys):
    folder = _received(trained, tmp_path, {"type": "llm", "settings": {
        "backend": "ollama", "host": theirs.url, "model": "m"}})
    run = folder / "runs" / "language__qlearning__seed0"
    notes: list[str] = []
    try:
        load_run(run, log=notes.append).make_env().reset(seed=0)
    except ValueError:
        pass  # the user's default LLM may be absent here: their problem to name, not the folder's
    code, _, err = run_cli(capsys, "play", str(run), "--out", str(tmp_path / "p.gif"))
    assert theirs.requests == []
    assert "settings.host" in notes[0] and theirs.url in notes[0]
    assert code == 0 or len(err.strip().splitlines()) == 1, err


def test_the_server_the_user_names_is_the_one_asked(trained, tmp_path, theirs, user, capsys):
    folder = _received(trained, tmp_path, {"type": "llm", "settings": {
        "backend": "openai", "base_url": f"{theirs.url}/v1", "model": "m"}})
    with StandInServer(latency=0.0, model="m", reply="You are in a maze.") as mine:
        code, _, err = run_cli(
            capsys, "evaluate", str(folder), "--out", str(tmp_path / "x"),
            "--set", "adapters.language.settings.backend=openai",
            "--set", f"adapters.language.settings.base_url={mine.base_url}",
            "--set", f"adapters.language.settings.api_key_env={KEY_ENV}")
        assert code == 0, err
        assert mine.authorizations and set(mine.authorizations) == {f"Bearer {KEY}"}
    assert theirs.requests == []


def test_a_received_folder_never_writes_the_cache_files_and_folders_it_names(
        trained, tmp_path, user, capsys):
    mine = tmp_path / "my_notes.txt"
    mine.write_bytes(b"a file of the user's\n")
    elsewhere = tmp_path / "elsewhere" / "deep"
    folder = _received(trained, tmp_path, {"type": "language", "settings": {
        "embedding_cache_path": str(mine), "embedding_cache_capacity": 100_000_000}},
        cache_dir=str(elsewhere))
    before = sorted(p.name for p in tmp_path.iterdir())
    code, out, err = run_cli(capsys, "evaluate", str(folder), "--out", str(tmp_path / "x"))
    assert code == 0, err
    assert mine.read_bytes() == b"a file of the user's\n"  # not turned into a SQLite store
    assert not (tmp_path / "elsewhere").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [*before, "x", ".langadapt-cache"])  # no <name>.corrupt-<time> beside it
    assert (user / ".langadapt-cache" / "cache.sqlite").is_file()  # the user's cache
    for key in ("cache_dir", "settings.embedding_cache_path", "embedding_cache_capacity"):
        assert key in out
    written = yaml.safe_load((tmp_path / "x" / "config.yaml").read_text())
    assert written["cache_dir"] == ".langadapt-cache"
    assert "embedding_cache_path" not in written["adapters"][0]["settings"]


def test_an_llm_adapters_cache_path_in_a_received_folder_is_never_opened(
        trained, tmp_path, user):
    mine = tmp_path / "answers.db"
    mine.write_bytes(b"not a store\n")
    folder = _received(trained, tmp_path, {"type": "llm", "settings": {
        "backend": "ollama", "model": "m", "cache_path": str(mine)}})
    notes: list[str] = []
    try:
        load_run(folder / "runs" / "language__qlearning__seed0", log=notes.append)
    except ValueError:
        pass  # no LLM of the user's here
    assert mine.read_bytes() == b"not a store\n"
    assert [p.name for p in tmp_path.glob("answers.db*")] == ["answers.db"]
    assert "settings.cache_path" in notes[0]


def test_the_user_sets_the_cache_folder_of_an_evaluation(trained, tmp_path, user, capsys):
    folder = _received(trained, tmp_path)
    code, _, err = run_cli(capsys, "evaluate", str(folder), "--out", str(tmp_path / "x"),
                           "--set", f"cache_dir={tmp_path / 'my_cache'}")
    assert code == 0, err
    assert (tmp_path / "my_cache" / "cache.sqlite").is_file()
