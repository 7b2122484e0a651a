"""Files langadapt reads back are data, never code (issue 22, rows 1 and 13).

A GRPO run folder with a crafted ``grpo/checkpoint/trainer.pt`` whose pickle calls
a function used to run it on resume (``torch.load(weights_only=False)``); a truncated
checkpoint was a ``PytorchStreamReader`` traceback. Now both are one ValueError naming the
file, and nothing in the file runs. A scan of the package source keeps every reader safe.
"""

from __future__ import annotations

import ast
import re
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from experiment_fixtures import QUIET, raw_config
from experiment_fixtures import one_line_error as _main
from experiment_fixtures import write_yaml as _write

from langadapt.experiments import cli
from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.runner import run_experiment

torch = pytest.importorskip("torch")

from langadapt.environments.maze import MazeEnv  # noqa: E402
from langadapt.finetune.grpo import GRPOTrainer, MazeTask, read_checkpoint  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("adapters", "agents", "environments", "experiments", "finetune", "llm", "roles")


class _Payload:
    """Unpickling this calls ``open(marker, "w")``: creates the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


class _FakePolicy:
    """What GRPOTrainer needs to checkpoint and resume, without a language model."""

    def __init__(self, n_actions: int) -> None:
        self.spec = SimpleNamespace(n_actions=n_actions)
        self.weight = torch.nn.Parameter(torch.zeros(3))

    def trainable_parameters(self):
        return [self.weight]

    def adapter_state(self):
        return {"weight": self.weight.detach().clone()}

    def load_adapter_state(self, state):
        with torch.no_grad():
            self.weight.copy_(state["weight"])


def _trainer(out: Path | None, seed: int = 0) -> GRPOTrainer:
    env = MazeEnv(maze="umaze")
    return GRPOTrainer(_FakePolicy(env.action_space.n), MazeTask(env), {"steps": 3},
                       out=out, seed=seed)


def _crafted(folder: Path, marker: Path) -> Path:
    path = folder / "checkpoint" / "trainer.pt"
    path.parent.mkdir(parents=True)
    torch.save({"step": 1, "settings": {}, "payload": _Payload(marker)}, path)
    return path


def _one_line(error: pytest.ExceptionInfo) -> str:
    text = str(error.value)
    assert "\n" not in text, text
    return text


# ------------------------------------------------------------- row 1: a crafted checkpoint
def test_a_crafted_checkpoint_is_refused_on_resume_and_never_runs(tmp_path):
    marker = tmp_path / "MARKER"
    path = _crafted(tmp_path, marker)
    with pytest.raises(ValueError) as error:
        _trainer(path.parent.parent)  # resumes from <out>/checkpoint/trainer.pt
    text = _one_line(error)
    assert str(path) in text and "refused" in text and "delete it or the folder" in text
    assert not marker.exists()


def test_a_grpo_run_refuses_a_crafted_checkpoint_before_loading_a_model(tmp_path, capsys):
    from langadapt.experiments.cli import main
    from langadapt.experiments.config import load_config
    from langadapt.experiments.folders import prepare_output

    marker = tmp_path / "MARKER"
    out = tmp_path / "results"
    config = tmp_path / "tiny.yaml"
    # the embedded model: the checkpoint is judged before any model is loaded
    config.write_text(yaml.safe_dump({
        "name": "tiny", "seeds": [0], "environment": {"id": "langadapt/Maze-v0"},
        "adapters": [{"type": "raw"}], "agents": [{"type": "grpo"}],
        "training": {"episodes": 1}, "cache_dir": ""}))
    prepare_output(load_config(config), out, resume=False, force=False)
    path = _crafted(out / "runs" / "raw__grpo__seed0" / "grpo", marker)  # an unfinished run
    capsys.readouterr()
    assert main(["run", str(config), "--out", str(out), "--resume", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert str(path) in err and "refused" in err
    assert not marker.exists()


# ------------------------------------------------------------- row 13: a damaged checkpoint
def test_a_checkpoint_round_trips_as_data_only(tmp_path):
    first = _trainer(tmp_path, seed=4)
    first.policy.weight.grad = torch.ones(3)
    first.optimizer.step()  # AdamW state: tensors and plain numbers
    first.step_index, first.task.met = 2, {(1, 1), (3, 1)}
    first.checkpoint()
    state = read_checkpoint(tmp_path / "checkpoint" / "trainer.pt")  # weights_only=True
    assert state["step"] == 2 and state["optimizer"]["state"]
    resumed = _trainer(tmp_path, seed=4)
    assert resumed.step_index == 2 and resumed.task.met == {(1, 1), (3, 1)}
    assert torch.equal(resumed.policy.weight, first.policy.weight)
    assert resumed.rng.bit_generator.state == first.rng.bit_generator.state


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage", "not a checkpoint"])
def test_a_damaged_checkpoint_is_one_error_naming_the_file(tmp_path, damage):
    _trainer(tmp_path).checkpoint()
    path = tmp_path / "checkpoint" / "trainer.pt"
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "garbage":
        path.write_bytes(b"hello, not a checkpoint" * 10)
    else:
        torch.save({"step": 1}, path)
    with pytest.raises(ValueError) as error:
        _trainer(tmp_path)
    text = _one_line(error)
    assert str(path) in text and "delete it or the folder to start afresh" in text
    if damage in ("truncated", "empty"):
        assert "damaged or truncated" in text


# ------------------------------------------------------------- the package source
def _sources() -> list[Path]:
    files = [ROOT / "__init__.py"]
    for package in PACKAGES:
        files += sorted((ROOT / package).rglob("*.py"))
    assert len(files) > 20
    return files


def _unsafe_calls(tree: ast.AST) -> list[tuple[int, str]]:
    """Calls that could run code from a file: torch.load without weights_only=True,
    numpy.load(allow_pickle=True), yaml.load / unsafe_load / full_load, trust_remote_code."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        owner = getattr(func.value, "id", "") if isinstance(func, ast.Attribute) else ""
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        is_true = {k for k, v in keywords.items()
                   if isinstance(v, ast.Constant) and v.value is True}.__contains__

        if owner == "torch" and name == "load" and not is_true("weights_only"):
            found.append((node.lineno, "torch.load without weights_only=True"))
        if owner in ("np", "numpy") and name == "load" and "allow_pickle" in keywords \
                and not (isinstance(keywords["allow_pickle"], ast.Constant)
                         and keywords["allow_pickle"].value is False):
            found.append((node.lineno, "numpy.load(allow_pickle=...)"))
        if owner == "yaml" and name in ("load", "unsafe_load", "full_load", "load_all"):
            found.append((node.lineno, f"yaml.{name} (use yaml.safe_load)"))
        if is_true("trust_remote_code"):
            found.append((node.lineno, "trust_remote_code=True"))
    return found


