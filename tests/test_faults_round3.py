"""The third red team's defects (issue 32) outside the LLM transport layer, each as the case
that failed: ``--force`` on someone else's folder, a YAML alias bomb, ``finetune-export``
through a planted link and on adapters it cannot merge faithfully, the BabyAI oracle's
silent failures and unbounded memo, and bounds the experiment file promised but did not
check. Every case ends in one line naming the value, exit code 2, nothing lost."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest
import yaml
from experiment_fixtures import QUIET, raw_config

from langadapt.experiments import cli
from langadapt.experiments.config import MAX_YAML_VALUES, ConfigError, experiment_from_dict
from langadapt.experiments.runner import check_results, run_experiment


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _main(capsys, *args: str, lines: int = 1) -> tuple[int, str]:
    """The command's exit code and its error: ``lines`` lines (an invalid experiment file is
    its name, then one line per bad key), no traceback."""
    capsys.readouterr()
    code = cli.main(list(args))
    err = capsys.readouterr().err
    assert err.count("\n") == lines and "Traceback" not in err, err  # (a bar ends in \r)
    return code, err.rsplit("\r", 1)[-1]


# ----------------------------------------------------------------------------- row 1: --force


def _someone_elses(folder: Path) -> dict[str, bytes]:
    """A folder of another tool's files, named like ours (the red team's case)."""
    (folder / "runs" / "tb").mkdir(parents=True)
    (folder / "runs" / "tb" / "events.out").write_bytes(b"their tensorboard events")
    (folder / "config.yaml").write_text("model: resnet50\nlr: 0.1\n")
    (folder / "summary.md").write_text("# their summary\n")
    return _snapshot(folder)


def test_force_never_empties_a_folder_whose_config_yaml_is_not_an_experiment(tmp_path, capsys):
    theirs = tmp_path / "theirs"
    before = _someone_elses(theirs)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(raw_config(tmp_path)))
    code, err = _main(capsys, "run", str(path), "--out", str(theirs), "--no-progress")
    assert code == 2 and "not a langadapt results folder" in err
    assert "--force" not in err  # never suggest deleting someone else's files
    code, err = _main(capsys, "run", str(path), "--out", str(theirs), "--force", "--no-progress")
    assert code == 2 and str(theirs) in err and "not a langadapt results folder" in err
    assert _snapshot(theirs) == before


def test_force_removes_only_what_the_runner_wrote(tmp_path):
    config = experiment_from_dict(raw_config(tmp_path))
    out = run_experiment(config, **QUIET)
    assert (out / ".langadapt-results").is_file()
    (out / "runs" / "tb").mkdir()
    (out / "runs" / "tb" / "events.out").write_bytes(b"mine")
    (out / "notes.md").write_text("mine too")
    (out / "runs" / "old__run__seed9").mkdir()  # a run of an earlier experiment: ours
    (out / "config.yaml").write_text("not: [an experiment any more\n")  # the marker decides
    run_experiment(config, force=True, **QUIET)
    assert (out / "runs" / "tb" / "events.out").read_bytes() == b"mine"
    assert (out / "notes.md").read_text() == "mine too"
    assert not (out / "runs" / "old__run__seed9").exists()
    assert check_results(out) == {}


# ----------------------------------------------------------------------------- row 2: aliases


def _alias_bomb(path: Path, levels: int = 9) -> None:
    lines = ["name: bomb", "environment:", "  id: langadapt/Maze-v0", "  params:",
             "    a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"    a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]"
              for i in range(1, levels)]
    lines += ["adapters: [{type: raw}]", "agents: [{type: random}]", "training: {episodes: 2}"]
    path.write_text("\n".join(lines) + "\n")


def test_a_yaml_alias_bomb_is_one_line_before_it_expands(tmp_path, capsys):
    path = tmp_path / "bomb.yaml"
    _alias_bomb(path)
    assert path.stat().st_size < 700
    code, err = _main(capsys, "run", str(path), "--check")
    assert code == 2 and str(path) in err and f"{MAX_YAML_VALUES:,}" in err and "aliases" in err
    recursive = tmp_path / "loop.yaml"
    recursive.write_text("name: loop\nenvironment: &e {id: langadapt/Maze-v0, params: {x: *e}}\n")
    code, err = _main(capsys, "run", str(recursive), "--check")
    assert code == 2 and "recursive YAML alias" in err
    deep = tmp_path / "deep.yaml"
    deep.write_text("name: " + "[" * 100_000 + "]" * 100_000 + "\n")
    code, err = _main(capsys, "run", str(deep), "--check")
    assert code == 2 and str(deep) in err
    many = tmp_path / "many.yaml"  # no alias, but more values than the cap: not composed
    many.write_text("name: many\ndescription: [" + ", ".join(["1"] * 100_001) + "]\n")
    code, err = _main(capsys, "run", str(many), "--check")
    assert code == 2 and f"more than {MAX_YAML_VALUES:,} values" in err
    huge = tmp_path / "huge.yaml"
    huge.write_text("name: huge\ndescription: " + "x" * 5_000_000 + "\n")
    code, err = _main(capsys, "run", str(huge), "--check")
    assert code == 2 and "5,000,025 bytes; expected an experiment file of at most 4,000,000" in err


def test_a_few_aliases_still_load(tmp_path):
    path = tmp_path / "shared.yaml"
    path.write_text(
        "name: shared\nenvironment: {id: langadapt/Maze-v0}\nadapters: [{type: raw}]\n"
        "agents:\n  - {type: qlearning, label: a, params: &p {alpha: 0.3}}\n"
        "  - {type: qlearning, label: b, params: *p}\ntraining: {episodes: 2}\n")
    from langadapt.experiments.config import load_config

    assert [a.params for a in load_config(path).agents] == [{"alpha": 0.3}] * 2


# ----------------------------------------------------------------------------- rows 7-9: export


@pytest.fixture()
def bare_adapter(tmp_path):
    """A LoRA adapter directory (config and safetensors weights) for the checks that come
    before the model is loaded."""
    pytest.importorskip("peft")
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["q_proj"]}))
    layer = "base_model.model.model.layers.0.self_attn.q_proj"
    save_file({f"{layer}.lora_A.weight": torch.zeros(2, 576),
               f"{layer}.lora_B.weight": torch.zeros(576, 2)},
              str(folder / "adapter_model.safetensors"))
    return folder


@pytest.fixture()
def cheap_export(monkeypatch):
    """export_gguf with the model, the merge and the GGUF writer replaced by stand-ins that
    write a few bytes: what is left to test is where and how the file is written."""
    from langadapt.finetune import export as export_module

    def write(source, merged, changed, path, dtype):
        Path(path).write_bytes(b"GGUF the export")
        if merged == "fail":
            raise ValueError("disk full (simulated)")

    merged = ["ok"]
    monkeypatch.setattr(export_module, "load_causal_lm", lambda *a, **k: (None, None, None))
    monkeypatch.setattr(export_module, "_merge", lambda *a, **k: (merged[0], set()))
    monkeypatch.setattr(export_module, "_write_gguf", write)
    monkeypatch.setattr(export_module, "check_gguf", lambda path: None)
    return merged


def test_export_never_writes_through_a_planted_partial_link(bare_adapter, cheap_export,
                                                            tmp_path, capsys):
    from langadapt.finetune import export_gguf

    out = tmp_path / "exp" / "model.gguf"
    out.parent.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("years of work")
    (out.parent / "model.gguf.partial").symlink_to(victim)
    assert export_gguf(bare_adapter, out) == out
    assert victim.read_text() == "years of work"
    assert out.read_bytes() == b"GGUF the export" and not out.is_symlink()
    # an existing file is kept without --force, one line from the command
    code, err = _main(capsys, "finetune-export", str(bare_adapter), "--out", str(out))
    assert code == 2 and f"{str(out)!r} exists" in err and "--force" in err
    cheap_export[0] = "fail"  # a failure with --force leaves the earlier file, no temp file
    with pytest.raises(ValueError, match="simulated"):
        export_gguf(bare_adapter, out, force=True)
    assert out.read_bytes() == b"GGUF the export"
    assert sorted(p.name for p in out.parent.iterdir()) == ["model.gguf", "model.gguf.partial"]
    cheap_export[0] = "ok"
    out.unlink()
    out.symlink_to(victim)  # --force replaces a link at OUT itself, not what it points to
    export_gguf(bare_adapter, out, force=True)
    assert victim.read_text() == "years of work" and not out.is_symlink()


@pytest.mark.parametrize(("change", "expected"), [
    ({"layer_replication": [[0, 4], [2, 6]]}, r"has layer_replication=\[\[0, 4\], \[2, 6\]\]"),
    ({"use_dora": True}, "has use_dora=True"),
    ({"target_parameters": ["mlp.experts.gate_up_proj"]}, "has target_parameters="),
    ({"some_future_option": 1}, "has some_future_option=1"),
    ({"r": {"nested": {"deeper": 1}}}, r"r=\{'nested'"),
    ({"target_modules": [["q_proj"]]}, r"target_modules=\[\['q_proj'\]\]"),
])
def test_export_refuses_adapter_configs_that_are_not_plain_lora(bare_adapter, capsys, change,
                                                               expected):
    config = json.loads((bare_adapter / "adapter_config.json").read_text())
    (bare_adapter / "adapter_config.json").write_text(json.dumps({**config, **change}))
    code, err = _main(capsys, "finetune-export", str(bare_adapter), "--out",
                      str(bare_adapter.parent / "x.gguf"))
    assert code == 2 and re.search(expected, err), err
    assert not list(bare_adapter.parent.glob("*gguf*"))


def test_export_refuses_bad_adapter_files_in_one_line(bare_adapter, capsys):
    import torch
    from safetensors.torch import save_file

    out = str(bare_adapter.parent / "x.gguf")
    config = bare_adapter / "adapter_config.json"
    kept = config.read_text()
    config.write_text("[" * 100_000 + "]" * 100_000)
    code, err = _main(capsys, "finetune-export", str(bare_adapter), "--out", out)
    assert code == 2 and "nested too deeply" in err
    config.write_text(kept)
    weights = bare_adapter / "adapter_model.safetensors"
    save_file({f"../../../etc/x{i}": torch.zeros(1) for i in range(1000)}, str(weights))
    code, err = _main(capsys, "finetune-export", str(bare_adapter), "--out", out)
    assert code == 2 and "1000 tensors that are not LoRA weights" in err and "../../../etc/x" in err
    weights.unlink()
    (bare_adapter / "adapter_model.bin").write_bytes(b"\x80\x04cos\nsystem\n.")  # a pickle
    code, err = _main(capsys, "finetune-export", str(bare_adapter), "--out", out)
    assert code == 2 and "adapter_model.bin, a pickle, is never loaded" in err
    assert not list(bare_adapter.parent.glob("*gguf*"))


def test_export_refuses_non_finite_merged_weights_naming_the_tensor(tmp_path, capsys):
    pytest.importorskip("peft")
    pytest.importorskip("gguf")
    torch = pytest.importorskip("torch")
    from langadapt.environments import MazeEnv, language_for
    from langadapt.finetune import LoRAPolicy

    policy = LoRAPolicy(language_for(MazeEnv(maze="umaze")), progress=False)
    with torch.no_grad():
        for name, param in policy.lm.named_parameters():
            if "lora_" in name:
                param.fill_(1e30)  # B @ A overflows float32
    adapter = policy.save_adapter(tmp_path / "adapter")
    del policy
    code, err = _main(capsys, "finetune-export", str(adapter), "--out", str(tmp_path / "x.gguf"),
                      "--dtype", "f32")
    assert code == 2 and re.search(r"tensor 'blk\.\d+\.attn_\w+\.weight' \(model\.layers\.\d+\."
                                   r"self_attn\.\w+\.weight\) holds non-finite weights", err), err
    assert not list(tmp_path.glob("*gguf*"))


# ----------------------------------------------------------------------------- row 10: the bot


@pytest.fixture()
def bot_oracle():
    pytest.importorskip("minigrid")
    from langadapt.environments.minigrid import make_minigrid
    from langadapt.roles import oracle_for

    env = make_minigrid("BabyAI-GoToObj-v0")
    _, info = env.reset(seed=0)
    return env, oracle_for(env), info


def test_a_bot_that_raises_inside_the_oracle_is_counted_and_warned(bot_oracle):
    env, oracle, info = bot_oracle

    class Broken(oracle._bot_class):
        def replan(self, action_taken=None):
            raise AssertionError("the bot lost its plan (simulated)")

    oracle._bot_class = Broken
    with pytest.warns(RuntimeWarning, match=r"oracle on BabyAI-GoToObj-v0: BabyAI's bot raised "
                      r"AssertionError: the bot lost its plan \(simulated\) \(episode 1, step 0\)"):
        env.reset(seed=1)
    assert oracle.bot_failures == 2 and "simulated" in oracle.last_bot_error
    assert oracle.potential(env) == -1.0 and oracle.best_move(env, info["legal_moves"]) == 0
    env.step(2)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        oracle.best_move(env, info["legal_moves"])  # the bot fails again: counted, not warned
    assert oracle.bot_failures > 2 and not seen


def test_the_bot_oracles_plan_memo_is_bounded(bot_oracle):
    from langadapt.roles.minigrid_oracle import PLAN_MEMO_SIZE

    env, oracle, _ = bot_oracle
    assert oracle.plan_memo_size == PLAN_MEMO_SIZE
    oracle.plan_memo_size = 5
    rng = __import__("random").Random(0)
    for _ in range(60):
        oracle.potential(env)
        _, _, terminated, truncated, _ = env.step(rng.choice([0, 1, 2]))
        if terminated or truncated:
            env.reset(seed=rng.randrange(100))
    assert len(oracle._plans) == 5  # a 60-step walk asks about more than 5 states
    first = oracle.potential(env)
    assert oracle.potential(env) == first and next(reversed(oracle._plans)) is not None


# ----------------------------------------------------------------------------- smaller faults


def test_instruction_counts_are_bounded_when_the_file_is_checked(tmp_path, capsys):
    data = raw_config(tmp_path)
    data["environment"]["instructions"] = {"instruction": "reach the goal",
                                           "exploration_episodes": 10**12}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    code, err = _main(capsys, "run", str(path), "--check", lines=2)
    assert code == 2 and "environment.instructions.exploration_episodes: Input should be less " \
        "than or equal to 100000, got 1000000000000" in err


def test_a_cache_dir_that_is_a_file_is_one_line(tmp_path, capsys):
    from langadapt.experiments.config import AdapterSpec
    from langadapt.experiments.one_run import adapter_settings

    a_file = tmp_path / "cache"
    a_file.write_text("not a folder")
    for cache_dir in (a_file, a_file / "below"):
        path = tmp_path / "exp.yaml"
        path.write_text(yaml.safe_dump(raw_config(tmp_path, cache_dir=str(cache_dir))))
        code, err = _main(capsys, "run", str(path), "--check", lines=2)
        assert code == 2 and f"cache_dir: {str(cache_dir)!r}" in err and "is a file" in err
    with pytest.raises(ConfigError, match=r"cache_dir '.*cache' is a file"):  # made a file later
        adapter_settings(AdapterSpec(type="language"), str(a_file))
    assert a_file.read_text() == "not a folder" and not (tmp_path / "out").exists()


@pytest.mark.parametrize("steps", [1.5, 0, True])
def test_minigrid_max_steps_is_validated_naming_the_key(tmp_path, capsys, steps):
    pytest.importorskip("minigrid")
    data = raw_config(tmp_path, agents=[{"type": "random"}],
                      environment={"id": "MiniGrid-DoorKey-5x5-v0",
                                   "params": {"max_steps": steps}})
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    code, err = _main(capsys, "run", str(path), "--no-progress")
    assert code == 2 and f"environment.params: max_steps={steps!r}: expected a whole number" in err
    assert not (tmp_path / "out").exists()
