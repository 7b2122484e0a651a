"""Checks of an experiment file beyond its schema: agent hyperparameters and adapter
settings against the agents' and adapters' own pydantic models, and the LLM roles'
blocks, so a typo fails before anything is written."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal

import gymnasium
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from ..adapters import LanguageAdapter
from ..adapters.llm import llm_setting_models
from ..adapters.representation import check_representation
from ..agents import AGENTS, SB3Agent
from ..agents.base import Agent
from ..agents.loop import check_demonstrations
from ..finetune.agent import check_grpo  # importing finetune registers the grpo agent
from ..llm import BACKENDS
from ..roles.advisor import AdvisorConfig
from ..roles.instructions import InstructionsConfig, load_instruction_set
from ..roles.llm_policy import LLMPolicy
from ..roles.policy_search import LLMPolicySearch
from ..roles.reward_shaping import RewardShapingConfig
from .config_errors import ConfigError, format_validation_error
from .schema import AdapterSpec, AgentSpec, ExperimentConfig, _Strict


def check_component_settings(config: ExperimentConfig, source: Path | str) -> None:
    """Validate agent hyperparameters and adapter settings against the pydantic models of
    the agents and adapters themselves, so a typo fails before anything is written."""
    for index, spec in enumerate(config.agents):
        checks = [("params", spec.params)] + [
            (f"per_adapter.{name}", spec.params_for(name)) for name in spec.per_adapter
        ]
        for where, params in checks:
            _validate(AGENTS[spec.type].config_model, params, source, f"agents.{index}.{where}.")
        _check_llm_roles(config, index, spec, source)
        _check_copies(config, index, spec, source)
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
        try:
            check_demonstrations(AGENTS[spec.type],
                                 spec.advisor.get("learn_as") == "demonstrations"
                                 or bool(spec.advisor.get("until_confident")))
        except ValueError as error:
            raise ConfigError(f"{source}: agents.{index}.advisor.learn_as: {error}") from None
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


def _check_copies(config: ExperimentConfig, index: int, spec: AgentSpec, source: Any) -> None:
    """``n_envs`` > 1 only for an agent whose learner takes copies (qlearning, dqn, random,
    sb3), without an advisor or instructions."""
    n_envs = config.training_for(spec).n_envs
    if n_envs == 1:
        return
    key = f"agents.{index}.training.n_envs" if spec.training is not None else "training.n_envs"
    cls = AGENTS[spec.type]
    if (spec.type == "grpo" or cls.learner is not Agent.learner
            and not issubclass(cls, SB3Agent)
            or issubclass(cls, (LLMPolicy, LLMPolicySearch))):
        raise ConfigError(f"{source}: {key}: {n_envs} copies of the environment need an agent "
                          "whose learner takes copies (qlearning, dqn, random, sb3), "
                          f"but agents.{index} is {spec.type}; set n_envs: 1 for it")
    if spec.advisor is not None:
        raise ConfigError(f"{source}: {key}: an advisor advises one environment, but "
                          f"agents.{index} has an advisor block and n_envs {n_envs}; set "
                          "n_envs: 1 or remove the advisor")
    if config.environment.instructions is not None:
        raise ConfigError(f"{source}: {key}: instructions follow one environment, but the file "
                          f"has environment.instructions and n_envs {n_envs}; set n_envs: 1 or "
                          "remove the instructions")


def _check_grpo(config: ExperimentConfig, index: int, spec: AgentSpec, source: Any) -> None:
    """A grpo agent only on an environment with a language spec that GRPO can restart
    (a maze, FrozenLake, a MiniGrid or BabyAI level), with a reward to learn from and, on a
    slippery lake, its held-out seeds named (`finetune.agent.check_grpo`)."""
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
            format_validation_error(source, error, settings_model, loc_prefix)) from None
