"""The experiment file: read (bounded YAML), changed by the command line's overrides
(``--set``) and validated once into an :class:`~.schema.ExperimentConfig`, then the agents'
and adapters' settings against their own pydantic models and the checks that need the
built components; every error names the file, the key path and what was expected (one
line per bad key). See docs/configuration.md.
"""

from __future__ import annotations

import functools
import json
import typing
from pathlib import Path
from typing import Any, Literal

import gymnasium
import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from ..adapters import LanguageAdapter
from ..adapters.llm import llm_setting_models
from ..adapters.memory import Memory
from ..adapters.representation import check_representation
from ..agents import AGENTS, SB3Agent
from ..agents.base import Agent
from ..agents.loop import check_demonstrations
from ..environments.minigrid import is_minigrid_id
from ..environments.user_code import import_user_modules, suggest
from ..errors import error_lines
from ..finetune.agent import check_grpo  # importing finetune registers the grpo agent
from ..llm import BACKENDS
from ..roles.advisor import AdvisorConfig
from ..roles.instructions import InstructionsConfig, load_instruction_set
from ..roles.llm_policy import LLMPolicy
from ..roles.oracles import oracle_for
from ..roles.policy_search import LLMPolicySearch
from ..roles.reward_shaping import RewardShapingConfig
from .schema import AdapterSpec, AgentSpec, ConfigError, ExperimentConfig, UsageError, shown

MAX_FILE_BYTES = 4_000_000
"""Largest experiment file read (the shipped ones are below 5 kB)."""


def experiment_from_dict(data: Any, source: Path | str = "<config>",
                         data_only: bool = False, home: Path | None = None) -> ExperimentConfig:
    """Validate an already-loaded mapping; errors name ``source`` and the key path.

    ``data_only``: the file is a results folder's, read as data — no module it names is
    imported (``imports:``, a ``module:EnvId``) and the agents' and adapters' settings are
    not checked against their classes (the run that wrote it did). ``home``: the folder of
    the file read; no module not imported yet whose code lies in its tree is imported."""
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: expected a mapping of keys (name, environment, adapters, ...), "
            f"got {type(data).__name__}"
        )
    try:
        config = ExperimentConfig.model_validate(
            data, context={"data_only": data_only, "home": home})
    except ValidationError as error:
        raise ConfigError(invalid_file(source, error, ExperimentConfig)) from None
    if not data_only:
        check_component_settings(config, source)
    return config


def worker_config(data: dict[str, Any]) -> ExperimentConfig:
    """A config the driver validated (its :meth:`~ExperimentConfig.resolved` data), rebuilt
    in a worker process: its ``imports`` imported (they register the user's environments in
    a fresh process), the settings and the store not checked again."""
    import_user_modules(data.get("imports") or [])
    return experiment_from_dict(data, "config.yaml", data_only=True)


def load_config(path: str | Path, data_only: bool = False) -> ExperimentConfig:
    """Read and validate an experiment YAML file (``data_only``: see
    :func:`experiment_from_dict`)."""
    return experiment_from_dict(read_file(path), path, data_only, Path(path).parent)


