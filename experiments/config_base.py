"""The ground of the experiment file (:mod:`.schema`, :mod:`.config`): its errors
(:class:`ConfigError`, one line per bad key naming what was expected), the bounded YAML
reader, environment ids and ``imports``, the strict value types, the executor and logging
blocks, and the held-out episodes (:class:`HeldOutEpisodes`, :func:`check_heldout`). See
docs/configuration.md.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import json
import os
import sys
import typing
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import gymnasium
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    field_validator,
    model_validator,
)

from .. import environments
from ..environments._checks import EVAL_SEED_OFFSET
from ..environments.extras import missing_extra


class ConfigError(ValueError):
    """An experiment file that cannot be used; the message names the file and the key."""


class UsageError(ValueError):
    """A command-line value that cannot be used."""

_STRICT_TYPES = {
    "int_type": "expected an integer",
    "float_type": "expected a number",
    "bool_type": "expected true or false",
}

_BOUNDS = ("less_than_equal", "less_than", "greater_than_equal", "greater_than")


def shown(value: Any) -> str:
    """A value as the YAML file spells it (``true``, ``"3"``, ``2.5``)."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _keys_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys the model at ``loc`` inside ``model`` accepts ([] where none is a model)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue  # an item of a list
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return []
        current = _model_in(fields[part].annotation)
    fields = getattr(current, "model_fields", None)
    return list(fields) if fields else []


def _model_in(annotation: Any) -> Any:
    """The pydantic model inside ``annotation`` (``list[M]``, ``M | None``), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in typing.get_args(annotation):
        found = _model_in(argument)
        if found is not None:
            return found
    return None


def format_validation_error(
    path: Path | str, error: ValidationError, model: type[BaseModel], loc_prefix: str = ""
) -> str:
    lines = [f"{path}: invalid experiment file"]
    for item in error.errors():
        where = (loc_prefix + ".".join(str(part) for part in item["loc"])).rstrip(".") \
            or "(top level)"
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            known = _keys_at(model, tuple(item["loc"][:-1]))
            message = "unknown key" + suggest(str(item["loc"][-1]), known)
        elif item["type"] == "value_error":
            message = str(item.get("ctx", {}).get("error", message))
        elif item["type"] == "literal_error":
            message = f"got {item.get('input')!r}; {message.lower()}"
        elif item["type"] in _STRICT_TYPES:
            message = f"{_STRICT_TYPES[item['type']]}, got {shown(item.get('input'))}"
        elif item["type"] in _BOUNDS:
            message = f"{message}, got {shown(item.get('input'))}"
        lines.append(f"  {where}: {message}")
    return "\n".join(lines)




def suggest(word: str, known: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``known`` to ``word``, else ``""``."""
    close = difflib.get_close_matches(word, list(known), n=3, cutoff=0.6)
    if not close:
        return ""
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)"


def import_user_modules(names: Iterable[str], where: str = "imports",
                        home: Path | None = None) -> None:
    """Import each module of ``names``; ValueError naming the module and the import error.

    ``home``: the folder of the file that names them. A module not imported yet whose code
    lies in that folder's tree is refused, not imported: a results folder someone sent keeps
    its code there, whatever its name or markers (``--import`` imports it, by choice)."""
    folder = os.getcwd()
    if folder not in sys.path:
        sys.path.append(folder)  # last: installed packages win over same-named folders here
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{where}: {name!r} is not a module name")
        found = _code_inside(name, home) if home is not None else None
        if found is not None:
            raise ValueError(
                f"{where}: module {name!r} is {found}, inside the folder of the file that "
                f"names it ({home}): a file never imports code from its own folder, read as "
                f"data (where a results folder someone sent keeps its code); pass --import "
                f"{name} to import it, only if you trust that code, or keep the module "
                "outside that folder")
        try:
            importlib.import_module(name)
        except Exception as error:  # noqa: BLE001  (any failure of user code is one line)
            raise ValueError(f"{where}: cannot import module {name!r}: "
                             f"{type(error).__name__}: {error}") from None


def _code_inside(name: str, home: Path) -> str | None:
    """Where a part of module ``name`` not imported yet would be read from (a file, a
    package's folder), if that is inside ``home``; found as the import system finds it
    (meta path, then each folder's path hook), running nothing."""
    root = os.path.realpath(home).rstrip(os.sep) + os.sep
    parts, search = name.split("."), None
    for depth in range(1, len(parts) + 1):
        fullname = ".".join(parts[:depth])
        module = sys.modules.get(fullname)
        if module is not None:  # imported already: nothing of it runs again
            search = list(getattr(module, "__path__", None) or []) or None
        else:
            places = (_top_level(fullname) if depth == 1 else _in_folders(fullname, search))
            if places is None:
                return None  # not found: the import's own error names it
            origin, search = places
            for place in [*(search or []), *([origin] if origin else [])]:
                if (os.path.realpath(place) + os.sep).startswith(root):
                    return place
        if search is None:
            return None  # a module, not a package: the name goes no deeper
    return None


