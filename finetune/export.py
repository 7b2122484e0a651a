""":func:`export_gguf`: a trained LoRA policy merged into its GGUF base and written as one GGUF
model llama.cpp runs (F16/F32; metadata copied, transformers' tensor renaming and llama q/k
permutation inverted and checked; written atomically beside ``OUT``). Bad input is one
ValueError naming the value. See docs/finetune.md (export)."""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..errors import one_line
from ..llm.gguf_check import check_gguf
from ..llm.transformers_backend import (
    load_causal_lm,
    model_identity,
    require_finetune,
    resolve_model_source,
)
from ..roles.llm_policy import adapter_info
from .hf_model import no_loading_bars
from .policy import lora_adapter_dir

__all__ = ["EXPORT_DTYPES", "export_gguf"]

#: The types the weight matrices can be written in.
EXPORT_DTYPES: tuple[str, ...] = ("f16", "f32")
_PEFT_PREFIX = "base_model.model."
_WEIGHTS = "adapter_model.safetensors"

#: ``adapter_config.json`` keys of a plain LoRA adapter: LoRA matrices on existing linear
#: layers, merged as ``W + scale * B @ A``. Any other key set to a value other than
#: null/false/empty (``layer_replication``, ``use_dora``, ``target_parameters``,
#: ``alora_invocation_tokens``, ``megatron_config``, a key of a newer peft, ...) changes the
#: model's structure or what merging means, and is refused naming it.
PLAIN_LORA_KEYS = frozenset({
    "peft_type", "task_type", "auto_mapping", "peft_version", "base_model_name_or_path",
    "revision", "inference_mode", "r", "target_modules", "exclude_modules", "lora_alpha",
    "lora_dropout", "fan_in_fan_out", "bias", "use_rslora", "modules_to_save",
    "init_lora_weights", "layers_to_transform", "layers_pattern", "rank_pattern",
    "alpha_pattern", "megatron_core", "loftq_config", "eva_config", "corda_config",
    "lora_ga_config", "runtime_config", "lora_bias", "ensure_weight_tying",
    "qalora_group_size", "trainable_token_indices",
})
#: A tensor name of a peft LoRA weights file: ``base_model.model.<layer>.lora_A.weight``.
_LORA_TENSOR = re.compile(r"base_model\.model\.[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*"
                          r"\.lora_(A\.weight|B\.weight|B\.bias)")