def read_file(path: str | Path) -> Any:
    """The YAML data of an experiment file, not validated yet (a ConfigError naming the file
    when it is missing, too large, not UTF-8 or not YAML)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: no such experiment file")
    if not path.is_file():  # (a fifo would block the read)
        kind = "a directory" if path.is_dir() else "not a regular file"
        raise ConfigError(f"{path} is {kind}; expected an experiment YAML file")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ConfigError(f"{path}: {size:,} bytes; expected an experiment file of at most "
                          f"{MAX_FILE_BYTES:,} bytes")
    try:
        return load_yaml(path.read_bytes().decode("utf-8"), path)
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{path}: not a UTF-8 text file (byte {error.start}: {error.reason}); save it as UTF-8"
        ) from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML: {' '.join(str(error).split())}") from None


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
    text = shown(value)
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


def invalid_file(path: Path | str, error: ValidationError, model: type[BaseModel],
                 prefix: str = "") -> str:
    """``path: invalid experiment file`` and one `error_lines` line per error (key paths after
    ``prefix``), the closest known key named for an unknown one."""
    def closest(loc: tuple[Any, ...]) -> str:
        return suggest(str(loc[-1]), _keys_at(model, loc[:-1]))

    lines = error_lines(error, prefix=prefix, unknown=closest)
    return "\n  ".join([f"{path}: invalid experiment file", *lines])


# ------------------------------------------------ the bounded YAML reader


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


# ------------------------------------------------ agents' and adapters' settings


def check_component_settings(config: ExperimentConfig, source: Path | str) -> None:
    """Validate agent hyperparameters and adapter settings against the pydantic models of
    the agents and adapters themselves, so a typo fails before anything is written."""
    for index, spec in enumerate(config.agents):
        model = AGENTS[spec.type].config_model
        params = _validate(model, spec.params, source, f"agents.{index}.params.")
        for name in spec.per_adapter:
            _validate(model, spec.params_for(name), source, f"agents.{index}.per_adapter.{name}.")
        _check_llm_roles(config, index, spec, source)
        if spec.type == "grpo":
            _check_grpo(config, index, spec, params, source)
        _check_copies(config, index, spec, source)
        _check_extractors(config, index, spec, source)
        if spec.type == "oracle":
            _check_oracle(config, index, source)
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
        advisor = _validate(AdvisorConfig, spec.advisor, source, f"agents.{index}.advisor.")
        try:
            check_demonstrations(AGENTS[spec.type], advisor.learn_as == "demonstrations"
                                 or advisor.until_confident)
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


SET_EXTRACTORS = ("sentence_attention", "sentence_grounded")
"""The features extractors that read a sentence set."""


def _check_extractors(config: ExperimentConfig, index: int, spec: AgentSpec, source: Any
                      ) -> None:
    """An sb3 agent's ``extractor`` only with adapters whose observations it reads:
    ``sentence_attention`` and ``sentence_grounded`` a language/llm adapter with
    ``embedding: sentence_set``,
    ``babyai11`` raw views of a MiniGrid/BabyAI level."""
    if spec.type != "sb3":
        return
    minigrid = is_minigrid_id(config.environment.id)
    for adapter in config.adapters:
        extractor = spec.params_for(adapter.name).get("extractor")
        embedding = adapter.settings.get("embedding", "the default")
        fits = (extractor is None
                or extractor in SET_EXTRACTORS and embedding == "sentence_set"
                or extractor == "babyai11" and adapter.type == "raw" and minigrid)
        if not fits:
            observation = (f"raw views of {config.environment.id}" if adapter.type == "raw"
                           else f"{adapter.type} states with embedding: {embedding}")
            expected = ("a language or llm adapter with embedding: sentence_set"
                        if extractor in SET_EXTRACTORS else
                        "raw views of a MiniGrid/BabyAI level (adapter type raw)")
            raise ConfigError(
                f"{source}: agents.{index}: extractor {extractor} cannot read adapter "
                f"{adapter.name}'s observations ({observation}); it takes {expected} (set it "
                f"for that adapter alone with per_adapter: {{{adapter.name}: {{extractor: "
                "...}})")


SB3_OFF_POLICY = ("DQN", "SAC", "TD3")
"""SB3's off-policy algorithms: langadapt trains them on one copy of the environment."""


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
    off_policy = sorted({spec.params_for(a.name).get("algorithm") for a in config.adapters}
                        & set(SB3_OFF_POLICY)) if issubclass(cls, SB3Agent) else []
    if off_policy:
        raise ConfigError(f"{source}: {key}: agents.{index} is SB3's {off_policy[0]}, trained "
                          f"here on one copy of the environment, but n_envs is {n_envs}; set "
                          "n_envs: 1 for it (PPO, A2C and MaskablePPO train on copies)")
    if spec.advisor is not None:
        raise ConfigError(f"{source}: {key}: an advisor advises one environment, but "
                          f"agents.{index} has an advisor block and n_envs {n_envs}; set "
                          "n_envs: 1 or remove the advisor")
    if config.environment.instructions is not None:
        raise ConfigError(f"{source}: {key}: instructions follow one environment, but the file "
                          f"has environment.instructions and n_envs {n_envs}; set n_envs: 1 or "
                          "remove the instructions")


