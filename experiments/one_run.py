"""One run of an experiment: build its environment, adapter, agent and LLM roles, train and
evaluate, and hand back its episode rows and the summary ``done.json`` records.

:func:`execute_run` is what a process-pool worker (or the driver, with one job) calls;
:func:`train_run` is the part the Ray executor's workers share. Every embedding and LLM
answer of the run goes to the one store in ``cache_dir`` (:data:`STORE_FILE`;
docs/configuration.md, "Your own environment": `cache_dir`).
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gymnasium
import torch

from .. import (
    adapters,
    agents,
    environments,  # noqa: F401  (registers the langadapt gymnasium ids)
)
from ..adapters import LanguageObservation
from ..adapters.representation import SentenceSetOverflow, check_set_size, sentences_of
from ..adapters.vector import LanguageVectorEnv
from ..agents.base import FILE_FORMAT, FILE_VERSION, agent_file_bytes
from ..agents.checkpoints import Checkpoint, Checkpoints, CheckpointUnfit
from ..errors import one_line
from ..llm import open_store
from ..roles.advisor import AdvisorConfig, LLMAdvisor
from ..roles.instructions import InstructionsConfig, follow_rate, prepare_instructions
from ..roles.reward_shaping import RewardShaping, RewardShapingConfig
from .config import ROLE_BACKEND_PARAMS, SB3_OFF_POLICY, worker_config
from .folders import inside, replacing, write_json
from .results import (
    CHECKPOINT_FILE,
    Run,
    find_run,
    fresh_run_dir,
    resumable,
    run_rows,
    set_aside,
    write_policies,
)
from .schema import STORE_FILE, AdapterSpec, AgentSpec, ConfigError, ExperimentConfig

FINAL_EVAL_SEED = 10_000
"""The final greedy evaluation resets with ``seed + FINAL_EVAL_SEED`` (evaluations during
training use ``EVAL_SEED_OFFSET``): held-out starts, the same for every run."""

OBSERVATION_TENSORS = "observation."
"""Prefix of the adapter's tensors in a kept policy file (its fitted normaliser)."""

OLD_STORE_FILES = ("descriptions.sqlite", "embeddings.sqlite")
"""The answer and embedding files of the previous layout (adopted into :data:`STORE_FILE`)."""


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


# ----------------------------------------------------------------------------- building


def make_env(config: ExperimentConfig, render_mode: str | None = None,
             evaluation: bool = False, over: dict[str, Any] | None = None):
    """The experiment's environment; ``evaluation``: with ``evaluation.environment_params``
    over ``environment.params``; ``over``: these parameters instead."""
    params = dict(config.environment.params)
    if evaluation:
        params.update(config.evaluation.environment_params)
    params.update(over or {})
    if render_mode is not None:
        params["render_mode"] = render_mode
    try:
        return gymnasium.make(config.environment.id, **params)
    except (TypeError, ValueError) as error:
        key = ("evaluation.transfer.environment_params" if over else
               "evaluation.environment_params" if evaluation else "environment.params")
        raise ConfigError(f"{key}: {error}") from None


