"""The ``langadapt`` command: the successful path of every cheap command, the packaged
experiment files (``run NAME``, ``run --list``), ``--version``, ``--no-progress``, and bad
arguments as one line naming the option (exit code 2), never a traceback.

Most commands run in this process through ``cli.main`` (fast); ``run`` and a few checks
go through the installed ``langadapt`` entry point in a subprocess, as a user runs them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from experiment_fixtures import run_cli
from fake_ollama import FakeOllama

from langadapt import __version__

ROOT = Path(__file__).resolve().parents[1]
LANGADAPT = Path(sys.executable).with_name("langadapt")
PACKAGED = sorted(p.stem for p in (ROOT / "configs").glob("*.yaml"))

TINY = """\
name: tiny
environment:
  id: langadapt/Maze-v0
  params: {maze: umaze}
adapters:
  - type: raw
  - type: language
agents:
  - type: qlearning
training: {episodes: 4}
seeds: 1
evaluation: {every: 2, episodes: 1, final_episodes: 1}
cache_dir: CACHE
"""


@pytest.fixture(autouse=True)
def _own_caches_and_bars(tmp_path, monkeypatch):
    """LLM answers and working files of every test stay in its tmp_path; the progress-bar
    switches ``--no-progress`` turns off in this process are turned back on."""
    monkeypatch.setenv("LANGADAPT_CACHE_DIR", str(tmp_path / "llm-cache"))
    monkeypatch.chdir(tmp_path)
    yield
    transformers_logging = sys.modules.get("transformers.utils.logging")
    if transformers_logging is not None and not transformers_logging.is_progress_bar_enabled():
        transformers_logging.enable_progress_bar()


def _tiny_file(tmp_path: Path, name: str = "tiny.yaml") -> Path:
    path = tmp_path / name
    path.write_text(TINY.replace("CACHE", str(tmp_path / "cache")), encoding="utf-8")
    return path


def _subprocess(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    assert LANGADAPT.exists(), "the langadapt command is not installed in this environment"
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    return subprocess.run([str(LANGADAPT), *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


_main = run_cli


def _no_bars(text: str) -> bool:
    return "it/s]" not in text and "%|" not in text


# ----------------------------------------------------------------------------- success


def test_version(capsys):
    code, out, _ = _main(capsys, "--version")
    assert code == 0 and out.strip() == f"langadapt {__version__}"


@pytest.mark.heavy
@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["run", "--help"]])
def test_the_command_line_starts_without_torch_or_the_language_models(argv):
    # a fresh interpreter: what `langadapt --version` and `--help` import, nothing else
    code = ("import sys; from langadapt.experiments.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "heavy = ('torch', 'transformers', 'sentence_transformers', 'scipy', 'matplotlib',"
            " 'jsonschema', 'ollama', 'langadapt.llm')\n"
            "loaded = {m.split('.')[0] for m in sys.modules} | set(sys.modules)\n"
            "print(sorted(loaded & set(heavy)))")
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_run_list_and_finetune_list_name_every_packaged_file_with_its_description(capsys):
    code, runs, _ = _main(capsys, "run", "--list")
    assert code == 0
    code, finetunes, _ = _main(capsys, "finetune", "--list")
    assert code == 0
    listed = {line.split()[0] for line in (runs + finetunes).splitlines()
              if line.startswith("  ")}
    assert listed == set(PACKAGED)
    assert "grpo_umaze" in finetunes and "grpo_umaze" in runs and "quickstart" not in finetunes
    quickstart = next(line for line in runs.splitlines() if line.split()[:1] == ["quickstart"])
    assert "random lakes never seen" in quickstart  # its description: line, on one line


def test_a_bare_name_is_the_packaged_file_and_an_existing_path_wins(tmp_path, capsys):
    for name in ("quickstart", "quickstart.yaml"):
        code, out, err = _main(capsys, "run", name, "--check")
        assert code == 0, err
        path = Path(out.split(": experiment", 1)[0])
        assert path.resolve() == (ROOT / "configs" / "quickstart.yaml").resolve()
        assert "experiment 'quickstart'" in out
    _tiny_file(tmp_path, "quickstart.yaml")  # a file of that name here is used as a path
    code, out, err = _main(capsys, "run", "quickstart.yaml", "--check", "--seeds", "2")
    assert code == 0, err
    assert out.startswith("quickstart.yaml: experiment 'tiny', 4 runs (2 adapters x 1 agents "
                          "x 2 seeds)")


def test_unknown_names_list_the_packaged_experiments(capsys):
    code, _, err = _main(capsys, "run", "nosuch")
    assert code == 2 and err.count("\n") == 1
    assert "'nosuch'" in err and "quickstart" in err and "grpo_umaze" in err
    code, out, err = _main(capsys, "finetune", "grpo_umaze", "--check")  # the alias of run
    assert code == 0 and "experiment 'grpo_umaze', 10 runs" in out, err
    code, _, err = _main(capsys, "run", "configs/nosuch/quickstart.yaml")
    assert code == 2 and "langadapt run quickstart" in err and err.count("\n") == 1


@pytest.mark.heavy
def test_run_report_and_prerender_a_tiny_experiment(tmp_path, capsys):
    path, out = _tiny_file(tmp_path), tmp_path / "results"
    done = _subprocess("run", str(path), "--out", str(out), "--no-progress", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "done in" in done.stdout and _no_bars(done.stderr), done.stderr
    summary = out / "summary.md"
    summary.unlink()
    code, _, err = _main(capsys, "report", str(out))
    assert code == 0 and summary.is_file(), err
    code, text, err = _main(capsys, "prerender", str(path), "--no-progress")
    assert code == 0, err
    assert text.startswith("language: ") and _no_bars(err), err


def test_describe_given_states(capsys):
    code, out, err = _main(capsys, "describe", "maze", "--maze", "umaze", "--state", "1,1",
                           "--state", "3 3")
    assert code == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("state [1.0, 1.0]: ")


def test_prompt_against_an_ollama_protocol_server(capsys):
    with FakeOllama(models=["llama3.2"]) as fake:
        code, out, err = _main(capsys, "prompt", "maze", "--maze", "umaze", "--state", "1,1",
                               "--backend", "ollama", "--host", fake.host, "--model", "llama3.2")
        assert code == 0, err
        assert fake.chat_requests >= 1
    assert "[system]" in out and "[reply]\nreply 1: '{\"action\": " in out
    assert "\n-> action " in out


def _tiny_llama(folder: Path) -> Path:
    """A 2-layer Llama with random weights and a word-level tokenizer (digits, JSON)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = ["[UNK]", "<|im_start|>", "<|im_end|>", "{", "}", '"', ":", "action",
             *(str(d) for d in range(10))]
    core = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)},
                                      unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="[UNK]", eos_token="<|im_end|>",
        bos_token="<|im_start|>", pad_token="<|im_end|>")
    tokenizer.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(words), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_finetune_a_tiny_model_without_progress_bars(tmp_path, capsys):
    pytest.importorskip("transformers", reason="langadapt finetune needs langadapt[finetune]")
    pytest.importorskip("peft", reason="langadapt finetune needs langadapt[finetune]")
    import yaml

    model = _tiny_llama(tmp_path / "tiny_llama")
    config = {
        "name": "tiny", "environment": {"id": "langadapt/Maze-v0",
                                        "params": {"maze": "umaze", "max_steps": 6}},
        "adapters": [{"type": "raw"}], "training": {"episodes": 1}, "seeds": [0],
        "agents": [{"type": "grpo", "params": {"model": str(model), "lora": {"r": 2},
                                               "steps": 1, "group_size": 2}}],
        "evaluation": {"final_episodes": 1}, "cache_dir": "",
    }
    path = tmp_path / "tiny_grpo.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    out = tmp_path / "finetuned"
    code, text, err = _main(capsys, "finetune", str(path), "--out", str(out), "--no-progress")
    assert code == 0, err
    assert (out / "summary.md").is_file() and "done in" in text
    assert _no_bars(err) and "Loading weights" not in err, err


