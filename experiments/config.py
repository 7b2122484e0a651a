"""The experiment file: pydantic models for one YAML file, and loading it with clear errors.

An experiment names one environment, the adapters to compare, the agents, how long to
train, the seeds, how to evaluate and where to run. Every (adapter x agent x seed)
combination is one run. Unknown keys are errors; every error names the file, the key path
and what was expected. Every count has an upper bound (the ``MAX_*`` constants, listed in
docs/configuration.md) so that a typo fails here, before anything is written.

A new block is a pydantic model (subclass ``_Strict``) and one field of
:class:`ExperimentConfig`; settings that do not change results belong in
:data:`RESULT_NEUTRAL_KEYS` (or, for a whole block, :data:`RESULT_NEUTRAL_BLOCKS`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import re
import typing
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
    create_model,
    field_validator,
    model_validator,
)

from .. import environments  # noqa: F401  (registers the langadapt gymnasium ids)
from ..adapters import LanguageAdapter
from ..adapters.llm import llm_setting_models
from ..adapters.representation import check_representation
from ..agents import AGENTS, SB3Agent
from ..finetune.agent import check_grpo  # importing finetune registers the grpo agent
from ..llm import BACKENDS
from ..roles.advisor import AdvisorConfig
from ..roles.instructions import InstructionsConfig, load_instruction_set
from ..roles.llm_policy import LLMPolicy
from ..roles.policy_search import LLMPolicySearch
from ..roles.reward_shaping import RewardShapingConfig
from .env_ids import import_user_modules, resolve_env_id, suggest
from .heldout import check_heldout


class ConfigError(ValueError):
    """An experiment file that cannot be used; the message names the file and the key."""


MAX_SEED_COUNT = 1_000
MAX_SEED = 1_000_000_000
MAX_RUNS = 100_000
MAX_TRAINING_EPISODES = 10_000_000
MAX_TRAINING_STEPS = 1_000_000_000
MAX_EVALUATION_EPISODES = 100_000
MAX_TORCH_THREADS = 256
MAX_JOBS = 1_024
MAX_CPUS_PER_RUN = 1_024
MAX_GPUS_PER_RUN = 64
MAX_RETRIES = 100
MAX_HELDOUT_SEED = 2**31 - 1
MAX_FILE_BYTES = 4_000_000
"""Largest experiment file read (the shipped ones are below 5 kB)."""
MAX_YAML_VALUES = 100_000
"""Most values (scalars, lists, mappings) an experiment file may hold with its YAML aliases
expanded: nine levels of nine aliases are 637 bytes but 387 million values."""

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

_FOLDER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")


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


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EnvironmentSpec(_Strict):
    """Which environment to run: a gymnasium id (``langadapt/Maze-v0``) and its arguments."""

    id: str = Field(description="gymnasium id, e.g. langadapt/Maze-v0 or my_module:MyEnv-v0 "
                    "(the module is imported first)")
    params: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the env")
    reward_shaping: dict[str, Any] | None = Field(
        default=None, description="shape the training reward (adapters.reward_shaping)"
    )
    instructions: dict[str, Any] | None = Field(
        default=None, description="instruction following (roles.instructions.InstructionsConfig)"
    )

    @field_validator("id")
    @classmethod
    def _known_id(cls, value: str) -> str:
        return resolve_env_id(value)


class AdapterSpec(_Strict):
    """One state representation to compare: ``raw``, ``language`` or ``llm``.

    ``settings`` go to ``adapters.make(type, env, **settings)``; for ``llm`` they include
    ``backend`` (``llamacpp``, ``ollama`` or ``auto``), ``model``, ``host`` and the
    generation options.
    """

    type: Literal["raw", "language", "llm"]
    label: Label | None = Field(default=None, description="name in tables and plots; default: type")
    settings: dict[str, Any] = Field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.label or self.type


class AgentSpec(_Strict):
    """One learner (``qlearning``, ``dqn``, ``random``, an LLM role, ``grpo``, ``sb3``) and
    its hyperparameters."""

    type: Literal["qlearning", "dqn", "random", "llm_policy_search", "llm_policy", "grpo", "sb3"]
    label: Label | None = Field(default=None, description="name in tables and plots; default: type")
    params: dict[str, Any] = Field(default_factory=dict, description="hyperparameters")
    advisor: dict[str, Any] | None = Field(
        default=None, description="advice during training (agents.advisor.AdvisorConfig)"
    )
    reward_shaping: dict[str, Any] | None = Field(
        default=None, description="this agent's reward shaping, instead of the environment's"
    )
    per_adapter: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="hyperparameters that differ for one adapter, by adapter name (e.g. "
        "Q-learning bins for the raw continuous state only)",
    )
    training: TrainingSpec | None = Field(
        default=None, description="this agent's budget instead of the file's training block "
        "(e.g. more steps for DQN than for Q-learning)")

    @property
    def name(self) -> str:
        return self.label or self.type

    def params_for(self, adapter: str) -> dict[str, Any]:
        """The hyperparameters of this agent when it learns from ``adapter``'s states."""
        return {**self.params, **self.per_adapter.get(adapter, {})}