def test_the_package_never_reads_a_file_as_code():
    text_rules = [
        (re.compile(r"weights_only\s*=\s*False"), "weights_only=False"),
        (re.compile(r"\b(c?pickle|cloudpickle|dill|joblib)\.loads?\s*\("), "pickle load"),
        (re.compile(r"from\s+(c?pickle|cloudpickle|dill)\s+import\s+[^\n]*\bloads?\b"),
         "pickle load import"),
    ]
    hits = []
    for path in _sources():
        source = path.read_text(encoding="utf-8")
        for pattern, what in text_rules:
            for match in pattern.finditer(source):
                line = source.count("\n", 0, match.start()) + 1
                hits.append(f"{path.relative_to(ROOT)}:{line}: {what}")
        for line, what in _unsafe_calls(ast.parse(source, filename=str(path))):
            hits.append(f"{path.relative_to(ROOT)}:{line}: {what}")
    assert not hits, "\n".join(hits)


def test_the_source_scan_catches_what_it_looks_for():
    bad = ("torch.load(p, weights_only=False)\ntorch.load(p)\nnp.load(p, allow_pickle=True)\n"
           "yaml.load(s)\nAutoModel.from_pretrained(p, trust_remote_code=True)\n"
           "torch.load(p, weights_only=True)\nyaml.safe_load(s)\n")
    assert [line for line, _ in _unsafe_calls(ast.parse(bad))] == [1, 2, 3, 4, 5]


