"""A results folder read as someone else's: :func:`received_config` is its experiment as
``evaluate``, ``play`` and ``load_run`` rebuild it — what shapes the observations and the
policy kept, what says *where* and *how much* taken from the user. From the folder's
``config.yaml`` no LLM server, API-key variable, model file, cache file or folder, or
memory size is used: ``cache_dir`` is the user's (the default, or ``--set cache_dir=...``),
and every adapter's settings and LLM backend spec lose :data:`LOCAL_KEYS`, :data:`SERVER_KEYS`
and a ``model`` that names a file; a backend spec keeps only :data:`BACKEND_KEEP`. The
user's ``--set`` lines apply after. See docs/configuration.md ("A received folder").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .config import ROLE_BACKEND_PARAMS, apply_set, experiment_from_dict
from .folders import inside
from .results import folder_config
from .schema import ExperimentConfig

SERVER_KEYS = frozenset({"backend", "base_url", "host", "api_key_env"})
"""Which server answers and which environment variable's key it is sent."""

LOCAL_KEYS = frozenset({"cache_path", "embedding_cache_path", "cache_dir", "adapter",
                        "cache_capacity", "embedding_cache_capacity", "memo_capacity",
                        "concurrency", "n_threads", "n_gpu_layers", "keep_alive", "timeout",
                        "deadline", "retries", "backoff", "max_backoff", "max_retry_after",
                        "breaker_failures", "breaker_cooldown"})
"""The user's machine: files and folders it reads or writes, memory, threads, waiting."""

BACKEND_KEEP = frozenset({"model", "temperature", "seed", "context_length", "max_tokens",
                          "max_reply_chars", "structured_output", "strict", "options", "stream"})
"""What a received backend spec keeps: the model's name and how it generates."""

_FILE_SUFFIXES = (".gguf", ".bin", ".safetensors", ".pt", ".pth")


def names_a_file(model: Any) -> bool:
    """Whether a ``model`` value names a file or folder rather than a server's model name."""
    if not isinstance(model, str):
        return True
    return (model.startswith(("/", "~", ".", "\\")) or model.lower().endswith(_FILE_SUFFIXES)
            or ":\\" in model)


def received_data(data: dict[str, Any], default_cache_dir: str
                  ) -> tuple[dict[str, Any], list[str]]:
    """``data`` (a folder's resolved experiment) without what it may not choose, and the
    dotted keys removed (``cache_dir`` when it differs from ``default_cache_dir``)."""
    dropped: list[str] = []
    if data.get("cache_dir", default_cache_dir) != default_cache_dir:
        dropped.append(f"cache_dir={_shown(data['cache_dir'])}")
    data["cache_dir"] = default_cache_dir
    for i, adapter in enumerate(_dicts(data.get("adapters"))):
        where = f"adapters.{adapter.get('label') or adapter.get('type') or i}.settings"
        settings = adapter.get("settings")
        if isinstance(settings, dict):
            dropped += _drop(settings, where, keep=None)
    environment = data.get("environment") if isinstance(data.get("environment"), dict) else {}
    for role in ("reward_shaping", "instructions"):
        dropped += _drop_backend(environment.get(role), "backend", f"environment.{role}")
    for i, agent in enumerate(_dicts(data.get("agents"))):
        name = agent.get("label") or agent.get("type") or i
        key = ROLE_BACKEND_PARAMS.get(agent.get("type"))
        params = agent.get("params")
        if key is not None and isinstance(params, dict):
            dropped += _drop_backend(params, key, f"agents.{name}.params")
        per_adapter = agent.get("per_adapter")
        if key is not None and isinstance(per_adapter, dict):
            for label, own in per_adapter.items():
                dropped += _drop_backend(own, key, f"agents.{name}.per_adapter.{label}")
        for role in ("advisor", "reward_shaping"):
            dropped += _drop_backend(agent.get(role), "backend", f"agents.{name}.{role}")
    return data, dropped


def received_config(home: Path, assignments: Iterable[str] = (),
                    log: Callable[[str], None] = print) -> ExperimentConfig:
    """The experiment of the results folder ``home`` as :func:`received_data` keeps it, with
    the user's ``--set`` ``assignments`` applied; one line naming what was dropped."""
    data = read_received(home).resolved()
    default = ExperimentConfig.model_fields["cache_dir"].default
    data, dropped = received_data(data, default)
    if dropped:
        log(note(home, dropped))
    assignments = list(assignments)
    for assignment in assignments:
        apply_set(data, assignment)
    changes = " ".join(f"--set {a}" for a in assignments)
    return experiment_from_dict(data, f"{home}/config.yaml with {changes}" if changes
                                else home / "config.yaml", data_only=True)


def read_received(home: Path, *entries: str | Path) -> ExperimentConfig:
    """The folder's ``config.yaml`` read as data, after refusing (one line naming it) that
    it or one of ``entries`` (paths inside ``home``) is a symbolic link: a received folder
    is read only inside itself, and no line of a file elsewhere reaches a message."""
    for entry in ("config.yaml", *entries):
        inside(home, entry, "a received folder is read only inside itself; copy the file in")
    return folder_config(home)


def note(home: Path, dropped: list[str]) -> str:
    """The one line saying which of the folder's settings were not used."""
    return (f"{home}/config.yaml: not used from a received folder: {', '.join(dropped)} — a "
            "results folder chooses no LLM server, API key, cache or size; yours apply (the "
            "defaults, or --set KEY=VALUE, e.g. --set adapters.<label>.settings.base_url=URL)")


def _drop(spec: dict[str, Any], where: str, keep: frozenset[str] | None) -> list[str]:
    """Remove from ``spec`` what a received folder may not choose (``keep``: the only keys
    allowed, None: any but those); the dotted keys removed."""
    dropped = []
    for key in list(spec):
        value = spec[key]
        local = key in SERVER_KEYS or key in LOCAL_KEYS or (keep is not None and key not in keep)
        if local or (key == "model" and names_a_file(value)):
            del spec[key]
            shown = f"={_shown(value)}" if key in ("backend", "base_url", "host", "model") else ""
            dropped.append(f"{where}.{key}{shown}")
    return dropped


def _drop_backend(holder: Any, key: str, where: str) -> list[str]:
    """A backend spec ``holder[key]`` reduced to :data:`BACKEND_KEEP` (a bare name or an
    empty spec removed: the role's default, the user's)."""
    if not isinstance(holder, dict) or key not in holder:
        return []
    spec = holder[key]
    if not isinstance(spec, dict):
        del holder[key]
        return [f"{where}.{key}={_shown(spec)}"]
    dropped = _drop(spec, f"{where}.{key}", keep=BACKEND_KEEP)
    if not spec:
        del holder[key]
    return dropped


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