class TrainingSpec(_Strict):
    """How long each run trains: a number of episodes or of environment steps."""

    episodes: Annotated[Int, Field(gt=0, le=MAX_TRAINING_EPISODES)] | None = None
    steps: Annotated[Int, Field(gt=0, le=MAX_TRAINING_STEPS)] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> TrainingSpec:
        if (self.episodes is None) == (self.steps is None):
            raise ValueError(
                f"give exactly one of episodes or steps (got episodes={self.episodes}, "
                f"steps={self.steps})"
            )
        return self


AgentSpec.model_rebuild()  # its training block is a TrainingSpec, defined after it


class HeldOutSeeds(_Strict):
    """The final evaluation's episodes: episode ``i`` resets with seed ``first + i``, the
    same for every run (see :mod:`langadapt.experiments.heldout`)."""

    first: Annotated[Int, Field(ge=0, le=MAX_HELDOUT_SEED)]
    count: Annotated[Int, Field(gt=0, le=MAX_EVALUATION_EPISODES)]

    @property
    def seeds(self) -> range:
        return range(self.first, self.first + self.count)


class EvaluationSpec(_Strict):
    """Greedy evaluation during training and at the end."""

    every: Annotated[Int, Field(gt=0, le=MAX_TRAINING_EPISODES)] | None = Field(
        default=None, description="evaluate greedily every this many training episodes"
    )
    episodes: Annotated[Int, Field(gt=0, le=MAX_EVALUATION_EPISODES)] = Field(
        default=5, description="episodes per evaluation"
    )
    final_episodes: Annotated[Int, Field(gt=0, le=MAX_EVALUATION_EPISODES)] = Field(
        default=20, description="greedy episodes of the final evaluation"
    )
    threshold: Annotated[Float, Field(allow_inf_nan=False)] | None = Field(
        default=None,
        description="'episodes to threshold' counts training episodes until an evaluation's "
        "mean return reaches this; default: until an evaluation succeeds in every episode",
    )
    every_steps: Annotated[Int, Field(gt=0, le=MAX_TRAINING_STEPS)] | None = Field(
        default=None,
        description="also evaluate at the end of the first episode past every multiple of "
        "this many training steps",
    )
    heldout_seeds: HeldOutSeeds | None = Field(
        default=None,
        description="the final evaluation plays these held-out episodes (seeds no training "
        "episode uses, the same for every run) instead of final_episodes from seed + 10000",
    )
    environment_params: dict[str, Any] = Field(
        default_factory=dict,
        description="environment parameters that differ for evaluation, over "
        "environment.params (e.g. {split: held_out}: the held-out lakes of FrozenLakeMaps)",
    )
    keep_best: Bool = Field(
        default=False,
        description="keep the policy of the best evaluation, restore it after training and "
        "evaluate both it ('best' rows) and the final policy ('final' rows)",
    )

    @model_validator(mode="after")
    def _schedule_for_keep_best(self) -> EvaluationSpec:
        if self.keep_best and self.every is None and self.every_steps is None:
            raise ValueError(
                "keep_best needs an evaluation schedule: set evaluation.every (training "
                "episodes) or evaluation.every_steps (steps)"
            )
        return self

    @model_validator(mode="after")
    def _one_final_count(self) -> EvaluationSpec:
        held = self.heldout_seeds
        if held is not None and "final_episodes" in self.model_fields_set \
                and self.final_episodes != held.count:
            raise ValueError(
                f"final_episodes={self.final_episodes} but heldout_seeds.count={held.count}: "
                "the final evaluation plays the held-out episodes; drop final_episodes"
            )
        if held is not None:
            self.final_episodes = held.count
        return self


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

    @field_validator("tensorboard")
    @classmethod
    def _installed(cls, value: bool) -> bool:
        if value and importlib.util.find_spec("tensorboard") is None:
            raise ValueError("tensorboard is not installed: pip install 'langadapt[tensorboard]'")
        return value