# ------------------------------------------------ issue 32: what an experiment file may send
_OPENAI_EXPERIMENT = """
name: t
environment: {id: langadapt/CartPole-v0, params: {max_steps: 20}}
adapters: [{type: raw}]
agents:
  - type: llm_policy
    params: {backend: {backend: openai, base_url: "BASE", model: m, api_key_env: NAME}}
training: {steps: 10}
seeds: 1
evaluation: {every: 5, episodes: 1, final_episodes: 1}
"""


@pytest.mark.parametrize(("base_url", "name", "key", "named"), [
    ("http://127.0.0.1:9/v1", "AWS_SECRET_ACCESS_KEY", "sk-good", "_API_KEY or _API_TOKEN"),
    ("http://u:sk-SECRETX@127.0.0.1:9/v1", "OPENAI_API_KEY", "sk-good", "api_key_env names"),
    ("http://127.0.0.1:9/v1", "OPENAI_API_KEY", "sk-SECRETX\x01\n", "OPENAI_API_KEY"),
])
def test_check_refuses_what_would_send_or_store_a_secret(
        tmp_path, monkeypatch, capsys, base_url, name, key, named):
    from langadapt.experiments import cli

    monkeypatch.setenv("OPENAI_API_KEY", key)
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "e.yaml"
    path.write_text(_OPENAI_EXPERIMENT.replace("BASE", base_url).replace("NAME", name))
    assert cli.main(["run", str(path), "--check"]) == 2
    err = capsys.readouterr().err
    assert "agents.0.params.backend" in err and named in err and "SECRETX" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.yaml"]  # nothing written


# ------------------------------------------------------------------------ a received results folder


@pytest.fixture()
def sent_folder(tmp_path, monkeypatch):
    """results/sent: a finished folder someone sent, with an evil.py its config.yaml imports
    (the red team's case); the working folder is tmp_path, as for a user in their project."""
    monkeypatch.chdir(tmp_path)
    config = experiment_from_dict(raw_config(tmp_path, output="results/sent"))
    out = run_experiment(config, **QUIET)
    (out / "evil.py").write_text('open("PWNED", "w").write("x")\n')
    data = yaml.safe_load((out / "config.yaml").read_text())
    data["imports"] = ["results.sent.evil"]
    _write(out / "config.yaml", data)
    return out


def test_reading_a_results_folder_never_imports_what_it_names(sent_folder, tmp_path, capsys):
    shutil.copytree(sent_folder, tmp_path / "results" / "other")
    assert cli.main(["report", "results/sent"]) == 0
    assert cli.main(["report", "results/sent", "results/other", "--out", "cmp"]) == 0
    code, err = _main(capsys, "run", "results/sent/config.yaml", "--resume", "--no-progress")
    assert code == 2 and "results.sent.evil" in err and "--import results.sent.evil" in err
    mine = _write(tmp_path / "mine.yaml", raw_config(tmp_path, output="results/sent"))
    code, err = _main(capsys, "run", str(mine), "--out", "results/sent", "--resume",
                      "--no-progress")
    assert code == 2 and "different experiment" in err
    code, err = _main(capsys, "run", "results/sent/config.yaml", "--check")
    assert code == 2 and "read as data" in err
    assert not (tmp_path / "PWNED").exists()


def test_a_results_folders_module_id_and_stdlib_import_are_data(sent_folder, tmp_path):
    data = yaml.safe_load((sent_folder / "config.yaml").read_text())
    data["imports"] = ["this"]  # a standard-library module that prints when imported
    data["environment"]["id"] = "results.sent.evil:Evil-v0"
    _write(sent_folder / "config.yaml", data)
    shutil.copytree(sent_folder, tmp_path / "results" / "other")
    assert cli.main(["report", "results/sent", "results/other", "--out", "cmp"]) == 0
    assert cli.main(["report", "results/sent"]) == 0
    assert not (tmp_path / "PWNED").exists() and "this" not in sys.modules


