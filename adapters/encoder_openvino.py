"""The OpenVINO backend of the sentence encoder: the model's pipeline, exported once per
model fingerprint under `export_root`. See docs/adapters.md.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..llm.cache import cache_root

__all__ = ["OpenVINOPipeline", "export_root", "load_openvino", "model_fingerprint"]

EXPORT_FORMAT = 1  # bumped when the exported graph changes shape (old exports not reused)

_INPUTS = ("input_ids", "token_type_ids", "attention_mask")

MIN_COSINE = 0.999  # every load encodes PROBE on both backends; below this: refused

PROBE = ["Mission: go to the red ball. You face north and carry nothing.",
         "You see a wall 2 steps left."]


def export_root() -> Path:
    return cache_root() / "encoders"


def model_fingerprint(model: Any) -> str:
    """SHA-256 (16 hex digits) of the model's modules and weights, OpenVINO's version and
    `EXPORT_FORMAT`."""
    import openvino

    digest = hashlib.sha256(f"{EXPORT_FORMAT}|{openvino.__version__}|{model!r}".encode())
    for key, tensor in model.state_dict().items():
        digest.update(key.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


class _Pipeline(torch.nn.Module):
    """The sentence-transformers model as one module: token ids -> sentence vector."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Any, token_type_ids: Any, attention_mask: Any) -> Any:
        features = {"input_ids": input_ids, "token_type_ids": token_type_ids,
                    "attention_mask": attention_mask}
        return self.model(features)["sentence_embedding"]


def _export(model: Any, folder: Path) -> Path:
    """Convert ``model`` to OpenVINO IR in ``folder`` (written beside, then renamed in)."""
    import openvino

    features = model.preprocess(["An example sentence.", "Another, longer example sentence."])
    missing = [name for name in _INPUTS if name not in features]
    if missing:
        raise RuntimeError(f"its tokenizer gives no {', '.join(missing)}")
    from transformers.utils import logging as transformers_logging

    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()  # its notes on the config while tracing
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer warnings about the model's own code
            graph = openvino.convert_model(_Pipeline(model).eval(),
                                           example_input={k: features[k] for k in _INPUTS})
    finally:
        transformers_logging.set_verbosity(verbosity)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        openvino.save_model(graph, staging / "model.xml", compress_to_fp16=False)
        staging.rename(folder)
    except OSError:
        if not (folder / "model.xml").is_file():
            raise
        # else another process exported the same model meanwhile: use its copy
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder / "model.xml"


class OpenVINOPipeline:
    """A compiled export: ``encode(texts, batch_size)`` -> float32 vectors."""

    def __init__(self, model: Any, compiled: Any, dimension: int) -> None:
        self.model = model
        self.dimension = dimension
        self.compiled = compiled
        #: what OpenVINO computes in on this CPU: "bf16" or "f32"
        self.precision: str = compiled.get_property("INFERENCE_PRECISION_HINT").to_string()
        #: why the precision is not the CPU's best ("" when it is)
        self.note = ""

    @property
    def tag(self) -> str:
        """What sets these vectors apart from torch's: ``openvino-bf16`` or ``openvino-f32``."""
        return f"openvino-{self.precision}"

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        """Vectors of ``texts`` in batches, longest first (less padding), in the order given."""
        order = np.argsort([-len(text) for text in texts], kind="stable")
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for start in range(0, len(texts), batch_size):
            rows = order[start:start + batch_size]
            features = self.model.preprocess([texts[i] for i in rows])
            result = self.compiled({name: features[name].numpy() for name in _INPUTS})
            out[rows] = result[0]
        return out


REPRODUCE_ATOL = 1e-6  # most a text's vector may change with its batch (torch's: 1e-7)


def batch_difference(pipeline: OpenVINOPipeline) -> float:
    """Largest change of a text's vector alone vs in a batch of 32 texts of 1 to 63 words."""
    words = "you see a red ball two steps forward and one step left of a wall".split()
    texts = [" ".join(words[j % len(words)] for j in range(2 * i + 1)) + "." for i in range(32)]
    alone = np.concatenate([pipeline.encode([text], 1) for text in texts])
    return float(np.abs(pipeline.encode(texts, 32) - alone).max())


def load_openvino(model: Any, dimension: int, precision: str | None = None) -> OpenVINOPipeline:
    """The compiled OpenVINO export of ``model`` (exported first if needed) in ``precision``
    (None: the CPU's best; bf16 whose vectors change with the batch: f32, with a ``note``).
    Raises what exporting or compiling raises, and RuntimeError for vectors not torch's or
    not reproducible (docs/adapters.md); the caller falls back to torch."""
    import openvino

    folder = export_root() / f"{type(model).__name__}-{model_fingerprint(model)}"
    xml = folder / "model.xml"
    if not xml.is_file():
        xml = _export(model, folder)
    core = openvino.Core()
    core.set_property({"CACHE_DIR": str(folder / "compiled")})
    config: dict[str, Any] = {"INFERENCE_NUM_THREADS": torch.get_num_threads()}
    if precision is not None:
        config["INFERENCE_PRECISION_HINT"] = precision
    pipeline = OpenVINOPipeline(model, core.compile_model(core.read_model(xml), "CPU", config),
                                dimension)
    difference = batch_difference(pipeline)
    if difference > REPRODUCE_ATOL and precision is None and pipeline.precision != "f32":
        config["INFERENCE_PRECISION_HINT"] = "f32"
        note = (f"OpenVINO's {pipeline.precision} vectors change with the batch (by up to "
                f"{difference:.1e}), so it computes in f32 (about torch's speed)")
        pipeline = OpenVINOPipeline(model, core.compile_model(core.read_model(xml), "CPU",
                                                              config), dimension)
        pipeline.note = note
        difference = batch_difference(pipeline)
    if difference > REPRODUCE_ATOL:
        raise RuntimeError(f"a text's vector changes with its batch (by up to {difference:.1e},"
                           f" more than {REPRODUCE_ATOL:g}), so it cannot be reproduced")
    expected = model.encode(PROBE, convert_to_numpy=True, show_progress_bar=False)
    got = pipeline.encode(PROBE, len(PROBE))
    cosine = float(np.min(np.sum(expected * got, axis=1) / (
        np.linalg.norm(expected, axis=1) * np.linalg.norm(got, axis=1))))
    if not cosine >= MIN_COSINE:  # a CPU path that computes wrong: never use it
        raise RuntimeError(f"its vectors differ from torch's (cosine {cosine:.4f} < "
                           f"{MIN_COSINE} on a probe)")
    return pipeline