class ExperimentConfig(_Strict):
    """One experiment file."""

    name: str = Field(description="a plain folder name: it names results/<name>")
    description: str = ""
    imports: list[str] = Field(
        default_factory=list,
        description="modules imported before anything else (they register your "
        "environments and language specs), in every worker process too",
    )
    environment: EnvironmentSpec
    adapters: list[AdapterSpec] = Field(min_length=1)
    agents: list[AgentSpec] = Field(min_length=1)
    training: TrainingSpec
    tasks: dict[Label, dict[str, Any]] | None = Field(
        default=None,
        min_length=1,
        description="a suite: one experiment per task, each with these environment params "
        "added, in <output>/<task>/, and a suite report across them (experiments.suite)",
    )
    seeds: list[Int] | Int = Field(
        default=3,
        description="a list of seeds, or a count n meaning seeds 0..n-1",
    )
    evaluation: EvaluationSpec = Field(default_factory=EvaluationSpec)
    output: str = Field(default="", description="results folder; default results/<name>")
    cache_dir: str = Field(
        default=".langadapt-cache",
        description="persistent description and embedding caches, shared between runs",
    )
    torch_threads: Annotated[Int, Field(gt=0, le=MAX_TORCH_THREADS)] = Field(
        default=1,
        description="torch threads per run; small networks train fastest on one, and a "
        "second thread fighting other processes for a core can slow a step tenfold",
    )
    executor: ExecutorSpec = Field(default_factory=ExecutorSpec)
    logging: LoggingSpec = Field(default_factory=LoggingSpec)

    @model_validator(mode="before")
    @classmethod
    def _import_user_modules(cls, data: Any) -> Any:
        """The ``imports`` first: the environment id may be one they register."""
        names = data.get("imports") if isinstance(data, dict) else None
        if isinstance(names, list):
            import_user_modules(names)
        return data

    @field_validator("name")
    @classmethod
    def _plain_folder_name(cls, value: str) -> str:
        if not _FOLDER_NAME.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a plain folder name; expected up to 100 letters, digits and "
                "_ . + - starting with a letter or digit (no '/', no '..')"
            )
        return value

    @field_validator("cache_dir")
    @classmethod
    def _cache_folder(cls, value: str) -> str:
        """A folder, or a path where one can be made (not a file, nor under one)."""
        path = Path(value).expanduser()
        for part in (path, *path.parents) if value else ():
            if part.is_dir():
                break
            if part.exists():
                raise ValueError(f"{value!r}: {str(part)!r} is a file; expected a folder for "
                                 "the caches (or a path that does not exist yet)")
        return value

    @field_validator("adapters")
    @classmethod
    def _unique_adapters(cls, value: list[AdapterSpec]) -> list[AdapterSpec]:
        _require_unique([a.name for a in value], "adapter names")
        return value

    @field_validator("agents")
    @classmethod
    def _unique_agents(cls, value: list[AgentSpec]) -> list[AgentSpec]:
        _require_unique([a.name for a in value], "agent names")
        return value

    @field_validator("seeds", mode="before")
    @classmethod
    def _integer_seeds(cls, value: Any) -> Any:
        """One clear error for seeds that are not integers (the union of list and count
        would otherwise report each alternative)."""
        items = value if isinstance(value, list) else [value]
        for position, item in enumerate(items):
            if isinstance(item, bool) or not isinstance(item, int):
                where = f" (item {position})" if isinstance(value, list) else ""
                raise ValueError(
                    f"expected a list of integer seeds or a count, got {_shown(item)}{where}"
                )
        return value

    @field_validator("seeds")
    @classmethod
    def _usable_seeds(cls, value: list[int] | int) -> list[int] | int:
        if isinstance(value, int):
            if not 0 < value <= MAX_SEED_COUNT:
                raise ValueError(
                    f"a seed count must be between 1 and {MAX_SEED_COUNT}, got {value}"
                )
            return value
        if not value:
            raise ValueError("the seed list is empty; give at least one seed, or a count")
        if len(value) > MAX_SEED_COUNT:
            raise ValueError(f"{len(value)} seeds; expected at most {MAX_SEED_COUNT}")
        wrong = [seed for seed in value if not 0 <= seed <= MAX_SEED]
        if wrong:
            raise ValueError(f"seeds must be between 0 and {MAX_SEED}, got {wrong}")
        _require_unique([str(seed) for seed in value], "seeds")
        return value

    @model_validator(mode="after")
    def _per_adapter_names(self) -> ExperimentConfig:
        names = [a.name for a in self.adapters]
        for agent in self.agents:
            unknown = sorted(set(agent.per_adapter) - set(names))
            if unknown:
                raise ValueError(
                    f"agent {agent.name!r}: per_adapter names {', '.join(unknown)}, expected "
                    f"adapter names of this experiment: {', '.join(names)}"
                )
        held = self.evaluation.heldout_seeds
        if held is not None:
            during = self.evaluation.every is not None or self.evaluation.every_steps is not None
            check_heldout(held.seeds, self.seed_list, during)
        runs = len(self.adapters) * len(self.agents) * len(self.seed_list) \
            * len(self.tasks or [None])
        if runs > MAX_RUNS:
            raise ValueError(
                f"{runs} runs (adapters x agents x seeds x tasks); expected at most {MAX_RUNS}"
            )
        return self

    def training_for(self, agent: AgentSpec) -> TrainingSpec:
        """The budget of ``agent``: its own training block, else the file's."""
        return agent.training or self.training

    @property
    def seed_list(self) -> list[int]:
        return list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)

    @property
    def output_dir(self) -> Path:
        return Path(self.output or f"results/{self.name}")

    def resolved(self) -> dict[str, Any]:
        """The config as written to ``config.yaml``: defaults filled in, seeds as a list."""
        data = self.model_dump(mode="json")
        data["seeds"] = self.seed_list
        data["output"] = str(self.output_dir)
        return data

    def fingerprint(self) -> str:
        """A hash of what determines the results: everything but the names, the output and
        cache folders, the executor and the :data:`RESULT_NEUTRAL_KEYS` settings."""
        data = self.fingerprint_data()
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    def fingerprint_data(self) -> dict[str, Any]:
        """What :meth:`fingerprint` hashes (and :func:`changed_keys` compares)."""
        data = self.resolved()
        for key in RESULT_NEUTRAL_BLOCKS:
            data.pop(key, None)
        for block in ("adapters", "agents"):
            data[block] = _without_neutral_keys(data[block])
        if not data["evaluation"]["environment_params"]:  # the fingerprints of older files
            del data["evaluation"]["environment_params"]
        for agent in data["agents"]:  # as before agents had budgets: old folders resume
            if agent.get("training") is None:
                agent.pop("training", None)
        return data


