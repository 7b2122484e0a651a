"""The experiment file: pydantic models for one YAML file, and loading it with clear errors.

An experiment names one environment, the adapters to compare, the agents, how long to
train, the seeds and how to evaluate. Every (adapter x agent x seed) combination is one
run. Unknown keys are errors; every error names the file, the key path and what was
expected.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class ConfigError(ValueError):
    """An experiment file that cannot be used; the message names the file and the key."""


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

    id: str = Field(description="gymnasium id, e.g. langadapt/Maze-v0")
    params: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the env")

    @field_validator("id")
    @classmethod
    def _known_id(cls, value: str) -> str:
        import gymnasium

        import langadapt.environments  # noqa: F401  (registers the langadapt ids)

        if value not in gymnasium.registry:
            ours = sorted(k for k in gymnasium.registry if k.startswith("langadapt/"))
            raise ValueError(
                f"unknown environment {value!r}; expected one of {', '.join(ours)} "
                "(or any other registered gymnasium id)"
            )
        return value


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
    """One learner: ``qlearning``, ``dqn`` or ``random``, with its hyperparameters."""

    type: Literal["qlearning", "dqn", "random"]
    label: Label | None = Field(default=None, description="name in tables and plots; default: type")
    params: dict[str, Any] = Field(default_factory=dict, description="hyperparameters")
    per_adapter: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="hyperparameters that differ for one adapter, by adapter name (e.g. "
        "Q-learning bins for the raw continuous state only)",
    )

    @property
    def name(self) -> str:
        return self.label or self.type

    def params_for(self, adapter: str) -> dict[str, Any]:
        """The hyperparameters of this agent when it learns from ``adapter``'s states."""
        return {**self.params, **self.per_adapter.get(adapter, {})}


class TrainingSpec(_Strict):
    """How long each run trains: a number of episodes or of environment steps."""

    episodes: Annotated[int, Field(gt=0)] | None = None
    steps: Annotated[int, Field(gt=0)] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> TrainingSpec:
        if (self.episodes is None) == (self.steps is None):
            raise ValueError(
                f"give exactly one of episodes or steps (got episodes={self.episodes}, "
                f"steps={self.steps})"
            )
        return self


class EvaluationSpec(_Strict):
    """Greedy evaluation during training and at the end."""

    every: Annotated[int, Field(gt=0)] | None = Field(
        default=None, description="evaluate greedily every this many training episodes"
    )
    episodes: Annotated[int, Field(gt=0)] = Field(default=5, description="episodes per evaluation")
    final_episodes: Annotated[int, Field(gt=0)] = Field(
        default=20, description="greedy episodes of the final evaluation"
    )
    threshold: float | None = Field(
        default=None,
        description="'episodes to threshold' counts training episodes until an evaluation's "
        "mean return reaches this; default: until an evaluation succeeds in every episode",
    )


class ExperimentConfig(_Strict):
    """One experiment file."""

    name: str
    description: str = ""
    environment: EnvironmentSpec
    adapters: list[AdapterSpec] = Field(min_length=1)
    agents: list[AgentSpec] = Field(min_length=1)
    training: TrainingSpec
    seeds: list[int] | int = Field(
        default=3, description="a list of seeds, or a count n meaning seeds 0..n-1"
    )
    evaluation: EvaluationSpec = Field(default_factory=EvaluationSpec)
    output: str = Field(default="", description="results folder; default results/<name>")
    cache_dir: str = Field(
        default=".langadapt-cache",
        description="persistent description and embedding caches, shared between runs",
    )
    torch_threads: Annotated[int, Field(gt=0)] = Field(
        default=1,
        description="torch threads per run; small networks train fastest on one, and a "
        "second thread fighting other processes for a core can slow a step tenfold",
    )

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

    @field_validator("seeds")
    @classmethod
    def _usable_seeds(cls, value: list[int] | int) -> list[int] | int:
        if isinstance(value, int):
            if value <= 0:
                raise ValueError(f"a seed count must be positive, got {value}")
            return value
        if not value:
            raise ValueError("the seed list is empty; give at least one seed, or a count")
        negative = [seed for seed in value if seed < 0]
        if negative:
            raise ValueError(f"seeds must be >= 0, got {negative}")
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
        return self

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
        """A hash of what determines the results (not the output folder)."""
        data = self.resolved()
        data.pop("output")
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def _require_unique(names: list[str], what: str) -> None:
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        hint = "; give each a distinct 'label'" if what.endswith("names") else ""
        raise ValueError(
            f"{what} must be unique, {', '.join(repeated)} appears more than once{hint}"
        )


def _format_validation_error(
    path: Path | str, error: ValidationError, loc_prefix: str = ""
) -> str:
    lines = [f"{path}: invalid experiment file"]
    for item in error.errors():
        where = loc_prefix + ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown key"
        elif item["type"] == "value_error":
            message = str(item.get("ctx", {}).get("error", message))
        elif item["type"] == "literal_error":
            message = f"got {item.get('input')!r}; {message.lower()}"
        lines.append(f"  {where}: {message}")
    return "\n".join(lines)


def parse_config(data: Any, source: Path | str = "<config>") -> ExperimentConfig:
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
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML: {error}") from None
    return parse_config(data, path)


def _check_component_settings(config: ExperimentConfig, source: Path | str) -> None:
    """Validate agent hyperparameters and adapter settings against the pydantic models of
    the agents and adapters themselves, so a typo fails before anything is written."""
    from langadapt.agents import AGENTS

    for index, spec in enumerate(config.agents):
        checks = [("params", spec.params)] + [
            (f"per_adapter.{name}", spec.params_for(name)) for name in spec.per_adapter
        ]
        for where, params in checks:
            _validate(AGENTS[spec.type].config_model, params, source, f"agents.{index}.{where}.")
    for index, adapter in enumerate(config.adapters):
        where = f"adapters.{index}.settings."
        for model, settings in _adapter_setting_models(adapter):
            _validate(model, settings, source, where)


def _adapter_setting_models(spec: AdapterSpec) -> list[tuple[type[BaseModel], dict[str, Any]]]:
    """(pydantic model, settings it must accept) pairs for one adapter entry."""
    if spec.type == "raw":
        return [(_NoSettings, spec.settings)]
    if spec.type == "language":
        from langadapt.adapters import LanguageAdapter

        return [(LanguageAdapter, spec.settings)]
    from langadapt.adapters.llm import llm_setting_models

    backend = spec.settings.get("backend", "auto")
    if backend not in ("ollama", "llamacpp", "auto"):
        return [(_BackendSetting, {"backend": backend})]
    # auto: the settings must suit whichever backend is picked
    return llm_setting_models(spec.settings)


class _NoSettings(_Strict):
    """The raw adapter takes no settings."""


class _BackendSetting(_Strict):
    backend: Literal["ollama", "llamacpp", "auto"]


def _validate(
    model: type[BaseModel], data: dict[str, Any], source: Path | str, loc_prefix: str
) -> None:
    try:
        model.model_validate(data)
    except ValidationError as error:
        raise ConfigError(_format_validation_error(source, error, loc_prefix)) from None
