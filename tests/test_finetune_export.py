"""`export_gguf` / ``langadapt finetune-export``: a LoRA policy on the embedded SmolLM2 merged
into one GGUF file that llama.cpp runs.

- an untrained adapter (B = 0) exported in F32 gives back exactly the dequantised base
  weights and the base file's metadata;
- a perturbed adapter (its LoRA B matrices drawn with a fixed seed, so that it changes
  greedy decisions) exported in F16 and F32: ``llm_policy`` on ``backend: llamacpp`` with
  the exported file takes the adapter policy's greedy action (`LoRAPolicy.greedy`, the
  transformers scores) in every state of a fixed list (all umaze cells, some double-T
  cells); every cell of both mazes in the slow test;
- bad input is one ValueError naming the value, one line from the command, and a failed
  export leaves an earlier file as it was.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("llama_cpp")
gguf = pytest.importorskip("gguf")

import torch  # noqa: E402

from langadapt.environments import MazeEnv, language_for  # noqa: E402
from langadapt.experiments.cli import main  # noqa: E402
from langadapt.finetune import LoRAPolicy, MazeTask, export_gguf  # noqa: E402
from langadapt.llm import decide, default_gguf_path, llamacpp  # noqa: E402
from langadapt.roles.llm_policy import LLMPolicy  # noqa: E402

#: The perturbation of the LoRA B matrices: N(0, SIGMA^2), torch seed SEED. It changes the
#: greedy action in 6 of the 26 umaze/double-T cells with more than one legal move, with a
#: margin of at least 0.064 in log-probability between the best two actions.
SIGMA, SEED = 0.15, 0
#: double-T cells of the fast test: the first two change their greedy action.
DOUBLE_T_CELLS = [(1, 3), (5, 9), (1, 2), (3, 3)]
MAZES = ("umaze", "double_t_maze")


@pytest.fixture(scope="module")
def one_thread():
    """Torch on one thread (two spin against each other on a shared CPU), restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def exported(tmp_path_factory, one_thread):
    """The untrained and the perturbed adapter, and the perturbed one exported in F16 (by
    the command) and F32 (by the function). The .gguf files (0.8 GB) are removed after."""
    folder = tmp_path_factory.mktemp("export")
    policy = LoRAPolicy(language_for(MazeEnv(maze="umaze")), progress=False)
    zero = policy.save_adapter(folder / "zero")
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, param in policy.lm.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * SIGMA)
    adapter = policy.save_adapter(folder / "adapter")
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        assert main(["finetune-export", str(adapter), "--out", str(folder / "f16.gguf")]) == 0
    assert shown.getvalue().startswith(f"wrote {folder / 'f16.gguf'} (")
    assert shown.getvalue().splitlines()[1] == (
        "trained on verbose prompts: act with llm_policy prompt_style: verbose")
    files = {"f16": folder / "f16.gguf",
             "f32": export_gguf(adapter, folder / "f32.gguf", dtype="f32")}
    yield {"policy": policy, "zero": zero, "adapter": adapter, "files": files,
           "folder": folder, "policies": {"umaze": policy}}
    with llamacpp._MODELS_LOCK:  # free this module's llama.cpp models, not other tests'
        for key in [k for k in llamacpp._MODELS if Path(k[0]).parent == folder.resolve()]:
            llamacpp._MODELS.pop(key)[0].close()
    for file in folder.glob("*.gguf"):
        file.unlink()


@pytest.fixture(scope="module")
def base_gguf():
    """The embedded SmolLM2 GGUF file, read."""
    return gguf.GGUFReader(default_gguf_path())


def _policy_for(exported, maze: str) -> LoRAPolicy:
    """The adapter policy with the maze's language spec (double-T: the saved adapter)."""
    policies = exported["policies"]
    if maze not in policies:
        policies[maze] = LoRAPolicy(language_for(MazeEnv(maze=maze)), progress=False,
                                    adapter=exported["adapter"])
    return policies[maze]


