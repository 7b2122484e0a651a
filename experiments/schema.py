"""The experiment file's schema: one strict pydantic model per block, validated once at load
(:mod:`.config`), with the strict value types, the held-out seed checks and the errors users
see (:class:`ConfigError` for a file, :class:`UsageError` for a command line). Unknown keys
are errors; every count has an upper bound (the ``MAX_*`` constants, docs/configuration.md).
Settings that do not change results are in :data:`RESULT_NEUTRAL_KEYS` /
:data:`RESULT_NEUTRAL_BLOCKS` (left out of the fingerprint). No torch is imported here: the
command line starts from this module.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..environments._checks import EVAL_SEED_OFFSET
from ..environments.user_code import import_user_modules, resolve_env_id, suggest
from ..errors import shown


class ConfigError(ValueError):
    """An experiment file that cannot be used; the message names the file and the key."""


class UsageError(ValueError):
    """A command-line value that cannot be used."""


Int = Annotated[int, Strict()]
"""An integer that must be written as one: ``true``, ``2.5`` or ``"3"`` are errors, not 1, 2
or 3 (pydantic's lax mode would coerce them silently)."""
Float = Annotated[float, Strict()]
"""A number (an integer is fine); ``true`` or ``"0.5"`` are errors."""
Bool = Annotated[bool, Strict()]
"""``true`` or ``false``; ``1``, ``"yes"`` are errors."""

LABEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9.+-]*(_[A-Za-z0-9.+-]+)*$"
Label = Annotated[str, Field(
    pattern=LABEL_PATTERN,
    description="letters, digits and _ . + - (no '__'): it names the run folders")]


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
MAX_JOBS, MAX_CPUS_PER_RUN, MAX_GPUS_PER_RUN, MAX_RETRIES = 1_024, 1_024, 64, 100
MAX_PATH, MAX_PATH_NAME = 4_096, 255
STORE_FILE = "cache.sqlite"
"""The store of ``cache_dir``: embeddings and LLM answers of the adapters and the LLM roles."""

RESULT_NEUTRAL_BLOCKS = ("name", "description", "output", "cache_dir", "executor", "logging")
"""Top-level keys that are left out of :meth:`ExperimentConfig.fingerprint`."""

RESULT_NEUTRAL_KEYS = frozenset({
    "host", "timeout", "keep_alive", "retries", "backoff", "max_backoff", "stream",
    "concurrency", "n_threads", "cache_path", "embedding_cache_path", "cache_capacity",
    "embedding_cache_capacity", "memo_capacity", "memo_size", "progress", "verbose",
    "api_key_env", "deadline", "max_retry_after"})
"""Settings that change where answers come from or how fast, never what they are: left
out of the fingerprint at any depth of the adapter and agent blocks (the LLM cache keys
carry the model's identity, so another host serving the same model gives the same
answers)."""


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
        "one) in runs/<run>/policy_*.safetensors (experiments.kept)")
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


_FOLDER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")


def data_only(info: ValidationInfo) -> bool:
    """Whether the file is a results folder's, read as data: nothing it names imported."""
    return bool(info.context and info.context.get("data_only"))


def home(info: ValidationInfo) -> Path | None:
    """The folder of the file being read: no module in its tree is imported."""
    return info.context.get("home") if info.context else None


class EnvironmentSpec(_Strict):
    """Which environment to run: a gymnasium id (``langadapt/Maze-v0``) and its arguments."""

    id: str = Field(description="gymnasium id, e.g. langadapt/Maze-v0 or my_module:MyEnv-v0 "
                    "(the module is imported first)")
    params: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the env")
    reward_shaping: dict[str, Any] | None = Field(
        default=None,
        description="shape the training reward (roles.reward_shaping.RewardShapingConfig)"
    )
    instructions: dict[str, Any] | None = Field(
        default=None, description="instruction following (roles.instructions.InstructionsConfig)"
    )

    @field_validator("id")
    @classmethod
    def _known_id(cls, value: str, info: ValidationInfo) -> str:
        if not data_only(info):
            return resolve_env_id(value, home=home(info))
        try:  # a results folder's file: nothing imported, an unknown id kept as written
            return resolve_env_id(value, imports=False)
        except ValueError:
            return value


class AdapterSpec(_Strict):
    """One state representation to compare; ``settings`` go to ``adapters.make(type, env,
    **settings)``."""

    type: Literal["raw", "language", "llm"]
    label: Label | None = Field(default=None, description="name in tables and plots; default: type")
    settings: dict[str, Any] = Field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.label or self.type