def _without_neutral_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _without_neutral_keys(v) for k, v in value.items() if k not in RESULT_NEUTRAL_KEYS
        }
    if isinstance(value, list):
        return [_without_neutral_keys(v) for v in value]
    return value


def _require_unique(names: list[str], what: str) -> None:
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        hint = "; give each a distinct 'label'" if what.endswith("names") else ""
        raise ValueError(
            f"{what} must be unique, {', '.join(repeated)} appears more than once{hint}"
        )


_STRICT_TYPES = {
    "int_type": "expected an integer",
    "float_type": "expected a number",
    "bool_type": "expected true or false",
}

_BOUNDS = ("less_than_equal", "less_than", "greater_than_equal", "greater_than")


def _shown(value: Any) -> str:
    """A value as the YAML file spells it (``true``, ``"3"``, ``2.5``)."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def changed_keys(old: ExperimentConfig, new: ExperimentConfig, most: int = 5) -> list[str]:
    """The key paths (``training.episodes: 30 -> 40``) in which two experiments' results
    differ: what :meth:`ExperimentConfig.fingerprint` compares, at most ``most`` of them."""
    changes: list[str] = []
    _diff(old.fingerprint_data(), new.fingerprint_data(), "", changes)
    if len(changes) > most:
        changes = [*changes[:most], f"and {len(changes) - most} more"]
    return changes


def _diff(old: Any, new: Any, where: str, changes: list[str]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in [*old, *(k for k in new if k not in old)]:
            path = f"{where}.{key}" if where else str(key)
            if key not in new:
                changes.append(f"{path} removed (was {_brief(old[key])})")
            elif key not in old:
                changes.append(f"{path} added ({_brief(new[key])})")
            else:
                _diff(old[key], new[key], path, changes)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for index, (a, b) in enumerate(zip(old, new, strict=True)):
            _diff(a, b, f"{where}.{index}", changes)
    elif old != new:
        changes.append(f"{where or '(top level)'}: {_brief(old)} -> {_brief(new)}")


def _brief(value: Any, width: int = 40) -> str:
    text = _shown(value)
    return text if len(text) <= width else text[: width - 3] + "..."


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


def _format_validation_error(
    path: Path | str, error: ValidationError, loc_prefix: str = "",
    model: type[BaseModel] | None = None,
) -> str:
    lines = [f"{path}: invalid experiment file"]
    for item in error.errors():
        where = (loc_prefix + ".".join(str(part) for part in item["loc"])).rstrip(".") \
            or "(top level)"
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            known = _keys_at(model or ExperimentConfig, tuple(item["loc"][:-1]))
            message = "unknown key" + suggest(str(item["loc"][-1]), known)
        elif item["type"] == "value_error":
            message = str(item.get("ctx", {}).get("error", message))
        elif item["type"] == "literal_error":
            message = f"got {item.get('input')!r}; {message.lower()}"
        elif item["type"] in _STRICT_TYPES:
            message = f"{_STRICT_TYPES[item['type']]}, got {_shown(item.get('input'))}"
        elif item["type"] in _BOUNDS:
            message = f"{message}, got {_shown(item.get('input'))}"
        lines.append(f"  {where}: {message}")
    return "\n".join(lines)


def experiment_from_dict(data: Any, source: Path | str = "<config>") -> ExperimentConfig:
    """Validate an already-loaded mapping; errors name ``source`` and the key path."""
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: expected a mapping of keys (name, environment, adapters, ...), "
            f"got {type(data).__name__}"
        )
    try:
        config = ExperimentConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(_format_validation_error(source, error)) from None
    _check_component_settings(config, source)
    return config


def load_config(path: str | Path) -> ExperimentConfig:
    """Read and validate an experiment YAML file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such experiment file")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ConfigError(f"{path}: {size:,} bytes; expected an experiment file of at most "
                          f"{MAX_FILE_BYTES:,} bytes")
    try:
        data = load_yaml(path.read_bytes().decode("utf-8"), path)
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{path}: not a UTF-8 text file (byte {error.start}: {error.reason}); save it as UTF-8"
        ) from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML: {' '.join(str(error).split())}") from None
    return experiment_from_dict(data, path)


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