def _cache_folder(cache_dir: str) -> Path:
    """The cache folder, made; one line if it became a file after the config was loaded."""
    folder = Path(cache_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ConfigError(f"cache_dir {cache_dir!r} is a file or lies under one; expected a "
                          "folder for the caches (or a path that does not exist yet)") from None
    old = [folder / name for name in OLD_STORE_FILES if (folder / name).is_file()]
    if old:
        open_store(folder / STORE_FILE, 1).adopt(old)
    return folder


def adapter_settings(spec: AdapterSpec, cache_dir: str) -> dict[str, Any]:
    """The keyword arguments for ``adapters.make``, with the shared cache folder filled in."""
    settings = dict(spec.settings)
    if spec.type not in ("language", "llm") or not cache_dir:
        return settings
    folder = _cache_folder(cache_dir)
    settings.setdefault("embedding_cache_path", str(folder / STORE_FILE))
    if spec.type == "llm":
        settings.setdefault("cache_path", str(folder / STORE_FILE))
    return settings


def backend_with_cache(spec: Any, cache_dir: str) -> Any:
    """A role's backend spec whose answers go to ``cache_dir``'s :data:`STORE_FILE`;
    unchanged without ``cache_dir``, when it names its own
    ``cache_path``, or when it is not a name or a dict."""
    if not cache_dir:
        return spec
    if isinstance(spec, str):
        spec = {"backend": spec}
    if not isinstance(spec, dict) or "cache_path" in spec:
        return spec
    return {**spec, "cache_path": str(_cache_folder(cache_dir) / STORE_FILE)}


def _block_with_cache(block: dict[str, Any], model: Any, cache_dir: str) -> dict[str, Any]:
    """An advisor or reward-shaping block with its ``backend`` caching in ``cache_dir``."""
    if not cache_dir:
        return block
    default = model.model_fields["backend"].default
    return {**block, "backend": backend_with_cache(block.get("backend", default), cache_dir)}


def agent_params(spec: AgentSpec, adapter: str, cache_dir: str) -> dict[str, Any]:
    """The agent's hyperparameters for ``adapter``, an LLM agent's backend caching in
    ``cache_dir``."""
    params = spec.params_for(adapter)
    key = ROLE_BACKEND_PARAMS.get(spec.type)
    if key is not None and cache_dir:
        default = agents.AGENTS[spec.type].config_model.model_fields[key].default
        params[key] = backend_with_cache(params.get(key, default), cache_dir)
    return params


def policy_bytes(agent: Any, adapter: Any) -> bytes:
    """The agent's saved form (as :meth:`Agent.save` writes it), with the adapter's fitted
    normaliser beside its tensors."""
    state, tensors = agent.get_state()
    header = {"format": FILE_FORMAT, "version": FILE_VERSION, **agent.header(), "state": state}
    standardiser = getattr(adapter, "_standardiser", None)
    if standardiser is not None:
        tensors = {**tensors, f"{OBSERVATION_TENSORS}mean": torch.from_numpy(standardiser.mean)}
        if standardiser.matrix is not None:
            tensors[f"{OBSERVATION_TENSORS}matrix"] = torch.from_numpy(standardiser.matrix)
    return agent_file_bytes(header, tensors)


def with_layout(params: dict[str, Any], adapter: Any, encoder: Any = None) -> dict[str, Any]:
    """``params`` with a features extractor told the adapter's layout: a set extractor its
    ``max_sentences``, the ``dimension`` of ``encoder`` (default the adapter's) and the kept
    ``numbers``; every extractor the adapter's memory (``frames``, ``actions``: the values of
    the last actions). A ConfigError when the file gives another (the rest of the
    observation would be read as something else)."""
    extractor = params.get("extractor")
    if extractor is None:
        return params
    layout: dict[str, int] = {}
    if extractor in ("sentence_attention", "sentence_grounded"):
        layout = {"max_sentences": adapter.max_sentences,
                  "dimension": (encoder or adapter.embedding_cache.encoder).dimension}
        if adapter.numbers:
            layout["numbers"] = adapter.numbers
    memory = adapter.memory
    if memory is not None and memory.observations > 1:
        layout["frames"] = memory.observations
    if memory is not None and memory.actions:
        layout["actions"] = memory.action_size(adapter.action_space)
    given = params.get("extractor_kwargs") or {}
    for key, value in layout.items():
        if key in given and given[key] != value:
            raise ConfigError(
                f"extractor_kwargs.{key}={given[key]!r}: the adapter's observation has "
                f"{key} {value}; leave it out (it is taken from the adapter) or change the "
                "adapter's setting")
    return {**params, "extractor_kwargs": {**layout, **given}}


def make_adapter(spec: AdapterSpec, env, cache_dir: str, n_envs: int = 1):
    """The run's adapter; an LLM adapter trained on ``n_envs`` copies keeps up to ``n_envs``
    requests in flight (at most 64) unless its settings name ``concurrency``."""
    settings = adapter_settings(spec, cache_dir)
    if spec.type == "llm" and n_envs > 1 and "concurrency" not in settings:
        settings["concurrency"] = max(4, min(n_envs, 64))
    return adapters.make(spec.type, env, **settings)


def wrap(env, adapter):
    return LanguageObservation(env, adapter)


# ----------------------------------------------------------------------------- the check

PACKAGED_ENCODER = SimpleNamespace(dimension=384, normalized=True)
"""What the packaged MiniLM (an adapter without ``encoder``) makes of an observation space:
:func:`check_build`'s stand-in, so that a check loads no model."""


def check_build(config: ExperimentConfig, env: Any, built: set[str] | None = None) -> None:
    """Build what a run builds before it trains, once per distinct (adapter, agent params):
    the adapter on ``env`` (the experiment's environment), its one input check of the first
    observation (a reset with the first seed; an llm adapter's prompt is not sent) and the
    agent on the adapter's observation space (an SB3 model with its policy, its replay buffer
    for one step), so that what ``--check`` passes runs. Nothing is trained, written or
    cached, no model is loaded for the packaged MiniLM (:data:`PACKAGED_ENCODER`) and an
    SB3 actor-critic skips its orthogonal initialisation (the same shapes). ``built``: the
    agents built already (a suite's other tasks), added to. A ConfigError naming the key and
    the value otherwise."""
    seed = config.seed_list[0]
    first = f"the first observation of {config.environment.id} (reset with seed {seed})"
    try:
        obs, info = env.reset(seed=seed)
    except AssertionError as error:  # gymnasium's checker of a registered environment's
        if "passive_env_checker" not in traceback.extract_tb(error.__traceback__)[-1].filename:
            raise
        raise ConfigError(f"environment: {first}: {one_line(error)}") from None
    space = env.action_space
    legal = info.get("legal_moves",
                     list(range(space.n)) if isinstance(space, gymnasium.spaces.Discrete)
                     else [])
    built = set() if built is None else built
    for i, spec in enumerate(config.adapters):
        where = f"adapters.{i} ({spec.name})"
        try:
            adapter = adapters.make(spec.type, env, **spec.settings)  # no cache: nothing written
        except ValueError as error:
            raise ConfigError(f"{where}: {one_line(error)}") from None
        try:
            if spec.type == "llm":  # the input check, not the prompt
                adapter.check_input((obs, legal, ()))
            else:
                text = adapter.describe(obs, legal, ())
                if getattr(adapter, "embedding", None) == "sentence_set":
                    check_set_size(text, sentences_of(text, "sentence_set",
                                                      adapter.text_source()),
                                   adapter.max_sentences, adapter.text_source())
        except SentenceSetOverflow as error:
            raise ConfigError(f"{where}.settings.max_sentences: {one_line(error)}") from None
        except ValueError as error:
            raise ConfigError(f"environment: {first}, as {where} checks it: "
                              f"{one_line(error)}") from None
        encoder = None if spec.type == "raw" or getattr(adapter, "encoder", None) is not None \
            else PACKAGED_ENCODER
        observations = (adapter.observation_space if encoder is None
                        else adapter.observation_space_with(encoder))
        for j, agent in enumerate(config.agents):
            try:
                params = with_layout(agent.params_for(spec.name), adapter,
                                     PACKAGED_ENCODER if spec.type == "raw" else encoder)
            except ConfigError as error:
                raise ConfigError(f"agents.{j}.params ({agent.name} on {where}): {error}"
                                  ) from None
            if agent.type == "sb3":
                params = _cheap_sb3(params)
            key = json.dumps([agent.type, params, repr(observations), repr(space), seed],
                             sort_keys=True, default=repr)
            if key in built:
                continue
            built.add(key)
            try:
                agents.make_agent(agent.type, observations, space, seed=seed, **params)
            except (ValueError, TypeError, AssertionError, NotImplementedError) as error:
                raise ConfigError(f"agents.{j}.params ({agent.name} on {where}'s observations, "
                                  f"a {type(observations).__name__} of shape "
                                  f"{observations.shape}): "
                                  f"{one_line(str(error).split(SB3_CHECKER_ADVICE)[0])}") from None


def _cheap_sb3(params: dict[str, Any]) -> dict[str, Any]:
    """An SB3 agent's ``params`` built as cheaply as the same shapes allow: the replay
    buffer of one step, an actor-critic without the orthogonal initialisation (a QR of
    each weight)."""
    algorithm = params.get("algorithm", "PPO")
    if algorithm in SB3_OFF_POLICY:
        return {**params, "buffer_size": 1}
    return {**params, "policy_kwargs": {**(params.get("policy_kwargs") or {}),
                                        "ortho_init": False}}


SB3_CHECKER_ADVICE = "\nIf you are using a custom environment"
"""Where SB3's advice to run its environment checker starts in its errors (left out)."""


# ----------------------------------------------------------------------------- one run


def _served_from_cache(stats: dict[str, float]) -> float:
    return stats.get("llm_cache_hits", 0) + stats.get("embedding_cache_hits", 0)


def train_run(
    config: ExperimentConfig,
    run: Run,
    on_row: Callable[[dict[str, Any]], None],
    run_dir: Path | None = None,
    resume: Checkpoint | None = None,
) -> dict[str, Any]:
    """Train and evaluate one combination, handing each episode's row to ``on_row``;
    returns what ``done.json`` records. ``run_dir``: where the run's pictures and its
    checkpoints go; ``resume``: the checkpoint it goes on from (its rows already written)."""
    torch.set_num_threads(config.torch_threads)
    raw_env = make_env(config)
    adapter = make_adapter(run.adapter, raw_env, config.cache_dir,
                           config.training_for(run.agent).n_envs)
    plan = _instruction_plan(config, run, adapter)  # its cost is in done.json, not the rows
    last_stats = _run_stats(adapter, plan)  # before shaping: its scoring counts in the rows
    env, eval_env, shaper = _environments(config, run, raw_env, adapter, plan)
    one = eval_env if isinstance(env, LanguageVectorEnv) else env  # the spaces of one copy
    agent = agents.make_agent(
        run.agent.type,
        one.observation_space,
        one.action_space,
        seed=run.seed,
        **with_layout(agent_params(run.agent, run.adapter.name, config.cache_dir), adapter),
    )
    advisor = None if run.agent.advisor is None else LLMAdvisor(
        _block_with_cache(run.agent.advisor, AdvisorConfig, config.cache_dir), seed=run.seed)
    # a misconfigured role fails before the first episode; an agent that does not learn
    # (random, oracle, a zero-shot LLM) acts only in the evaluation's one environment
    agent.bind(env if agent.learns else one)
    if advisor is not None:
        advisor.bind(env)
    started, cpu_started = time.perf_counter(), time.process_time()
    rows = 0 if resume is None else resume.rows
    cpu_before, wall_before = (0.0, 0.0) if resume is None else resume.spent

    def record(episode_record) -> None:
        nonlocal last_stats, rows
        stats = _run_stats(adapter, agent, advisor, shaper, plan)
        on_row(
            {
                "adapter": run.adapter.name,
                "agent": run.agent.name,
                "seed": run.seed,
                "phase": episode_record.phase,
                "episode": episode_record.episode,
                "return": repr(float(episode_record.return_)),
                "length": episode_record.length,
                "success": int(bool(episode_record.success)),
                "wall_time": f"{episode_record.wall_time:.6f}",
                "llm_calls": int(stats.get("llm_calls", 0) - last_stats.get("llm_calls", 0)),
                "cache_hits": int(_served_from_cache(stats) - _served_from_cache(last_stats)),
                "llm_fallbacks": int(
                    stats.get("llm_fallbacks", 0) - last_stats.get("llm_fallbacks", 0)
                ),
            }
        )
        rows += 1
        last_stats = stats

    scheduled = run.agent.type != "grpo"  # GRPO evaluates itself: its records come at the end
    if run.agent.type == "grpo":  # its own copies of the environment, its files in grpo/
        agent.make_env = lambda: make_env(config)
        agent.folder = run_dir and Path(run_dir) / "grpo"
    records = [] if not agent.learns else agents.train(  # a zero-shot policy: none
        agent,
        env,
        episodes=config.training_for(run.agent).episodes,
        steps=config.training_for(run.agent).steps,
        eval_every=config.evaluation.every if scheduled else None,
        eval_episodes=config.evaluation.episodes,
        seed=run.seed,
        progress=False,
        on_episode=record,
        **(_retention(config) if scheduled else {}),
        **({} if eval_env is env else {"eval_env": eval_env}),
        advisor=advisor,
        callbacks=[*_logs(config, run_dir, lambda: _run_stats(adapter, agent, advisor, shaper,
                                                              plan), resume),
                   *_checkpoints(config, run, run_dir, resume)],
    )
    final_env = _final_env(config, eval_env)
    keep = config.logging.policies and agent.learns
    policies = {}
    if getattr(records, "best", None) is not None:  # keep_best: the retained policy first
        if keep:
            policies["best"] = policy_bytes(agent, adapter)
        agents.evaluate(agent, final_env, episodes=config.evaluation.final_episodes,
                        seed=run.seed + FINAL_EVAL_SEED,  # episode: the evaluation that chose it
                        on_episode=_as(record, "best", records.best.episode))
        agent.restore(records.last_policy)
    if keep:
        policies["final"] = policy_bytes(agent, adapter)
    trained = sum(1 for r in records if r.phase == "train")
    agents.evaluate(agent, final_env, episodes=config.evaluation.final_episodes,
                    seed=run.seed + FINAL_EVAL_SEED,  # episode, as eval rows: training done
                    on_episode=_as(record, "final", trained))
    transfer = config.evaluation.transfer
    if transfer is not None:  # the final policy on other parameters' held-out episodes
        other = HeldOutEpisodes(wrap(make_env(config, over=transfer.environment_params),
                                     adapter), transfer.heldout_seeds.seeds)
        agents.evaluate(agent, other, episodes=transfer.heldout_seeds.count,
                        seed=run.seed + FINAL_EVAL_SEED,
                        on_episode=_as(record, "transfer", trained))
    env.close()
    return {
        "run": run.key,
        "rows": rows,
        # this process's (all its threads) and, resumed, what the checkpoint's had spent
        "wall_time": wall_before + time.perf_counter() - started,
        "cpu_seconds": cpu_before + time.process_time() - cpu_started,
        "adapter_stats": {k: float(v) for k, v in adapter.stats().items()},
        **({"adapter_descriptions": adapter.description_counts()}  # an LLM adapter's merges
           if hasattr(adapter, "description_counts") else {}),
        **_agent_log(agent),
        "llm_roles": {name: role.stats() for name, role in
                      (("agent", agent), ("advisor", advisor), ("reward_shaping", shaper),
                       ("instructions", plan))
                      if hasattr(role, "stats")},
        **_instructions_record(config, run, plan, agent, env, eval_env, run_dir),
        "policies": policies,  # written beside done.json, not into it
    }


def _as(record: Callable[[Any], None], phase: str, episode: int) -> Callable[[Any], None]:
    """``record`` of an evaluation's episodes as ``phase`` rows after ``episode`` training
    episodes, each written as it ends (an LLM policy's rows and calls come episode by
    episode, so progress and a crash see them)."""
    def one(episode_record: Any) -> None:
        episode_record.phase, episode_record.episode = phase, episode
        record(episode_record)
    return one


def _instruction_plan(config: ExperimentConfig, run: Run, adapter: Any) -> Any:
    """The run's instructions matched on its exploration (None without an ``instructions``
    block): on the adapter's own descriptions, or — for raw states — on rule-language
    descriptions of the same environment, matched by state."""
    block = config.environment.instructions
    if block is None:
        return None
    block = _block_with_cache(block, InstructionsConfig, config.cache_dir)
    if getattr(adapter, "describes_states", False):
        explorer = wrap(make_env(config), adapter)
    else:
        language = adapters.make("language", make_env(config), **adapter_settings(
            AdapterSpec(type="language"), config.cache_dir))
        explorer = wrap(make_env(config), language)
        block = {**block, "match_on": "state"}
    return prepare_instructions(block, explorer, seed=run.seed)


def _instructions_record(config: ExperimentConfig, run: Run, plan: Any, agent: Any,
                         env: Any, eval_env: Any, run_dir: Path | None) -> dict[str, Any]:
    """What ``done.json`` keeps of the instructions: the matches, their precision and recall
    against the ground truth, the exploration's cost, the first training episode that
    followed the chain and the greedy follow rate; the picture of the matched cells."""
    if plan is None:
        return {}
    if run_dir is not None and plan.maze is not None:
        plan.picture(Path(run_dir) / "instructions.png")
    follow = follow_rate(agent, eval_env, config.evaluation.final_episodes,
                         run.seed + FINAL_EVAL_SEED,
                         truth=None if plan.truth is None else [sorted(c) for c in plan.truth])
    return {"instructions": {**plan.report(), "follow": follow,
                             "first_success_episode": env.get_wrapper_attr(
                                 "first_success_episode")}}


def _environments(config: ExperimentConfig, run: Run, raw_env: Any, adapter: Any,
                  plan: Any = None) -> tuple[Any, Any, Any]:
    """(training env, evaluation env, shaper): the adapter's observations, reward shaping on
    the training env only (evaluation keeps the env's own reward), instruction following
    outside it (an evaluation copy that pays the chain only when the instruction is the
    task). With ``training.n_envs`` N > 1: the training env is a vector env of N copies
    (``raw_env`` first), each shaped on its own, and evaluation has a copy of its own."""
    n_envs = config.training_for(run.agent).n_envs
    if n_envs > 1:
        return _copies(config, run, raw_env, adapter, n_envs)
    env = eval_env = wrap(raw_env, adapter)
    held_out = bool(config.evaluation.environment_params)
    if held_out:
        eval_env = wrap(make_env(config, evaluation=True), adapter)
    shaper = None
    shaping = run.agent.reward_shaping or config.environment.reward_shaping
    if shaping is not None:
        shaper = RewardShaping(raw_env,
                               _block_with_cache(shaping, RewardShapingConfig, config.cache_dir))
        shaper.prepare()
        env, eval_env = wrap(shaper, adapter), wrap(make_env(config, evaluation=held_out),
                                                    adapter)
    if plan is not None:
        env = plan.wrap(env)
        eval_env = plan.wrap(wrap(make_env(config, evaluation=held_out), adapter),
                             pay=plan.config.form == "instruction")
    return env, eval_env, shaper


def _copies(config: ExperimentConfig, run: Run, raw_env: Any, adapter: Any,
            n_envs: int) -> tuple[LanguageVectorEnv, Any, Any]:
    """``_environments`` for N copies (no instructions: a config check rules them out)."""
    shaping = run.agent.reward_shaping or config.environment.reward_shaping
    copies, shapers = [raw_env, *(make_env(config) for _ in range(n_envs - 1))], []
    if shaping is not None:
        block = _block_with_cache(shaping, RewardShapingConfig, config.cache_dir)
        shapers = [RewardShaping(copy, block) for copy in copies]
        for shaper in shapers:
            shaper.prepare()
        copies = shapers
    eval_env = wrap(make_env(config, evaluation=bool(config.evaluation.environment_params)),
                    adapter)
    return LanguageVectorEnv(copies, adapter), eval_env, _Summed(shapers) if shapers else None


class _Summed:
    """Roles of one kind (the copies' shapers) counted as one: their ``stats()`` summed."""

    def __init__(self, roles: list[Any]) -> None:
        self.roles = roles

    def stats(self) -> dict[str, float]:
        return _summed_stats(self.roles)


def _final_env(config: ExperimentConfig, eval_env: Any) -> Any:
    """The final evaluation's environment: the held-out episodes when the experiment names
    them, else ``eval_env`` (seeded with ``seed + FINAL_EVAL_SEED``)."""
    held = config.evaluation.heldout_seeds
    return eval_env if held is None else HeldOutEpisodes(eval_env, held.seeds)


def _run_stats(adapter: Any, agent: Any, *others: Any) -> dict[str, float]:
    """The adapter's counters plus the LLM counters of the agent (LLM policy search, LLM
    policy, advisor) and of the reward shaping."""
    return _summed_stats((adapter, agent, *others))


def _summed_stats(sources: Any) -> dict[str, float]:
    """The ``stats()`` of ``sources`` (those that have it) added key by key."""
    total: dict[str, float] = {}
    for source in sources:
        for key, value in (source.stats() if hasattr(source, "stats") else {}).items():
            total[key] = total.get(key, 0) + value
    return total


def _agent_log(agent: Any) -> dict[str, Any]:
    """What ``done.json`` keeps of an LLM policy search: its counters and every round."""
    if not hasattr(agent, "round_log"):
        return {}
    return {"agent_stats": agent.stats(), "rounds": agent.round_log}


def _logs(config: ExperimentConfig, run_dir: Path | None,
          counters: Callable[[], dict[str, float]],
          resume: Checkpoint | None = None) -> list[agents.Callback]:
    """The run's TensorBoard log in ``runs/<run>/tb/`` when the experiment asks for it
    (``logging.tensorboard``; not under Ray, whose runs have no folder of their own here);
    resumed, the events past the checkpoint's step are purged (TensorBoard's purge_step)."""
    if not config.logging.tensorboard or run_dir is None:
        return []
    return [agents.TensorBoardLog(Path(run_dir) / "tb", counters=counters,
                                  purge_step=None if resume is None else resume.steps)]


def _checkpoints(config: ExperimentConfig, run: Run, run_dir: Path | None,
                 resume: Checkpoint | None) -> list[agents.Callback]:
    """The run's checkpoints in ``runs/<run>/checkpoint.safetensors`` on the schedule of
    ``logging`` (not under Ray, whose runs have no folder here; not for agents that do not
    learn step by step in a learner's loop: GRPO keeps its own)."""
    every_steps = config.logging.checkpoint_every_steps
    minutes = config.logging.checkpoint_every_minutes
    if run_dir is None or run.agent.type == "grpo" or (every_steps is None and minutes is None):
        return []
    out_dir, relative = Path(run_dir).parent.parent, Path("runs") / run.key / CHECKPOINT_FILE

    def save(data: bytes) -> None:
        with replacing(out_dir, relative) as temporary:
            temporary.write_bytes(data)

    return [Checkpoints(save, every_steps, None if minutes is None else 60 * minutes, resume,
                        run_identity(config, run))]


def _retention(config: ExperimentConfig) -> dict[str, Any]:
    """``agents.train``'s step-based evaluation and best-policy retention settings, if set."""
    spec = config.evaluation
    if spec.every_steps is None and not spec.keep_best:
        return {}
    return {"eval_every_steps": spec.every_steps, "keep_best": spec.keep_best}


def run_identity(config: ExperimentConfig, run: Run) -> dict[str, Any]:
    """What names a run in its checkpoints: the experiment's fingerprint (its seeds aside:
    a resume may add seeds), the run's key and seed."""
    alone = config.model_copy(update={"seeds": [run.seed]})
    return {"experiment": alone.fingerprint(), "run": run.key, "seed": run.seed}


def execute_run(config: ExperimentConfig | dict[str, Any], run_key: str, out_dir: str
                ) -> dict[str, Any]:
    """Train one combination into ``out_dir/runs/<key>/``, each episode's row flushed as it
    ends, and ``done.json`` last. ``config``: the driver's validated config, or in a worker
    process its resolved data (rebuilt by :func:`worker_config`, not validated again). A
    checkpoint that reads back but does not fit the run is set aside with the run's rows
    (named in a warning) and the run starts afresh."""
    if not isinstance(config, ExperimentConfig):
        config = worker_config(config)
    run = find_run(config, run_key)
    folder = Path(out_dir)
    resume = resumable(folder, run.key, run_identity(config, run))
    rows = folder / "runs" / run.key / "episodes.csv"
    before = None if resume is None else rows.read_bytes()  # if the checkpoint does not fit
    try:
        try:
            summary = _rows_and_summary(config, run, folder, resume)
        except CheckpointUnfit as error:
            set_aside(folder, run.key, str(error), rows=before)
            summary = _rows_and_summary(config, run, folder, None)
    except Exception as error:  # the CLI's one-line error names the run (a worker's too)
        error.langadapt_run_key = run.key  # type: ignore[attr-defined]
        raise
    write_policies(folder, run.key, summary.pop("policies"))
    write_json(folder, Path("runs") / run.key / "done.json", summary)
    inside(folder, Path("runs") / run.key / CHECKPOINT_FILE).unlink(missing_ok=True)
    return summary


def _rows_and_summary(config: ExperimentConfig, run: Run, folder: Path,
                      resume: Checkpoint | None) -> dict[str, Any]:
    """Train the run (from ``resume``, keeping the rows up to it) with its rows written."""
    run_dir = fresh_run_dir(folder, run.key) if resume is None else folder / "runs" / run.key
    with run_rows(run_dir, None if resume is None else resume.rows) as writer:
        return train_run(config, run, writer.writerow, run_dir=run_dir, resume=resume)