# ----------------------------------------------------------------------------- bad arguments

BAD_ARGUMENTS = [
    (("describe", "maze", "--maze", "nosuch"), "--maze 'nosuch'"),
    (("describe", "maze", "--state", "99,99"), "--state '99,99'"),
    (("describe", "maze", "--state", "nan,1"), "--state 'nan,1'"),
    (("describe", "maze", "--state", "0,0"), "--state '0,0'"),  # a wall
    (("describe", "maze", "--seed", "-1"), "--seed -1"),
    (("describe", "maze", "--adapter", "llm", "--model", "/nonexistent.gguf"),
     "model '/nonexistent.gguf'"),
    (("describe", "maze", "--adapter", "llm", "--model", " "), "--model ' '"),
    (("describe", "maze", "--adapter", "llm", "--model", ""), "--model ''"),
    (("describe", "maze", "--adapter", "llm", "--backend", "ollama", "--host",
      "http://127.0.0.1:99999"), "--host 'http://127.0.0.1:99999'"),
    (("prompt", "maze", "--maze", "nosuch"), "--maze 'nosuch'"),
    (("prompt", "maze", "--state", "99,99"), "--state '99,99'"),
    (("prompt", "maze", "--state", "nan,1"), "--state 'nan,1'"),
    (("prompt", "maze", "--model", "/nonexistent.gguf"), "model '/nonexistent.gguf'"),
    (("prompt", "maze", "--model", " "), "--model ' '"),
    (("prompt", "maze", "--model", ""), "--model ''"),
    (("prompt", "maze", "--backend", "ollama", "--host", "http://127.0.0.1:99999"),
     "--host 'http://127.0.0.1:99999'"),
    (("prompt", "maze", "--host", "http://127.0.0.1:11434"), "--host"),  # llamacpp: no host
    (("run",), "FILE is required"),
    (("finetune",), "FILE is required"),  # the alias of run
    (("describe", "maze", "--steps", "x"), "--steps"),  # argparse's own errors: one line too
]


@pytest.mark.parametrize(("args", "named"), BAD_ARGUMENTS, ids=[" ".join(a) for a, _ in
                                                                 BAD_ARGUMENTS])
def test_a_bad_argument_is_one_line_naming_it(args, named, capsys):
    code, out, err = _main(capsys, *args)
    assert code == 2 and not out
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"langadapt {args[0]}: error: ") and named in err, err


@pytest.mark.heavy
def test_a_bad_argument_exits_2_from_the_installed_command(tmp_path):
    done = _subprocess("prompt", "maze", "--model", "", cwd=tmp_path)
    assert done.returncode == 2 and not done.stdout
    assert done.stderr.count("\n") == 1 and "--model ''" in done.stderr, done.stderr