def _check_grpo(config: ExperimentConfig, index: int, spec: AgentSpec, params: Any,
                source: Any) -> None:
    """A grpo agent (``params``: its validated settings) only on an environment with a
    language spec that GRPO can restart (a maze, FrozenLake, a MiniGrid or BabyAI level),
    with a reward to learn from and, on a slippery lake, its held-out seeds named
    (`finetune.agent.check_grpo`)."""
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
        check_grpo(env, params)
    except ValueError as error:
        raise ConfigError(f"{source}: agents.{index} (grpo on {env_spec.id}): {error}") from None


def _check_oracle(config: ExperimentConfig, index: int, source: Any) -> None:
    """An oracle agent only on an environment with an oracle (`roles.oracles.oracle_for`)."""
    env_spec = config.environment
    try:
        env = gymnasium.make(env_spec.id, **env_spec.params)
    except (TypeError, ValueError, gymnasium.error.Error):
        return  # bad environment params are reported when the run starts
    try:
        oracle_for(env, role=f"agents.{index} (type oracle)")
    except ValueError as error:
        raise ConfigError(f"{source}: {error}") from None
    finally:
        env.close()


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
        return [(RawSettings, spec.settings)]
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


class RawSettings(BaseModel):
    """The raw adapter's one setting."""

    model_config = ConfigDict(extra="forbid")
    memory: Memory | None = None


class _BackendSetting(BaseModel):
    model_config = ConfigDict(extra="forbid")
    backend: Literal["ollama", "llamacpp", "openai", "transformers", "auto"]


def _validate(model: type[BaseModel], data: dict[str, Any], source: Path | str,
              loc_prefix: str) -> Any:
    """``data`` validated by ``model``'s fields (the instance); one-line ConfigError."""
    settings_model = _settings_model(model)
    try:
        return settings_model.model_validate(data)
    except ValidationError as error:
        raise ConfigError(
            invalid_file(source, error, settings_model, loc_prefix)) from None


# ------------------------------------------------ command-line overrides (before validation)


ROLE_BACKEND_PARAMS = {"llm_policy": "backend", "llm_policy_search": "llm"}
"""The agent parameter holding the backend spec, per LLM agent type."""

BACKEND_KEYS = frozenset({"backend", *ROLE_BACKEND_PARAMS.values()})
"""Keys whose value is a backend spec: a name there is the mapping ``{backend: name}`` to a
``--set`` that goes inside it."""

BUDGET_KEYS = ("steps", "episodes")
"""A training block's budget: exactly one of these."""


def apply_set(data: dict[str, Any], assignment: str) -> None:
    """Apply one ``KEY=VALUE`` to ``data`` (the experiment's mapping) in place."""
    key, equals, text = assignment.partition("=")
    parts = key.strip().split(".")
    if not equals or not all(parts):
        raise UsageError(f"--set {assignment!r}: expected KEY=VALUE with a dotted KEY, e.g. "
                         "--set training.steps=3000")
    try:  # the files' bounded loader: an alias bomb is refused before it expands
        value = load_yaml(text, f"--set {key}") if text.strip() else ""
    except yaml.YAMLError as error:
        raise UsageError(f"--set {key}: {text!r} is not a YAML value "
                         f"({' '.join(str(error).split())})") from None
    current: Any = data
    for depth, part in enumerate(parts):
        where = ".".join(parts[:depth]) or "the file"
        last = depth == len(parts) - 1
        if isinstance(current, list):
            index = _item(current, part, key, where)
            if last:
                current[index] = value
            current = current[index]
        elif isinstance(current, dict):
            if last:
                current[part] = value  # an unknown key is named by the validation
            elif current.get(part) is None:
                current[part] = {}
            elif part in BACKEND_KEYS and current[part] in (*BACKENDS, "auto"):
                current[part] = {"backend": current[part]}  # --set ...backend.model=X
            current = current[part]
        else:
            raise UsageError(f"--set {key}: {where} is {json.dumps(current)}, not a mapping or a "
                             f"list, so it has no key {part!r}")