def export_gguf(adapter: str | os.PathLike[str], out: str | os.PathLike[str],
                model: str | os.PathLike[str] | None = None,
                dtype: Literal["f16", "f32"] = "f16", force: bool = False) -> Path:
    """Write the GGUF ``model`` (None: embedded SmolLM2) with ``adapter`` merged to ``out`` (a
    ``.gguf`` path, replaced only with ``force``) in ``dtype`` f16 or f32; return its path."""
    require_finetune()
    adapter_dir = lora_adapter_dir(adapter)
    out_path = _out_path(out)
    if dtype not in EXPORT_DTYPES:
        raise ValueError(f"dtype={dtype!r}: expected one of {', '.join(EXPORT_DTYPES)}")
    source = resolve_model_source(model)
    if source.is_dir():
        raise ValueError(
            f"model {str(source)!r} is a Hugging Face directory; only GGUF-based models can be "
            "exported, because the export copies the base GGUF file's metadata (tokenizer, "
            "chat template, architecture)")
    if out_path.resolve() == source.resolve():
        raise ValueError(f"out {str(out_path)!r} is the base model file itself; expected "
                         "another .gguf path")
    if (out_path.exists() or out_path.is_symlink()) and not force:
        raise ValueError(f"out {str(out_path)!r} exists; expected a new .gguf path, or pass "
                         "--force (force=True) to replace it")
    config = _lora_config(adapter_dir)
    _check_trained_on(adapter_dir, source)
    tensors = _lora_tensors(adapter_dir)

    with no_loading_bars():  # the CLI's error stays one line
        lm, _, _ = load_causal_lm(source, fresh=True)
    merged, changed = _merge(lm, adapter_dir, config, source, tensors)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    partial = _new_file(out_path)
    try:
        _write_gguf(source, merged, changed, partial, dtype)
        check_gguf(partial)
        os.replace(partial, out_path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return out_path


# ------------------------------------------------------------------ checks
def _out_path(out: Any) -> Path:
    if not isinstance(out, (str, os.PathLike)) or not os.fspath(out).strip():
        raise ValueError(f"out={out!r}: expected the path of a .gguf file to write")
    path = Path(out).expanduser()
    if path.suffix.lower() != ".gguf":
        raise ValueError(f"out {str(path)!r} does not end in .gguf; expected the path of a "
                         ".gguf file to write")
    if path.is_dir():
        raise ValueError(f"out {str(path)!r} is a directory; expected the path of a .gguf file")
    return path


def _new_file(out: Path) -> Path:
    """A new empty file of a random name beside ``out`` (``.NAME.<random>.partial``),
    created exclusively: never an existing file, never through a symbolic link."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    while True:
        path = out.with_name(f".{out.name}.{secrets.token_hex(8)}.partial")
        try:
            os.close(os.open(path, flags, 0o666))
        except FileExistsError:
            continue
        return path


def _lora_config(adapter_dir: Path) -> dict[str, Any]:
    """The adapter's ``adapter_config.json``, refused unless it is a plain LoRA adapter
    (the only weights it changes are its target layers' own)."""
    file = adapter_dir / "adapter_config.json"
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"adapter config {str(file)!r} cannot be read: {error}") from None
    except RecursionError:
        raise ValueError(f"adapter config {str(file)!r} is nested too deeply; expected a JSON "
                         "object of peft LoRA settings") from None
    if not isinstance(config, dict):
        raise ValueError(f"adapter config {str(file)!r} holds a {type(config).__name__}; "
                         "expected a JSON object of peft LoRA settings")
    if config.get("peft_type") != "LORA":
        kind = _brief(config.get("peft_type"))
        raise ValueError(f"adapter {str(adapter_dir)!r} is peft_type {kind}; only LoRA "
                         "adapters (peft_type 'LORA') can be exported")
    for key, value in config.items():
        if key not in PLAIN_LORA_KEYS and value not in (None, False, [], {}, ""):
            raise ValueError(
                f"adapter {str(adapter_dir)!r} has {key}={_brief(value)}: an option that is not "
                "plain LoRA on the model's existing weights (it changes the model's structure "
                "or what merging means); only plain LoRA adapters can be exported")
    for key, kind in (("r", int), ("lora_alpha", (int, float))):
        value = config.get(key, 8)
        if isinstance(value, bool) or not isinstance(value, kind) or value <= 0:
            raise ValueError(f"adapter config {str(file)!r}: {key}={_brief(value)}; expected a "
                             "positive number")
    targets = config.get("target_modules")
    if not (targets is None or isinstance(targets, str)
            or (isinstance(targets, list) and all(isinstance(t, str) for t in targets))):
        raise ValueError(f"adapter config {str(file)!r}: target_modules={_brief(targets)}; "
                         "expected a layer name or a list of layer names")
    for key in ("modules_to_save", "trainable_token_indices"):
        if config.get(key):
            raise ValueError(f"adapter {str(adapter_dir)!r} has {key}={config[key]!r}; only "
                             "LoRA weights on linear layers can be exported")
    if config.get("bias", "none") != "none":
        raise ValueError(f"adapter {str(adapter_dir)!r} has bias={_brief(config['bias'])}; only "
                         "adapters with bias 'none' can be exported")
    return config


def _brief(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _lora_tensors(adapter_dir: Path) -> set[str]:
    """The tensor names of ``adapter_model.safetensors``, each a LoRA weight of a layer
    (``base_model.model.<layer>.lora_A.weight``); a pickled ``adapter_model.bin`` is never
    loaded."""
    from safetensors import SafetensorError, safe_open

    file = adapter_dir / _WEIGHTS
    if not file.is_file():
        pickled = " (its adapter_model.bin, a pickle, is never loaded)" \
            if (adapter_dir / "adapter_model.bin").exists() else ""
        raise ValueError(f"adapter {str(adapter_dir)!r} has no {_WEIGHTS}{pickled}; expected "
                         "a LoRA adapter saved by a grpo agent (safetensors)")
    try:
        with safe_open(file, framework="pt") as weights:
            names = set(weights.keys())
    except (OSError, SafetensorError) as error:
        raise ValueError(f"adapter weights {str(file)!r} cannot be read: {error}") from None
    junk = sorted(name for name in names if not _LORA_TENSOR.fullmatch(name))
    if junk:
        raise ValueError(f"adapter weights {str(file)!r} hold {len(junk)} tensors that are not "
                         f"LoRA weights of a layer, e.g. {_brief(junk[0])}; expected only "
                         "base_model.model.<layer>.lora_A.weight / lora_B.weight")
    if not names:
        raise ValueError(f"adapter weights {str(file)!r} hold no tensors; expected LoRA weights")
    return names


def _check_trained_on(adapter_dir: Path, source: Path) -> None:
    """ValueError when ``policy.json`` says the adapter was trained on another model."""
    info = adapter_info(adapter_dir)
    trained_on = None if info is None else info.get("model_identity")
    if not isinstance(trained_on, str) or not trained_on.startswith("sha256:"):
        return
    base = model_identity(source)
    if trained_on != base:
        where = info.get("model") or "the embedded SmolLM2"
        raise ValueError(
            f"adapter {str(adapter_dir)!r} was trained on {where!s} ({trained_on[:23]}..., "
            f"policy.json), not on {source.name!r} ({base[:23]}...); pass the GGUF file it "
            "was trained on as model (--model)")


# ------------------------------------------------------------------ merging
def _merge(lm: Any, adapter_dir: Path, config: dict[str, Any], source: Path,
           tensors: set[str]) -> tuple[Any, set[str]]:
    """The model with the adapter merged in, and the names of the parameters the merge
    changed (the weights of the layers the adapter wraps, and their biases with
    ``lora_bias``). ``tensors``: the names in the weights file, which must be exactly the
    adapter's."""
    import torch
    from peft import PeftModel, get_peft_model_state_dict
    from peft.tuners.lora import LoraLayer

    try:
        peft_model = PeftModel.from_pretrained(lm, adapter_dir)
    except (ValueError, RuntimeError, KeyError, TypeError, AttributeError) as error:
        first = one_line(error)
        raise ValueError(f"adapter {str(adapter_dir)!r} does not fit the model "
                         f"{source.name!r}: {first[:300]}") from None
    expected = set(get_peft_model_state_dict(peft_model))
    for what, names in (("are not LoRA weights of", tensors - expected),
                        ("are missing for", expected - tensors)):
        if names:
            raise ValueError(f"adapter weights {str(adapter_dir / _WEIGHTS)!r}: {len(names)} "
                             f"tensors {what} the adapter's layers on {source.name!r}, e.g. "
                             f"{_brief(sorted(names)[0])}")
    changed: set[str] = set()
    for name, module in peft_model.named_modules():
        if isinstance(module, LoraLayer):
            base_name = name.removeprefix(_PEFT_PREFIX)
            changed.add(f"{base_name}.weight")
            if config.get("lora_bias") and getattr(module.get_base_layer(), "bias", None) \
                    is not None:
                changed.add(f"{base_name}.bias")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 210 small products: 0.4 s on 1 thread, 6 s on 2 of a busy CPU
    try:
        merged = peft_model.merge_and_unload()
    finally:
        torch.set_num_threads(threads)
    merged.eval()
    names = set(merged.state_dict())
    unknown = sorted(changed - names)
    if unknown:  # pragma: no cover - peft names its wrapped layers after the base's
        raise ValueError(f"merged adapter layers {unknown[:3]} are not parameters of the model")
    return merged, changed


# ------------------------------------------------------------------ writing
def _processor(arch: str, merged: Any) -> Any:
    """transformers' GGUF tensor processor for ``arch`` (the transform whose inverse is
    applied here); ValueError for one this module cannot invert."""
    from transformers.modeling_gguf_pytorch_utils import (
        TENSOR_PROCESSORS,
        LlamaTensorProcessor,
        TensorProcessor,
    )

    cls = TENSOR_PROCESSORS.get(arch, TensorProcessor)
    if cls not in (TensorProcessor, LlamaTensorProcessor):
        raise ValueError(
            f"GGUF architecture {arch!r}: transformers loads its tensors with {cls.__name__}, "
            "whose transform the export cannot invert; only architectures loaded as stored "
            "or with the llama q/k permutation can be exported")
    return cls(config=merged.config.to_dict())


def _to_gguf_layout(weights: np.ndarray, gguf_name: str, processor: Any) -> np.ndarray:
    """``weights`` (transformers' layout) in the GGUF file's layout: the inverse of
    ``processor.process`` (for llama, the q/k row permutation of llama.cpp's converter),
    checked by applying the processor again."""
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    out = weights
    if isinstance(processor, LlamaTensorProcessor) and (".attn_q." in gguf_name
                                                        or ".attn_k." in gguf_name):
        heads = processor.config.get("num_attention_heads")
        kv_heads = processor.config.get("num_key_value_heads")
        if heads is not None and kv_heads is not None:
            n_head = heads if ".attn_q." in gguf_name else kv_heads
            dim = weights.shape[0] // n_head // 2
            out = (weights.reshape(n_head, 2, dim, *weights.shape[1:])
                   .swapaxes(1, 2).reshape(weights.shape))
    back = processor.process(weights=np.array(out), name=gguf_name)
    if back.name != gguf_name or not np.array_equal(back.weights, weights):
        raise ValueError(f"tensor {gguf_name!r}: transformers' GGUF transform of the "
                         "rewritten tensor does not give back the merged weight; cannot export")
    return np.ascontiguousarray(out)


def _names(arch: str, merged: Any, processor: Any, state: dict[str, Any]) -> dict[str, str]:
    """``{gguf tensor name: transformers parameter name}`` as transformers' loader maps them
    (`get_gguf_hf_weights_map`) for the model's own parameter names, with gguf's name table
    built once instead of once per module."""
    import gguf

    kinds = [kind for kind, name in gguf.MODEL_ARCH_NAMES.items() if name == arch]
    if not kinds:
        return {}
    table = gguf.get_tensor_name_map(kinds[0], merged.config.num_hidden_layers)
    out: dict[str, str] = {}
    for hf_name in state:
        name, suffix = processor.preprocess_name(hf_name), ""
        if name.endswith((".weight", ".bias")):
            name, suffix = name.rsplit(".", 1)
            suffix = "." + suffix
        gguf_name = table.get_name(name)
        if gguf_name is not None:
            out[gguf_name + suffix] = hf_name
    return out


def _write_gguf(source: Path, merged: Any, changed: set[str], path: Path, dtype: str) -> None:
    import gguf
    from transformers.modeling_gguf_pytorch_utils import get_gguf_hf_weights_map

    reader = gguf.GGUFReader(source)
    arch = str(reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    processor = _processor(arch, merged)
    state = merged.state_dict()
    stored = {t.name for t in reader.tensors}
    gguf_to_hf = _names(arch, merged, processor, state)
    if not stored <= set(gguf_to_hf):  # transformers' full search (a second per 100 modules)
        gguf_to_hf = get_gguf_hf_weights_map(merged, processor)
    missing = sorted(changed - {hf for name, hf in gguf_to_hf.items() if name in stored})
    if missing:
        raise ValueError(
            f"the adapter changes {missing[:3]}, which has no tensor of its own in "
            f"{source.name!r} (a tied weight?); only adapters on the model's own stored "
            "weights can be exported")
    for name, hf_name in gguf_to_hf.items():
        if name in stored and hf_name in changed and not bool(state[hf_name].isfinite().all()):
            raise ValueError(
                f"tensor {name!r} ({hf_name}) holds non-finite weights (inf or NaN) after "
                "merging the adapter; expected finite LoRA weights (the adapter's lora_A/lora_B "
                "or lora_alpha overflow): nothing was written")

    file_type = gguf.LlamaFileType.MOSTLY_F16 if dtype == "f16" else gguf.LlamaFileType.ALL_F32
    writer = gguf.GGUFWriter(path, arch, endianess=reader.endianess)
    writer.data_alignment = reader.alignment
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # the writer writes these itself
        if field.name == gguf.Keys.General.FILE_TYPE:
            writer.add_key_value(field.name, int(file_type), gguf.GGUFValueType.UINT32)
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    if gguf.Keys.General.FILE_TYPE not in reader.fields:
        writer.add_file_type(int(file_type))

    def rewritten(tensor: Any) -> str | None:
        """The model parameter a GGUF tensor is rewritten from (None: copied as stored)."""
        hf_name = gguf_to_hf.get(tensor.name)
        return hf_name if hf_name in state else None

    def target(hf_name: str) -> type:
        return np.float16 if dtype == "f16" and state[hf_name].dim() >= 2 else np.float32

    for tensor in reader.tensors:
        hf_name = rewritten(tensor)
        if hf_name is None:
            writer.add_tensor_info(tensor.name, tensor.data.shape, tensor.data.dtype,
                                   tensor.data.nbytes, tensor.tensor_type)
            continue
        weight = state[hf_name]
        shape = tuple(int(n) for n in reversed(tensor.shape))
        if tuple(weight.shape) != shape:
            raise ValueError(f"tensor {tensor.name!r} has shape {shape} in {source.name!r}, "
                             f"the model's {hf_name} {tuple(weight.shape)}")
        kind = np.dtype(target(hf_name))
        writer.add_tensor_info(tensor.name, shape, kind, weight.numel() * kind.itemsize)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    try:
        for tensor in reader.tensors:
            hf_name = rewritten(tensor)
            if hf_name is None:
                writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
                continue
            weights = state[hf_name].detach().to("cpu").float().numpy()
            data = _to_gguf_layout(weights, tensor.name, processor).astype(target(hf_name))
            if not np.isfinite(data).all() and np.isfinite(weights).all():
                raise ValueError(
                    f"tensor {tensor.name!r} has weights beyond float16's range (largest |w| "
                    f"{float(np.abs(weights).max()):.4g}); export with dtype='f32'")
            writer.write_tensor_data(data)
    finally:
        writer.close()
