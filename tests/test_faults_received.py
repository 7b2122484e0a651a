"""Fault tests of a received results folder (experiments.received, experiments.kept): its
``config.yaml`` is data — it chooses no LLM server, API key, cache file or folder; ``evaluate``,
``play`` and ``load_run`` take those from the user, and say in one line what they ignored."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from experiment_fixtures import run_cli
from standin_server import StandInServer

from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.kept import load_run
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


# ------------------------------------------------------------------ crafted kept policies

RUN = "language__qlearning__seed0"


def _policy(folder: Path) -> Path:
    return folder / "runs" / RUN / "policy_final.safetensors"


def _rewrite(path: Path, header: dict[str, Any] | None = None, metadata: str | None = None,
             **extra: Any) -> None:
    """``path`` written again with ``header`` keys changed (or the raw ``metadata``) and
    ``extra`` tensors added."""
    import json

    from safetensors import safe_open
    from safetensors.torch import save

    with safe_open(str(path), framework="pt") as handle:
        text = handle.metadata()["langadapt-agent"]
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118
    if header is not None:
        text = json.dumps({**json.loads(text), **header})
    path.write_bytes(save({**tensors, **extra},
                          metadata={"langadapt-agent": metadata if metadata is not None
                                    else text}))


def _evaluate_fails(capsys, folder: Path, tmp_path: Path, *names: str) -> str:
    code, _, err = run_cli(capsys, "evaluate", str(folder), "--out", str(tmp_path / "x"))
    assert code != 0
    assert len(err.strip().splitlines()) == 1, err
    for name in names:
        assert name in err, err
    return err


def test_a_policy_file_declaring_a_huge_tensor_is_refused_before_it_is_read(
        trained, tmp_path, user, capsys):
    import json
    import struct

    folder = _received(trained, tmp_path)
    policy = _policy(folder)
    from safetensors import safe_open
    with safe_open(str(policy), framework="pt") as handle:
        metadata = handle.metadata()
    gib = 1 << 30
    header = json.dumps({"__metadata__": metadata, "extra": {
        "dtype": "F32", "shape": [gib // 4], "data_offsets": [0, gib]}}).encode()
    with open(policy, "wb") as handle:  # sparse: a few bytes on disk, 1 GiB declared
        handle.write(struct.pack("<Q", len(header)) + header)
        handle.truncate(8 + len(header) + gib)
    _evaluate_fails(capsys, folder, tmp_path, str(policy), "bytes", "at most")


@pytest.mark.parametrize(("change", "field"), [
    ({"metadata": "[" * 100_000 + "]" * 100_000}, "nested"),
    ({"header": {"obs_shape": 5}}, "obs_shape=5"),
    ({"header": {"kind": ["qlearning"]}}, "kind="),
    ({"header": {"state": "rng"}}, "state="),
    ({"metadata": '{"format": "langadapt-agent", "version": 2, "kind": "qlearning", '
                  '"state": {}, "steps": Infinity}'}, "Infinity"),
    ({"metadata": '{"format": "langadapt-agent", "version": 2, "kind": "qlearning", '
                  '"state": {}, "steps": 1e999}'}, "1e999"),
    ({"metadata": '{"format": "langadapt-agent", "version": 2, "kind": "qlearning", '
                  '"state": {}, "steps": ' + "9" * 5000 + "}"}, "2**128"),
])
def test_a_crafted_policy_header_is_one_line_naming_the_file_and_field(
        trained, tmp_path, user, capsys, change, field):
    folder = _received(trained, tmp_path)
    _rewrite(_policy(folder), **change)
    _evaluate_fails(capsys, folder, tmp_path, str(_policy(folder)), field)


def test_a_tensor_of_an_unsupported_type_is_one_line_naming_it(trained, tmp_path, user,
                                                               capsys):
    import torch

    folder = _received(trained, tmp_path)
    _rewrite(_policy(folder), odd=torch.zeros(4, dtype=torch.float8_e4m3fn))
    _evaluate_fails(capsys, folder, tmp_path, str(_policy(folder)), "'odd'", "F8")


@pytest.mark.parametrize(("settings", "tensors", "named"), [
    ({"normalise": "centre"}, {"observation.mean": (5,)}, "observation.mean"),
    ({"normalise": "whiten"}, {"observation.mean": (384,), "observation.matrix": (3, 3)},
     "observation.matrix"),
    ({"normalise": "centre"}, {}, "has none"),
    ({}, {"observation.mean": (384,)}, "holds one"),
    ({"normalise": "centre"}, {"observation.mean": (384,), "big": 1e300}, "1e15"),
])
def test_a_saved_normaliser_that_does_not_fit_the_adapter_is_one_line(
        trained, tmp_path, user, capsys, settings, tensors, named):
    import torch

    folder = _received(trained, tmp_path, {"type": "language", "settings": settings})
    big = tensors.pop("big", 0.0)
    extra = {name: torch.full(shape, big, dtype=torch.float64) for name, shape in
             tensors.items()}
    _rewrite(_policy(folder), **extra)
    _evaluate_fails(capsys, folder, tmp_path, str(_policy(folder)), named)


def test_a_stray_run_folder_is_one_line_and_the_other_runs_are_evaluated(
        trained, tmp_path, user, capsys):
    folder = _received(trained, tmp_path)
    stray = folder / "runs" / "language__dqn__seed7"
    stray.mkdir()
    (stray / "policy_final.safetensors").write_bytes(_policy(folder).read_bytes())
    code, out, err = run_cli(capsys, "evaluate", str(folder), "--out", str(tmp_path / "x"))
    assert code == 0, err
    assert f"{stray}: not a run of" in out
    assert (tmp_path / "x" / "runs" / RUN / "done.json").is_file()
    for command in (["evaluate", str(stray), "--out", str(tmp_path / "y")],
                    ["play", str(stray), "--out", str(tmp_path / "y.gif")]):
        code, _, err = run_cli(capsys, *command)
        assert code != 0 and len(err.strip().splitlines()) == 1, err
        assert f"{stray} is not a run of" in err


# ------------------------------------------------------------------ sentence sets

SENTENCE_SET = """\
name: small_set
environment: {id: langadapt/Maze-v0, params: {maze: umaze}}
adapters: [{type: language, settings: {embedding: sentence_set, max_sentences: 2}}]
agents: [{type: dqn, params: {learning_starts: 10}}]
training: {episodes: 2}
seeds: [0]
evaluation: {every: 2, episodes: 1, final_episodes: 1}
"""


def test_a_sentence_set_too_small_for_the_describer_is_one_line_at_check_and_run(
        tmp_path, capsys, monkeypatch):
    from langadapt.experiments import one_run

    experiment = tmp_path / "small_set.yaml"
    experiment.write_text(SENTENCE_SET + f"cache_dir: {tmp_path / 'cache'}\n")
    code, _, err = run_cli(capsys, "run", str(experiment), "--check")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "adapters.0 (language).settings.max_sentences" in err and "max_sentences=2" in err
    # a state past the first (which the check sees) overflowing: one line from the run too
    monkeypatch.setattr(one_run, "check_set_size", lambda *args: None)
    code, _, err = run_cli(capsys, "run", str(experiment), "--out", str(tmp_path / "out"),
                           "--no-progress")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "max_sentences=2" in err and "Traceback" not in err


# ------------------------------------------------------------------ links out of the folder

def test_a_policy_file_or_config_yaml_that_links_out_of_the_folder_is_refused(
        trained, tmp_path, user, capsys):
    folder = _received(trained, tmp_path)
    secret = tmp_path / "credentials"
    secret.write_text("aws_secret_access_key: hunter2-not-yaml: [\n")
    outside = tmp_path / "outside.safetensors"
    outside.write_bytes(_policy(folder).read_bytes())
    _policy(folder).unlink()
    _policy(folder).symlink_to(outside)
    run = folder / "runs" / RUN
    for command in (["evaluate", str(folder), "--out", str(tmp_path / "x")],
                    ["evaluate", str(run), "--out", str(tmp_path / "x")],
                    ["play", str(run), "--out", str(tmp_path / "p.gif")]):
        code, _, err = run_cli(capsys, *command)
        assert code != 0 and len(err.strip().splitlines()) == 1, err
        assert "policy_final.safetensors is a symbolic link" in err, err
        assert not (tmp_path / "x").exists()  # refused before anything is written
    _policy(folder).unlink()
    _policy(folder).write_bytes(outside.read_bytes())
    (folder / "config.yaml").unlink()
    (folder / "config.yaml").symlink_to(secret)
    for command in (["evaluate", str(folder), "--out", str(tmp_path / "x")],
                    ["play", str(run), "--out", str(tmp_path / "p.gif")]):
        code, out, err = run_cli(capsys, *command)
        assert code != 0 and len(err.strip().splitlines()) == 1, err
        assert "config.yaml is a symbolic link" in err
        assert "hunter2" not in out + err
    with pytest.raises(ValueError, match="config.yaml is a symbolic link"):
        load_run(run)


@pytest.mark.parametrize(("change", "named"), [
    (lambda t: t.to(torch.int64), "dtype torch.int64"),
    (lambda t: t.to(torch.bool), "dtype torch.bool"),
    (lambda t: torch.full_like(t, 3e38), "beyond"),
])
def test_a_saved_network_of_other_dtypes_or_overflowing_weights_is_refused(
        tmp_path, change, named):
    from gymnasium import spaces
    from safetensors import safe_open
    from safetensors.torch import save

    from langadapt import agents

    space = spaces.Box(-1, 1, (4,), dtype="float32")
    agent = agents.make_agent("dqn", space, spaces.Discrete(3), seed=0)
    path = tmp_path / "dqn.safetensors"
    agent.save(path)
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata()
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118
    name = next(n for n, t in tensors.items() if t.is_floating_point() and t.dim() == 2)
    tensors[name] = change(tensors[name])
    path.write_bytes(save(tensors, metadata=metadata))
    fresh = agents.make_agent("dqn", space, spaces.Discrete(3), seed=0)
    with pytest.raises(ValueError, match=rf"dqn.safetensors: tensor '{name}' .*{named}"):
        fresh.load(path)


@pytest.mark.parametrize("assignment", ["seeds=[3, 4]", "training.episodes=9",
                                        "logging.checkpoint_every_steps=5"])
def test_evaluate_refuses_a_set_it_cannot_apply_in_one_line(trained, tmp_path, user, capsys,
                                                           assignment):
    folder = _received(trained, tmp_path)
    code, _, err = run_cli(capsys, "evaluate", str(folder), "--out", str(tmp_path / "x"),
                           "--set", assignment)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"--set {assignment}: evaluate cannot apply {assignment.split('.')[0].split('=')[0]}" \
        in err
    assert not (tmp_path / "x").exists()


def test_q_table_keys_that_can_never_match_are_refused(trained, tmp_path, user, capsys):
    from safetensors import safe_open
    from safetensors.torch import save

    folder = _received(trained, tmp_path)
    with safe_open(str(_policy(folder)), framework="pt") as handle:
        metadata = handle.metadata()
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118
    assert tensors["keys"].shape[1] == 16  # keyed by descriptions: 16-byte digests
    tensors["keys"] = tensors["keys"][:, :8].contiguous()
    _policy(folder).write_bytes(save(tensors, metadata=metadata))
    _evaluate_fails(capsys, folder, tmp_path, str(_policy(folder)), "'keys' has rows of 8 bytes",
                    "16 bytes")


# ------------------------------------------------------------------ the held-out level

LAKES = {
    "name": "lakes",
    "environment": {"id": "langadapt/FrozenLakeMaps-v0", "params": {
        "size": 4, "frozen_probability": 0.8, "is_slippery": False, "max_steps": 20,
        "train_maps": [0, 50], "held_out_maps": [100000, 100020]}},
    "adapters": [{"type": "raw"}],
    "agents": [{"type": "qlearning"}],
    "training": {"episodes": 60},
    "seeds": [0],
    "evaluation": {"every": 30, "episodes": 2, "final_episodes": 20,
                   "environment_params": {"split": "held_out"}},
}


def _final_rows(folder: Path) -> list[tuple[str, str, str]]:
    import csv

    with open(folder / "episodes.csv", newline="") as handle:
        return [(r["return"], r["length"], r["success"]) for r in csv.DictReader(handle)
                if r["phase"] == "final"]


def test_evaluate_plays_the_held_out_level_and_flags_a_set_that_makes_it_the_training_one(
        tmp_path, user, capsys, monkeypatch):
    from langadapt import agents

    config = experiment_from_dict({**LAKES, "cache_dir": str(tmp_path / "cache")})
    folder = run_experiment(config, tmp_path / "lakes", progress=False, log=lambda _: None)
    played: list[str] = []
    real = agents.evaluate

    def spy(agent, env, *args, **kwargs):
        played.append(env.unwrapped.split)
        return real(agent, env, *args, **kwargs)

    monkeypatch.setattr(agents, "evaluate", spy)
    code, out, err = run_cli(capsys, "evaluate", str(folder), "--out", str(tmp_path / "x"))
    assert code == 0, err
    assert played == ["held_out"]  # the lakes the run's final evaluation played
    assert _final_rows(tmp_path / "x") == _final_rows(folder)
    code, out, err = run_cli(capsys, "evaluate", str(folder), "--out", str(tmp_path / "y"),
                             "--set", "evaluation.environment_params={}")
    assert code == 0, err
    assert played == ["held_out", "train"]
    flag = "evaluation.environment_params"
    assert flag in out and "training level" in out
    assert flag in (tmp_path / "y" / "summary.md").read_text()


def test_a_tensor_the_agent_does_not_hold_is_refused_naming_it(trained, tmp_path, user,
                                                               capsys):
    folder = _received(trained, tmp_path)
    _rewrite(_policy(folder), extra=torch.zeros(3))
    _evaluate_fails(capsys, folder, tmp_path, str(_policy(folder)), "'extra'",
                    "not one a qlearning agent holds")
