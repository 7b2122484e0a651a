"""Does this machine's llama.cpp build run on this CPU? Asked once, in a child process,
before this one risks a SIGSEGV/SIGILL; the answer passes to children in an environment
variable. See docs/llm.md, "The embedded model's build".
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from .errors import NativeBuildError

__all__ = ["PORTABLE_CMAKE_ARGS", "check_llama_cpp_runs", "probe_command", "rebuild_command",
           "system_info"]

#: The flags of the Makefile's portable build (x86-64-v3: AVX2/FMA/F16C, no native tuning,
#: no AVX-512, no AMX); tests/test_llm_llamacpp.py checks that the Makefile says the same.
PORTABLE_CMAKE_ARGS = ("-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON "
                       "-DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF "
                       "-DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF")
_CHECKED_VARIABLE = "LANGADAPT_LLAMA_CPP_RUNS"
_PROBE_TIMEOUT_S = 300.0
_lock = threading.Lock()

# The child: load the model, evaluate a short prompt, print the build's system info.
_PROBE = """
import sys
import llama_cpp
llama = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=64, n_threads=1, n_threads_batch=1,
                        verbose=False)
llama.eval(llama.tokenize(b"The maze has a goal.", add_bos=True))
print(llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip())
"""


def probe_command(model: Path) -> list[str]:
    """The child process that evaluates a prompt with ``model``."""
    return [sys.executable, "-c", _PROBE, str(model)]


def rebuild_command() -> str:
    """The pip command that rebuilds llama-cpp-python for any x86-64-v3 CPU."""
    return (f'CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}" pip install --force-reinstall --no-deps '
            "--no-cache-dir --no-binary llama-cpp-python llama-cpp-python")


def system_info() -> str:
    """llama.cpp's own line of the CPU features this build uses (``llama_print_system_info``)."""
    import llama_cpp  # loads the native library: only when asked

    return llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip()


def _build_key() -> str:
    """The installed llama.cpp build: its library folder and that folder's time."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return "none"
    folder = Path(next(iter(spec.submodule_search_locations))) / "lib"
    try:
        return f"{folder}:{folder.stat().st_mtime_ns}"
    except OSError:
        return str(folder)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def check_llama_cpp_runs(model: Path, command: Sequence[str] | None = None) -> None:
    """`NativeBuildError` if evaluating a prompt with ``model`` kills a child process (once
    per build and process tree); ``command``: another child to run (tests)."""
    key = _build_key()
    with _lock:
        if command is None and os.environ.get(_CHECKED_VARIABLE) == key:
            return
        argv = list(command) if command is not None else probe_command(model)
        try:
            child = subprocess.run(argv, capture_output=True, text=True,
                                   timeout=_PROBE_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            return  # slow, not crashed: the real call goes ahead
        if child.returncode < 0:
            info = ""
            try:
                info = system_info()
            except Exception:  # a library that cannot even report itself
                info = "unavailable"
            raise NativeBuildError(
                f"llama.cpp crashed ({_signal_name(-child.returncode)}) evaluating a short "
                f"prompt in a child process: this llama-cpp-python build uses CPU instructions "
                f"this processor does not run (its system info: {info or 'none'}); rebuild it "
                f"portably: {rebuild_command()}")
        if command is None and child.returncode == 0:
            os.environ[_CHECKED_VARIABLE] = key