def _known_agent(name: str, info: ValidationInfo) -> str:
    """An agent of the registry (the built-in ones, the roles' and any a module in ``imports``
    added with ``register_agent``); in a results folder's file read as data, any name a run
    folder can carry (that run registered it; loading its policy needs its module)."""
    from .. import roles  # noqa: F401  (registers the roles' agents)
    from ..agents.registry import AGENTS  # imported lazily: the command line starts torch-free

    if name in AGENTS or (data_only(info) and re.fullmatch(LABEL_PATTERN, name)):
        return name
    names = list(AGENTS)
    raise ValueError(f"{name!r}: expected {', '.join(map(repr, names[:-1]))} or "
                     f"{names[-1]!r}, or a name a module in imports registers with "
                     f"register_agent{suggest(name, names)}")


class AgentSpec(_Strict):
    """One learner and its hyperparameters."""

    type: Annotated[str, AfterValidator(_known_agent)] = Field(
        description="a built-in agent or one registered with register_agent")
    label: Label | None = Field(default=None, description="name in tables and plots; default: type")
    params: dict[str, Any] = Field(default_factory=dict, description="hyperparameters")
    advisor: dict[str, Any] | None = Field(
        default=None, description="advice during training (roles.advisor.AdvisorConfig)"
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
    """How long each run trains (episodes or steps), on how many copies of the env."""

    episodes: Annotated[Int, Field(gt=0, le=MAX_TRAINING_EPISODES)] | None = None
    steps: Annotated[Int, Field(gt=0, le=MAX_TRAINING_STEPS)] | None = None
    n_envs: Annotated[Int, Field(ge=1, le=MAX_N_ENVS)] = Field(
        default=1, description="copies of the environment the step learner trains on at once, "
        "their observations adapted in one batch (steps count the steps of all copies)")

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
    same for every run (see :class:`~langadapt.experiments.one_run.HeldOutEpisodes`)."""

    first: Annotated[Int, Field(ge=0, le=MAX_HELDOUT_SEED)]
    count: Annotated[Int, Field(gt=0, le=MAX_EVALUATION_EPISODES)]

    @property
    def seeds(self) -> range:
        return range(self.first, self.first + self.count)


class TransferSpec(_Strict):
    """A second final evaluation, on other environment parameters (missions, layouts never
    trained on): the final policy plays these held-out episodes, rows of phase ``transfer``."""

    environment_params: dict[str, Any] = Field(
        min_length=1, description="environment parameters of the transfer evaluation, over "
        "environment.params (e.g. {missions: test}: GLAM's test missions of BabyAI)")
    heldout_seeds: HeldOutSeeds


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
    transfer: TransferSpec | None = Field(
        default=None,
        description="after the final evaluation, the final policy also plays these held-out "
        "episodes on other environment parameters ('transfer' rows)",
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
    def _import_user_modules(cls, data: Any, info: ValidationInfo) -> Any:
        """The ``imports`` first: the environment id may be one they register."""
        names = data.get("imports") if isinstance(data, dict) else None
        if isinstance(names, list) and not data_only(info):
            import_user_modules(names, home=home(info))
        return data

    @field_validator("output", "cache_dir")
    @classmethod
    def _path_fits(cls, value: str) -> str:
        """A path the file system can hold (Linux's NAME_MAX 255 and PATH_MAX 4096)."""
        return check_path(value)

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
    def _cache_folder(cls, value: str, info: ValidationInfo) -> str:
        """A folder, or a path where one can be made (not a file, nor under one), whose
        store file is not a link, a directory or another program's database."""
        path = Path(value).expanduser()
        for part in (path, *path.parents) if value else ():
            if part.is_dir():
                break
            if part.exists():
                raise ValueError(f"{value!r}: {str(part)!r} is a file; expected a folder for "
                                 "the caches (or a path that does not exist yet)")
        if value and not data_only(info):
            from ..llm.store import check_store_file  # local: the CLI starts without llm/

            check_store_file(path / STORE_FILE)  # a CacheError is a ValueError: one line
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
        """One clear error for seeds that are not integers (not one per union member)."""
        items = value if isinstance(value, list) else [value]
        for position, item in enumerate(items):
            if isinstance(item, bool) or not isinstance(item, int):
                where = f" (item {position})" if isinstance(value, list) else ""
                raise ValueError(
                    f"expected a list of integer seeds or a count, got {shown(item)}{where}"
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
        transfer = self.evaluation.transfer
        during = self.evaluation.every is not None or self.evaluation.every_steps is not None
        copies = max(self.training_for(agent).n_envs for agent in self.agents)
        for held in (self.evaluation.heldout_seeds, transfer and transfer.heldout_seeds):
            if held is not None:
                check_heldout(held.seeds, self.seed_list, during, copies)
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
        for block in (data["training"], *(a.get("training") or {} for a in data["agents"])):
            if block.get("n_envs") == 1:  # as before n_envs: old folders resume
                del block["n_envs"]
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