def _check_component_settings(config: ExperimentConfig, source: Path | str) -> None:
    """Validate agent hyperparameters and adapter settings against the pydantic models of
    the agents and adapters themselves, so a typo fails before anything is written."""
    for index, spec in enumerate(config.agents):
        checks = [("params", spec.params)] + [
            (f"per_adapter.{name}", spec.params_for(name)) for name in spec.per_adapter
        ]
        for where, params in checks:
            _validate(AGENTS[spec.type].config_model, params, source, f"agents.{index}.{where}.")
        _check_llm_roles(config, index, spec, source)
        if spec.type == "sb3" and config.training_for(spec).steps is None:
            raise ConfigError(f"{source}: agents.{index}: an sb3 agent trains for a number of "
                              "environment steps (SB3's total_timesteps); give it training: "
                              "{steps: N} (its own block or the file's)")
    for index, adapter in enumerate(config.adapters):
        where = f"adapters.{index}.settings."
        try:
            check_representation(adapter.settings, adapter.type)
        except ValueError as error:
            raise ConfigError(f"{source}: invalid experiment file\n  {where}{error}") from None
        if adapter.type == "raw" and adapter.settings:
            raise ConfigError(
                f"{source}: invalid experiment file\n  {where}{next(iter(adapter.settings))}: "
                "unknown key (the raw adapter takes no settings)"
            )
        if adapter.type == "llm" and isinstance(adapter.settings.get("backend"), dict):
            raise ConfigError(
                f"{source}: invalid experiment file\n  {where}backend: an llm adapter takes the "
                "backend's keys flat, beside its own settings (backend: openai, base_url: ..., "
                "model: ...), not a nested block")
        for model, settings in _adapter_setting_models(adapter):
            _validate(model, settings, source, where)


