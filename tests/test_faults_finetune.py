"""``finetune-export`` on adapters it cannot merge faithfully or through planted links: one
line naming the file, the setting or the tensor, exit code 2, nothing written or lost."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from experiment_fixtures import one_line_error as _main


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