def spread_budget(data: dict[str, Any], assignment: str) -> list[str]:
    """After ``--set training.steps=N`` (or ``training.episodes=N``): that budget in the
    file's training block and in every agent's own block (the other budget key dropped,
    ``n_envs`` kept), so the override shrinks every run; the agents whose own block changed
    (nothing for any other assignment)."""
    key, _, _ = assignment.partition("=")
    parts = key.strip().split(".")
    if len(parts) != 2 or parts[0] != "training" or parts[1] not in BUDGET_KEYS:
        return []
    budget, other = parts[1], BUDGET_KEYS[1 - BUDGET_KEYS.index(parts[1])]
    value = data["training"][budget]
    data["training"].pop(other, None)
    changed = []
    for agent in listed(data.get("agents")):  # another type: named by the validation
        block = agent.get("training") if isinstance(agent, dict) else None
        if isinstance(block, dict):
            block.pop(other, None)
            block[budget] = value
            changed.append(agent_name(agent))
    return changed


def _item(items: list[Any], part: str, key: str, where: str) -> int:
    """The position in ``items`` that ``part`` names: a number, or an item's label/type."""
    if part.isdigit() and int(part) < len(items):
        return int(part)
    names = [agent_name(item) for item in items]
    if part in names:
        return names.index(part)
    known = [n for n in names if n]
    raise UsageError(f"--set {key}: {where} has no item {part!r}{suggest(part, known)}; "
                     f"give a position 0..{len(items) - 1} or a name: {', '.join(known)}")


def listed(value: Any) -> list[Any]:
    """``value`` if it is a list, else ``[]`` (a wrong type is named by the validation)."""
    return value if isinstance(value, list) else []


def agent_name(item: Any) -> str:
    if not isinstance(item, dict):
        return ""
    return str(item.get("label") or item.get("type") or "")


def select_tasks(data: dict[str, Any], text: str, source: str) -> None:
    """Keep only the tasks ``text`` names (comma-separated), in that order."""
    tasks = data.get("tasks") or {}
    if not tasks:
        raise UsageError(f"--tasks: {source} is not a suite (it has no tasks block)")
    wanted = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in tasks]
    if unknown or not wanted:
        raise UsageError(f"--tasks {text}: {source} has no task "
                         f"{', '.join(map(repr, unknown)) or 'named'}; its tasks: "
                         f"{', '.join(tasks)}")
    data["tasks"] = {name: tasks[name] for name in dict.fromkeys(wanted)}


def set_backend(data: dict[str, Any], spec: dict[str, Any], source: str) -> int:
    """Replace the backend spec of every LLM agent and advisor by ``spec``; returns how
    many were replaced (a UsageError when the file has none)."""
    changed = 0
    for agent in listed(data.get("agents")):
        if not isinstance(agent, dict):
            continue  # named by the validation
        key = ROLE_BACKEND_PARAMS.get(agent.get("type"))
        if key is not None:
            agent.setdefault("params", {})[key] = dict(spec)
            changed += 1
        if isinstance(agent.get("advisor"), dict):
            agent["advisor"]["backend"] = dict(spec)
            changed += 1
    if not changed:
        raise UsageError(f"--backend: {source} has no LLM agent ({', '.join(ROLE_BACKEND_PARAMS)}) "
                         "and no advisor whose backend it could set; set an llm adapter's or "
                         "reward shaping's backend with --set")
    return changed