def _agent(file: Path, env: MazeEnv) -> LLMPolicy:
    agent = LLMPolicy(env.observation_space, env.action_space, {"backend": {
        "backend": "llamacpp", "model": str(file), "temperature": 0.0, "cache_path": None}})
    agent.bind(env)
    assert agent.config.decoding == "structured"
    return agent


def _compare(exported, maze: str, cells: list | None, dtypes: tuple[str, ...]
             ) -> tuple[list[str], int]:
    """``(disagreements, changed)``: every state where llm_policy on an exported file does not
    take the adapter policy's greedy action, with both sides' log-probabilities (to tell a
    near-tie from a bug), and in how many states the adapter's greedy action differs from
    the base model's."""
    env = MazeEnv(maze=maze)
    cells = MazeTask(env).cells if cells is None else cells
    policy = _policy_for(exported, maze)
    agents = {dtype: _agent(exported["files"][dtype], env) for dtype in dtypes}
    problems, changed = [], 0
    for cell in cells:
        state, legal = env.observation_of(cell), tuple(env.legal_moves_at(cell))
        want = policy.greedy(state, legal)
        with torch.no_grad():
            base = policy.log_probs([(state, legal)], reference=True)[0]
        changed += legal[int(base.argmax())] != want
        for dtype, agent in agents.items():
            got = agent.act(state, legal, explore=False)
            if got != want:
                with torch.no_grad():
                    ours = np.round(policy.log_probs([(state, legal)])[0].numpy(), 4)
                decision = decide(agent.backend, agent.messages(state, legal),
                                  agent.parser.schema(legal))
                theirs = [round(float(np.log(decision.probability({"action": a}))), 4)
                          for a in legal]
                problems.append(f"{maze} {cell} {dtype}: adapter {want}, llama.cpp {got}; legal "
                                f"{legal}, log-probs adapter {ours.tolist()}, llama.cpp {theirs}")
    for agent in agents.values():
        assert agent.stats()["llm_fallbacks"] == 0 and agent.stats()["parse_failures"] == 0
    return problems, changed


# ------------------------------------------------------------------ round trip
def test_an_untrained_adapter_exports_the_dequantised_base_exactly(exported, base_gguf):
    out = export_gguf(exported["zero"], exported["folder"] / "zero.gguf", dtype="f32")
    base, new = base_gguf, gguf.GGUFReader(out)
    stored = {t.name: t for t in base.tensors}
    assert [t.name for t in new.tensors] == list(stored)
    for tensor in new.tensors:
        source = stored[tensor.name]
        assert tensor.tensor_type == gguf.GGMLQuantizationType.F32
        assert np.array_equal(tensor.data, gguf.dequantize(source.data, source.tensor_type)), \
            tensor.name
    names = [k for k in base.fields if not k.startswith("GGUF.")]
    assert [k for k in new.fields if not k.startswith("GGUF.")] == names
    changed = [k for k in names if new.fields[k].contents() != base.fields[k].contents()]
    assert changed == ["general.file_type"] and new.fields[changed[0]].contents() == 0
    assert not list(exported["folder"].glob("*.partial"))


def test_the_f16_export_rounds_the_weights_once(exported, base_gguf):
    """Tensors no adapter layer touches (token embedding, norms) are the dequantised base:
    rounded to float16 (matrices) or kept in float32 (1-D); the adapted ones are F16."""
    base = {t.name: t for t in base_gguf.tensors}
    new = gguf.GGUFReader(exported["files"]["f16"])
    assert new.fields["general.file_type"].contents() == 1
    for tensor in new.tensors:
        source = base[tensor.name]
        if tensor.name == "token_embd.weight" or "norm" in tensor.name:
            plain = gguf.dequantize(source.data, source.tensor_type)
            want = plain.astype(np.float16) if plain.ndim == 2 else plain
            assert np.array_equal(tensor.data, want), tensor.name
        else:
            assert tensor.tensor_type == gguf.GGMLQuantizationType.F16, tensor.name