def _check_llm_roles(config: ExperimentConfig, index: int, spec: AgentSpec, source: Any) -> None:
    """The advisor and reward-shaping blocks, and llm_policy agents only on raw states."""
    if spec.advisor is not None:
        if issubclass(AGENTS[spec.type], (LLMPolicy, LLMPolicySearch, SB3Agent)):
            raise ConfigError(
                f"{source}: agents.{index}.advisor: an advisor replaces some of the actions an "
                f"agent learns from step by step, but {spec.type} does not learn from steps "
                "in langadapt's loop; "
                "remove the advisor block (advisors suit qlearning and dqn)")
        _validate(AdvisorConfig, spec.advisor, source, f"agents.{index}.advisor.")
    if spec.reward_shaping is not None:
        _validate(RewardShapingConfig, spec.reward_shaping, source,
                  f"agents.{index}.reward_shaping.")
    if index == 0 and config.environment.reward_shaping is not None:
        _validate(RewardShapingConfig, config.environment.reward_shaping, source,
                  "environment.reward_shaping.")
    if index == 0 and config.environment.instructions is not None:
        _validate(InstructionsConfig, config.environment.instructions, source,
                  "environment.instructions.")
        _check_instruction_maze(config, source)
    others = [a.name for a in config.adapters if a.type != "raw"]
    if spec.type in ("llm_policy", "grpo") and others:
        raise ConfigError(
            f"{source}: agents.{index}: {spec.type} reads the raw state itself, so it runs only "
            f"with adapters of type raw; got {', '.join(others)} (list it in an experiment "
            "with only a raw adapter)"
        )
    if spec.type == "grpo":
        _check_grpo(config, index, spec, source)


def _check_grpo(config: ExperimentConfig, index: int, spec: AgentSpec, source: Any) -> None:
    """A grpo agent only on an environment with a language spec that GRPO can restart
    (a maze, a MiniGrid or BabyAI level), and with a reward to learn from."""
    env_spec = config.environment
    try:
        env = gymnasium.make(env_spec.id, **env_spec.params).unwrapped
    except (TypeError, ValueError, gymnasium.error.Error):
        return  # bad environment params are reported when the run starts
    if spec.reward_shaping or env_spec.reward_shaping or env_spec.instructions:
        raise ConfigError(f"{source}: agents.{index}: grpo trains on the environment's own "
                          "reward (params.shaping: oracle on a maze); remove the "
                          "reward_shaping and instructions blocks")
    try:
        check_grpo(env, spec.params)
    except ValueError as error:
        raise ConfigError(f"{source}: agents.{index} (grpo on {env_spec.id}): {error}") from None


def _check_instruction_maze(config: ExperimentConfig, source: Any) -> None:
    """An entry of the shipped instruction set only on the maze its ground truth is for."""
    set_id = config.environment.instructions.get("set_id")
    if set_id is None:
        return
    item = next(i for i in load_instruction_set() if i.id == set_id)
    maze = config.environment.params.get("maze", "umaze")
    if config.environment.id != "langadapt/Maze-v0" or maze != item.maze:
        raise ConfigError(
            f"{source}: invalid experiment file\n  environment.instructions.set_id: "
            f"{set_id!r} is an instruction for the {item.maze} maze (its ground-truth cells), "
            f"but the environment is {config.environment.id} {config.environment.params}; "
            f"expected langadapt/Maze-v0 with maze: {item.maze}")


def _adapter_setting_models(spec: AdapterSpec) -> list[tuple[type[BaseModel], dict[str, Any]]]:
    """(pydantic model, settings it must accept) pairs for one adapter entry."""
    if spec.type == "raw":
        return []
    if spec.type == "language":
        return [(LanguageAdapter, spec.settings)]
    backend = spec.settings.get("backend", "auto")
    if backend not in (*BACKENDS, "auto"):
        return [(_BackendSetting, {"backend": backend})]
    # auto: the settings must suit whichever backend is picked
    return llm_setting_models(spec.settings)


@functools.cache
def _settings_model(model: type[BaseModel]) -> type[BaseModel]:
    """``model``'s fields (types, bounds, unknown keys) as a model of its own, for a model
    whose constructor needs more than its settings (an adapter needs its environment)."""
    own = [base for base in model.__mro__ if issubclass(base, BaseModel) and base is not BaseModel]
    if all("__init__" not in vars(base) for base in own):
        return model
    fields = {name: (field.annotation, field) for name, field in model.model_fields.items()}
    config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    return create_model(f"{model.__name__}Settings", __config__=config, **fields)


class _BackendSetting(_Strict):
    backend: Literal["ollama", "llamacpp", "openai", "transformers", "auto"]


def _validate(
    model: type[BaseModel], data: dict[str, Any], source: Path | str, loc_prefix: str
) -> None:
    settings_model = _settings_model(model)
    try:
        settings_model.model_validate(data)
    except ValidationError as error:
        raise ConfigError(
            _format_validation_error(source, error, loc_prefix, settings_model)) from None