def _top_level(name: str) -> tuple[str | None, list[str] | None] | None:
    """(file, package folders) of a top-level module, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None:
        return None
    folders = spec.submodule_search_locations
    return (spec.origin if spec.has_location else None,
            None if folders is None else list(folders))


def _in_folders(fullname: str, folders: list[str] | None
                ) -> tuple[str | None, list[str] | None] | None:
    """(file, package folders) of submodule ``fullname`` in its parent's ``folders``, found
    through each folder's path hook (a namespace package: its portions in every folder)."""
    portions: list[str] = []
    for folder in folders or []:
        finder = next((f for f in (_path_finder(hook, folder) for hook in sys.path_hooks)
                       if f is not None), None)
        spec = finder.find_spec(fullname) if hasattr(finder, "find_spec") else None
        if spec is None:
            continue
        if spec.loader is None:  # a namespace portion
            portions += list(spec.submodule_search_locations or [])
            continue
        locations = spec.submodule_search_locations
        return (spec.origin if spec.has_location else None,
                None if locations is None else list(locations))
    return (None, portions) if portions else None


def _path_finder(hook: Any, folder: str) -> Any:
    try:
        return hook(folder)
    except ImportError:
        return None


def resolve_env_id(text: str, imports: bool = True, home: Path | None = None) -> str:
    """The gymnasium id ``text`` names (a registered id, a MiniGrid/BabyAI level, or
    ``module:EnvId`` with ``module`` imported first); ValueError naming the id,
    the closest known ids and the import error of a ``module:EnvId``. With ``imports``
    False nothing is imported: an id naming a module not imported yet is returned as it is.
    ``home``: see :func:`import_user_modules`."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"environment id {text!r}: expected a gymnasium id such as "
                         "langadapt/Maze-v0 or my_package:MyEnv-v0")
    if ":" in text:
        module, _, env_id = text.partition(":")
        if not imports and module not in sys.modules:
            return text
        import_user_modules([module], where=f"environment {text!r}", home=home)
        if env_id not in gymnasium.registry:
            raise ValueError(f"module {module!r} was imported but registers no environment "
                             f"{env_id!r}{suggest(env_id, gymnasium.registry)}")
        return text  # gymnasium.make imports the module again (a no-op) and finds env_id
    if environments.minigrid.is_minigrid_id(text):
        text = "langadapt/" + text.removeprefix("langadapt/")  # the bridged level
    if text not in gymnasium.registry:
        ours = sorted(k for k in environments.ENV_IDS)
        raise ValueError(
            f"unknown environment {text!r}{suggest(text, gymnasium.registry)}; expected one "
            f"of {', '.join(ours)}, a MiniGrid or BabyAI level, any other registered "
            "gymnasium id, or your own as my_module:MyEnv-v0 (the module is imported first)")
    missing = missing_extra(text) if imports else None
    if missing:
        raise ValueError(missing)
    return text


MAX_YAML_VALUES = 100_000
"""Most values (scalars, lists, mappings) an experiment file may hold with its YAML aliases
expanded: nine levels of nine aliases are 637 bytes but 387 million values."""


def load_yaml(text: str, source: Path | str = "<config>") -> Any:
    """``yaml.safe_load(text)``, refusing (ConfigError naming ``source``) a document of more
    than :data:`MAX_YAML_VALUES` values once its aliases are expanded, a recursive alias and
    nesting too deep to read: an alias is cheap to write but every later step (validation,
    the fingerprint, ``config.yaml``) walks the expanded tree."""
    too_many = ConfigError(
        f"{source}: the YAML holds more than {MAX_YAML_VALUES:,} values once its aliases "
        f"(*name) are expanded; expected at most {MAX_YAML_VALUES:,}: write the values out, "
        "or use fewer aliases")
    loader = _CountingLoader(text, too_many)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node, {}, set(), source) > MAX_YAML_VALUES:
            raise too_many
        return loader.construct_document(node)
    except RecursionError:
        raise ConfigError(f"{source}: the YAML is nested too deeply to read; expected an "
                          "experiment file of ordinary depth") from None
    finally:
        loader.dispose()


class _CountingLoader(yaml.SafeLoader):
    """A safe loader that stops composing past :data:`MAX_YAML_VALUES` nodes (so memory is
    bounded before aliases are counted)."""

    def __init__(self, text: str, too_many: ConfigError) -> None:
        super().__init__(text)
        self.composed, self.too_many = 0, too_many

    def compose_node(self, parent: Any, index: Any) -> Any:
        self.composed += 1
        if self.composed > MAX_YAML_VALUES:
            raise self.too_many
        return super().compose_node(parent, index)


def _expanded_size(node: yaml.Node, sizes: dict[int, int], open_nodes: set[int],
                   source: Path | str) -> int:
    """Values under ``node`` with aliases expanded (a shared node counted at every use),
    stopping past :data:`MAX_YAML_VALUES`."""
    if id(node) in sizes:
        return sizes[id(node)]
    if id(node) in open_nodes:
        raise ConfigError(f"{source}: a recursive YAML alias (line {node.start_mark.line + 1}); "
                          "expected a file without cycles")
    open_nodes.add(id(node))
    size = 1
    if isinstance(node, yaml.SequenceNode):
        children = node.value
    elif isinstance(node, yaml.MappingNode):
        children = [child for pair in node.value for child in pair]
    else:
        children = []
    for child in children:
        size += _expanded_size(child, sizes, open_nodes, source)
        if size > MAX_YAML_VALUES:
            break
    open_nodes.discard(id(node))
    sizes[id(node)] = size
    return size


Int = Annotated[int, Strict()]
"""An integer that must be written as one: ``true``, ``2.5`` or ``"3"`` are errors, not 1, 2
or 3 (pydantic's lax mode would coerce them silently)."""
Float = Annotated[float, Strict()]
"""A number (an integer is fine); ``true`` or ``"0.5"`` are errors."""
Bool = Annotated[bool, Strict()]
"""``true`` or ``false``; ``1``, ``"yes"`` are errors."""

Label = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9.+-]*(_[A-Za-z0-9.+-]+)*$",
        description="letters, digits and _ . + - (no '__'): it names the run folders",
    ),
]