def test_resume_from_a_results_folders_file_imports_what_the_command_line_names(
        sent_folder, tmp_path, capsys):
    (sent_folder / "evil.py").write_text("MARK = 1\n")  # now the user trusts it
    code = cli.main(["run", "results/sent/config.yaml", "--resume", "--no-progress",
                     "--import", "results.sent.evil"])
    out = capsys.readouterr().out
    assert code == 0 and "a results folder's file; nothing it names is imported" in out


@pytest.mark.parametrize("planted", ["evil.py", "__init__.py"])
def test_a_received_folder_without_markers_never_runs_its_code(tmp_path, monkeypatch, capsys,
                                                               planted):
    # issue 52, 1: only config.yaml, summary.md and the code (no marker, episodes.csv, runs/)
    monkeypatch.chdir(tmp_path)
    sent = tmp_path / "results" / "sent4"
    sent.mkdir(parents=True)
    (sent / "evil.py").write_text("")
    (sent / planted).write_text('open("PWNED", "w").write("x")\n')
    (sent / "summary.md").write_text("# their summary\n")
    _write(sent / "config.yaml", raw_config(tmp_path, output="results/sent4",
                                            imports=["results.sent4.evil"]))
    code, err = _main(capsys, "report", "results/sent4")
    assert code == 2 and "config.yaml --resume" not in err and "YOUR_EXPERIMENT.yaml" in err
    for extra in (["--resume"], ["--check"], ["--force"]):
        code, err = _main(capsys, "run", "results/sent4/config.yaml", *extra, "--no-progress",
                          lines=2)
        assert code == 2 and "module 'results.sent4.evil' is " in err
        assert "inside the folder of the file that names it" in err
    data = raw_config(tmp_path, output="results/sent4",
                      environment={"id": "results.sent4.evil:Evil-v0"})
    _write(sent / "config.yaml", data)
    code, err = _main(capsys, "run", "results/sent4/config.yaml", "--resume", lines=2)
    assert code == 2 and "environment 'results.sent4.evil:Evil-v0': module " in err
    assert not (tmp_path / "PWNED").exists() and "results.sent4" not in sys.modules


def test_a_received_suite_without_task_markers_never_runs_its_code(tmp_path, monkeypatch,
                                                                    capsys):
    monkeypatch.chdir(tmp_path)
    sent = tmp_path / "results" / "ssent"
    (sent / "goto").mkdir(parents=True)
    (sent / "evil.py").write_text('open("PWNED", "w").write("x")\n')
    suite = raw_config(tmp_path, output="results/ssent", imports=["results.ssent.evil"],
                       tasks={"goto": {"maze": "umaze"}})
    _write(sent / "suite.yaml", suite)
    _write(sent / "goto" / "config.yaml", {**suite, "tasks": None})
    for extra in (["--resume"], ["--check"]):
        code, err = _main(capsys, "run", "results/ssent/suite.yaml", *extra, "--no-progress",
                          lines=2)
        assert code == 2 and "module 'results.ssent.evil' is " in err
    cli.main(["report", "results/ssent"])
    assert not (tmp_path / "PWNED").exists()


def test_a_users_file_imports_a_module_elsewhere_and_what_import_names(tmp_path, monkeypatch,
                                                                       capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine_52.py").write_text("MARK = 1\n")
    beside = _write(tmp_path / "exp.yaml", raw_config(tmp_path, imports=["mine_52"]))
    code, err = _main(capsys, "run", str(beside), "--check", lines=2)
    assert code == 2 and "pass --import mine_52 to import it" in err
    assert "mine_52" not in sys.modules
    assert cli.main(["run", str(beside), "--check", "--import", "mine_52"]) == 0
    sys.modules.pop("mine_52")
    (tmp_path / "experiments").mkdir()  # the file in a folder of its own: the module is elsewhere
    own = _write(tmp_path / "experiments" / "exp.yaml", raw_config(tmp_path, imports=["mine_52"]))
    assert cli.main(["run", str(own), "--check"]) == 0 and "mine_52" in sys.modules
    sys.modules.pop("mine_52")