# ------------------------------------------------------------------ acting
def test_llama_cpp_on_the_export_acts_like_the_adapter(exported):
    """F16 (the default) on every umaze cell and four double-T cells, F32 on the umaze cells
    (llama.cpp runs F32 at a third of F16's speed here; every cell: the slow test)."""
    problems, changed = _compare(exported, "umaze", None, ("f16", "f32"))
    more, more_changed = _compare(exported, "double_t_maze", DOUBLE_T_CELLS, ("f16",))
    assert changed + more_changed >= 2  # the adapter changes decisions: the test can fail
    assert not problems + more, "\n".join(problems + more)


@pytest.mark.slow
def test_llama_cpp_on_the_export_acts_like_the_adapter_in_every_cell(exported):
    found = [_compare(exported, maze, None, ("f16", "f32")) for maze in MAZES]
    assert sum(changed for _, changed in found) >= 2
    problems = [p for maze_problems, _ in found for p in maze_problems]
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------ bad input
def test_bad_input_is_one_value_error_naming_it(tmp_path):
    with pytest.raises(ValueError, match=r"adapter '.*nowhere' has no adapter_config.json"):
        export_gguf(tmp_path / "nowhere", tmp_path / "out.gguf")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))
    with pytest.raises(ValueError, match=r"out '.*model.bin' does not end in .gguf"):
        export_gguf(adapter, tmp_path / "model.bin")
    with pytest.raises(ValueError, match=r"dtype='bf16': expected one of f16, f32"):
        export_gguf(adapter, tmp_path / "out.gguf", dtype="bf16")
    with pytest.raises(ValueError, match="is the base model file itself"):
        export_gguf(adapter, default_gguf_path())
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    (hf_dir / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="is a Hugging Face directory; only GGUF-based models"):
        export_gguf(adapter, tmp_path / "out.gguf", model=hf_dir)
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "IA3"}))
    with pytest.raises(ValueError, match="is peft_type 'IA3'; only LoRA adapters"):
        export_gguf(adapter, tmp_path / "out.gguf")
    (adapter / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "modules_to_save": ["lm_head"]}))
    with pytest.raises(ValueError, match=r"has modules_to_save=\['lm_head'\]"):
        export_gguf(adapter, tmp_path / "out.gguf")
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))
    (adapter / "policy.json").write_text(json.dumps({"model": "other.gguf",
                                                     "model_identity": "sha256:" + "0" * 64}))
    with pytest.raises(ValueError, match=r"on other.gguf \(sha256:0000.*as model \(--model"):
        export_gguf(adapter, tmp_path / "out.gguf")
    assert not list(tmp_path.glob("*.gguf*"))


def test_the_command_prints_one_line_for_bad_input(tmp_path, capsys):
    code = main(["finetune-export", str(tmp_path / "nowhere"), "--out", str(tmp_path / "a.gguf")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("langadapt finetune-export: error: adapter ") and "nowhere" in err
    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))
    code = main(["finetune-export", str(tmp_path), "--out", str(tmp_path / "a.txt")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "a.txt' does not end in .gguf" in err
    with pytest.raises(SystemExit) as stop:
        main(["finetune-export", str(tmp_path), "--out", "a.gguf", "--dtype", "q4"])
    assert stop.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_a_failed_export_keeps_the_earlier_file(exported, monkeypatch):
    from langadapt.finetune import export as export_module

    out = exported["folder"] / "kept.gguf"
    out.write_bytes(b"an earlier export")
    real, calls = export_module._to_gguf_layout, []

    def fail_midway(*args, **kwargs):
        calls.append(1)
        if len(calls) == 100:
            raise ValueError("disk full (simulated)")
        return real(*args, **kwargs)

    monkeypatch.setattr(export_module, "_to_gguf_layout", fail_midway)
    with pytest.raises(ValueError, match="kept.gguf' exists; expected a new .gguf path"):
        export_gguf(exported["zero"], out)  # not replaced without force
    with pytest.raises(ValueError, match="simulated"):
        export_gguf(exported["zero"], out, force=True)
    assert out.read_bytes() == b"an earlier export" and len(calls) == 100
    assert not list(out.parent.glob(".kept.gguf.*"))  # the temporary file is removed