def check_path(value: str) -> str:
    """``value``, a path the file system can hold (Linux's NAME_MAX 255 and PATH_MAX 4096);
    ValueError naming its length otherwise."""
    encoded = os.fsencode(value)
    longest = max((len(part) for part in encoded.split(b"/")), default=0)
    if longest > MAX_PATH_NAME or len(encoded) > MAX_PATH:
        raise ValueError(f"{shown(value[:60])}... ({len(encoded):,} bytes, a name of "
                         f"{longest:,}): expected a path of at most {MAX_PATH:,} bytes "
                         f"whose names are at most {MAX_PATH_NAME} bytes each")
    return value


def path_argument(text: str) -> Path:
    """A command-line path (argparse ``type``): one line if the file system cannot hold it."""
    import argparse

    try:
        return Path(check_path(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


MAX_SEED_COUNT = 1_000
MAX_SEED = 1_000_000_000
MAX_RUNS = 100_000
MAX_TRAINING_EPISODES = 10_000_000
MAX_TRAINING_STEPS = 1_000_000_000
MAX_EVALUATION_EPISODES = 100_000
MAX_TORCH_THREADS = 256
MAX_HELDOUT_SEED = 2**31 - 1
MAX_N_ENVS = 1_024
MAX_PATH, MAX_PATH_NAME = 4_096, 255
STORE_FILE = "cache.sqlite"
"""The store of ``cache_dir`` (LLM answers and embeddings)."""

RESULT_NEUTRAL_BLOCKS = ("name", "description", "output", "cache_dir", "executor", "logging")
"""Top-level keys that are left out of :meth:`ExperimentConfig.fingerprint`."""

RESULT_NEUTRAL_KEYS = frozenset(
    {
        "host", "timeout", "keep_alive", "retries", "backoff", "max_backoff", "stream",
        "concurrency", "n_threads", "cache_path", "embedding_cache_path", "cache_capacity",
        "embedding_cache_capacity",
        "memo_capacity", "memo_size", "progress", "verbose", "api_key_env", "deadline",
        "max_retry_after",
    }
)
"""Settings that change where answers come from or how fast, never what they are: left
out of the fingerprint at any depth of the adapter and agent blocks (the LLM cache keys
carry the model's identity, so another host serving the same model gives the same
answers)."""

MAX_JOBS = 1_024
MAX_CPUS_PER_RUN = 1_024
MAX_GPUS_PER_RUN = 64
MAX_RETRIES = 100


class ExecutorSpec(_Strict):
    """Where the runs execute: a local process pool (default) or a Ray cluster."""

    type: Literal["process", "ray"] = "process"
    address: str | None = Field(
        default=None,
        min_length=1,
        description="ray only: 'auto' (the cluster running on this machine), 'HOST:PORT' of "
        "a head node, or 'ray://HOST:PORT'; default: start a local cluster",
    )
    jobs: Annotated[Int, Field(gt=0, le=MAX_JOBS)] | None = Field(
        default=None,
        description="runs at a time: processes of the pool (default 1); with ray, most runs "
        "in flight (default: as many as the cluster has room for)",
    )
    cpus_per_run: Annotated[Float, Field(gt=0, le=MAX_CPUS_PER_RUN)] = Field(
        default=1, description="ray only: CPUs each run requests"
    )
    gpus_per_run: Annotated[Float, Field(ge=0, le=MAX_GPUS_PER_RUN)] = Field(
        default=0, description="ray only: GPUs each run requests"
    )
    max_retries: Annotated[Int, Field(ge=0, le=MAX_RETRIES)] = Field(
        default=2, description="ray only: retries of a run whose worker process died"
    )

    @model_validator(mode="after")
    def _ray_only(self) -> ExecutorSpec:
        if self.type == "process" and self.address is not None:
            raise ValueError(
                f"address {self.address!r} is for the ray executor; set type: ray or drop it"
            )
        return self


class LoggingSpec(_Strict):
    """What each run logs besides its rows of episodes.csv."""

    tensorboard: Bool = Field(
        default=False, description="TensorBoard scalars of each run in runs/<run>/tb/ (the "
        "tensorboard extra; the process executor)")
    policies: Bool = Field(
        default=True, description="keep each run's final policy (and with keep_best the kept "
        "one) in runs/<run>/policy_*.safetensors (experiments.evaluate)")
    checkpoint_every_minutes: Annotated[float, Field(gt=0, le=10_000)] | None = Field(
        default=10.0, description="save an unfinished run's state this often (minutes of "
        "training); --resume goes on from it (None: never)")
    checkpoint_every_steps: Annotated[Int, Field(gt=0, le=10**9)] | None = Field(
        default=None, description="save an unfinished run's state every this many environment "
        "steps as well (None: by time only)")

    @field_validator("tensorboard")
    @classmethod
    def _installed(cls, value: bool) -> bool:
        if value and importlib.util.find_spec("tensorboard") is None:
            raise ValueError("tensorboard is not installed: pip install 'langadapt[tensorboard]'")
        return value


# ----------------------------------------------------------------------------- held-out episodes


def seeds_used_in_training(run_seeds: Iterable[int], evaluates_in_training: bool,
                           copies: int = 1, within: range | None = None) -> dict[int, str]:
    """Every reset seed training uses, with what uses it: the run seeds (first training
    episode; ``seed + i`` for copy ``i`` of ``copies``, only those ``within`` a range if
    given) and, with evaluations during training, ``seed + EVAL_SEED_OFFSET``."""
    used: dict[int, str] = {}
    for seed in run_seeds:
        for copy in range(copies - 1, 0, -1) if within is None else range(
                min(copies, within.stop - seed) - 1, max(0, within.start - seed - 1), -1):
            used[seed + copy] = (f"run seed {seed} + {copy} (copy {copy} of n_envs {copies}, "
                                 "its first training episode)")
        used[seed] = f"run seed {seed} (its first training episode)"
        if evaluates_in_training:
            used[seed + EVAL_SEED_OFFSET] = (f"run seed {seed} + {EVAL_SEED_OFFSET} (its "
                                             "evaluations during training)")
    return used


def check_heldout(heldout: range, run_seeds: Sequence[int], evaluates_in_training: bool,
                  copies: int = 1) -> None:
    """ValueError naming the seeds of ``heldout`` that training uses, if any."""
    used = seeds_used_in_training(run_seeds, evaluates_in_training, copies, heldout)
    overlap = sorted(seed for seed in used if seed in heldout)
    if overlap:
        named = "; ".join(f"{seed}: {used[seed]}" for seed in overlap[:5])
        more = f" and {len(overlap) - 5} more" if len(overlap) > 5 else ""
        raise ValueError(
            f"held-out seeds [{heldout.start}, {heldout.stop}) overlap the seeds training uses "
            f"— {named}{more}; move heldout_seeds.first past them or choose other run seeds")


class HeldOutEpisodes(gymnasium.Wrapper):
    """Plays the held-out episodes in order: a reset with a seed (any seed: an evaluation
    starting) restarts at ``seeds[0]``, a reset without one takes the next seed. Resetting
    past the last seed is an error (the evaluation asked for more episodes than held out).
    ``seeds``: the config's held-out seeds (never empty: checked at config load)."""

    def __init__(self, env: gymnasium.Env, seeds: Sequence[int]) -> None:
        super().__init__(env)
        self.seeds = list(seeds)
        self.next_index = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Any, dict[str, Any]]:
        if seed is not None:
            self.next_index = 0
        if self.next_index >= len(self.seeds):
            raise ValueError(f"episode {self.next_index + 1} of a held-out evaluation: only "
                             f"{len(self.seeds)} held-out seeds")
        episode_seed = self.seeds[self.next_index]
        self.next_index += 1
        return self.env.reset(seed=episode_seed, options=options)
