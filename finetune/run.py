"""``langadapt finetune CONFIG``: GRPO-train the LLM policy on a maze for each seed, then
write a results folder with a learning curve beside DQN on the same maze.

The folder (``output`` of the file, or ``--out``)::

    config.yaml             the resolved settings
    seed_<k>/log.csv        one row per GRPO step (see finetune.grpo.LOG_COLUMNS)
    seed_<k>/checkpoint/    adapter, optimiser and RNG state every few steps (resume)
    seed_<k>/adapter/       the trained LoRA adapter + policy.json (use it with llm_policy)
    seed_<k>/final.json     the trained policy's greedy evaluation
    reference.csv           DQN on the same maze: greedy success / accuracy by episode
    summary.csv, summary.md per seed: steps, seconds, memory, when the greedy rollout first
                            took the shortest path, final success and per-state accuracy
    learning_curve.png      greedy success and per-state accuracy against GRPO steps and
                            against training time, DQN beside it

Running the same file again resumes unfinished seeds from their checkpoints and skips
finished ones; ``--force`` starts afresh. A checkpoint is read as data only
(`finetune.grpo.read_checkpoint`, ``torch.load(weights_only=True)``), before the model is
loaded: a crafted, damaged or truncated ``seed_<k>/checkpoint/trainer.pt`` is one ValueError
naming the file (the CLI prints it on one line), and nothing in it runs.

``progress=False`` (``--no-progress``) silences every bar: GRPO's, the reference agent's,
and the model loading's (transformers' and huggingface_hub's bars and the GGUF conversion
bar, turned off while the model loads and restored after).
"""

from __future__ import annotations

import csv
import json
import math
import shutil
import time
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..agents import make_agent, train
from ..environments import MazeEnv, language_for
from ..environments.minigrid import is_minigrid_id, make_minigrid
from .grpo import GRPOSettings, GRPOTrainer, append_row, read_checkpoint
from .hf_model import check_causal_lm
from .policy import LoRAPolicy, LoRASettings
from .tasks import MazeTask, MiniGridTask

__all__ = ["FinetuneConfig", "ReferenceSettings", "load_finetune_config", "run_finetune"]

#: The first seed of the training episodes of a MiniGrid level (held-out seeds lie below).
TRAIN_SEED = 1_000_000

SUMMARY_COLUMNS = (
    "seed", "steps", "first_success_step", "first_success_train_seconds", "final_success",
    "final_shortest", "final_state_accuracy", "train_seconds", "seconds_per_step",
    "cpu_seconds", "peak_rss_mb", "zero_spread_fraction_mean", "env_steps",
)


class ReferenceSettings(BaseModel):
    """The DQN run beside GRPO (raw (row, col) observations, the same maze and seeds)."""

    model_config = ConfigDict(extra="forbid")

    agent: str = Field("dqn", description="agent type from the agent registry")
    episodes: int = Field(200, ge=1)
    eval_every: int = Field(10, ge=1, description="training episodes between evaluations")
    params: dict[str, Any] = Field(default_factory=dict, description="agent hyperparameters")


class HeldOutSettings(BaseModel):
    """The held-out episodes a MiniGrid or BabyAI policy is judged on (training episodes use
    seeds from ``TRAIN_SEED`` on, so these are never training starts; checked)."""

    model_config = ConfigDict(extra="forbid")

    seed: int = Field(0, ge=0, description="first held-out episode seed")
    episodes: int = Field(100, ge=1, le=TRAIN_SEED, description="held-out episodes")
    max_steps: int | None = Field(
        32, ge=1, description="a greedy episode not solved in this many steps fails; None = "
        "the level's own limit")


class FinetuneConfig(BaseModel):
    """A ``langadapt finetune`` file (YAML)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    description: str = ""
    environment: dict[str, Any] = Field(
        default_factory=lambda: {"maze": "umaze"},
        description="MazeEnv parameters (maze, max_steps, goal_reward, step_reward, ...), or "
        "{id: a MiniGrid/BabyAI level, params: {...}}")
    model: str | None = Field(
        None, description="HF model directory or .gguf file; None = the embedded SmolLM2")
    lora: LoRASettings = Field(default_factory=LoRASettings)
    grpo: GRPOSettings = Field(default_factory=GRPOSettings)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    threads: int = Field(
        1, ge=1, le=256,
        description="torch CPU threads (1 is fastest on a busy shared machine)")
    reference: ReferenceSettings | None = Field(default_factory=ReferenceSettings)
    held_out: HeldOutSettings = Field(
        default_factory=HeldOutSettings, description="MiniGrid/BabyAI: the held-out episodes")
    output: str | None = Field(None, description="results folder; default results/<name>")

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value) or any(s < 0 for s in value):
            raise ValueError(f"seeds={value!r}: expected distinct ints >= 0")
        return value

    @property
    def is_minigrid(self) -> bool:
        return "id" in self.environment

    def maze(self) -> Any:
        return MazeEnv(**self.environment)

    def make_env(self) -> Any:
        """The environment of the file: a `MazeEnv` or a bridged MiniGrid/BabyAI level."""
        if not self.is_minigrid:
            return self.maze()
        extra = sorted(set(self.environment) - {"id", "params"})
        if extra:
            raise ValueError(f"environment keys {extra}: a MiniGrid level takes only id and "
                             "params")
        level = self.environment["id"]
        if not is_minigrid_id(level):
            raise ValueError(f"environment.id is {level!r}, expected a MiniGrid or BabyAI level "
                             "id such as 'langadapt/BabyAI-GoToObj-v0'")
        name = str(level).removeprefix("langadapt/")
        params = self.environment.get("params") or {}
        if not isinstance(params, dict):
            raise ValueError(f"environment.params is {params!r}, expected a mapping")
        try:
            return make_minigrid(name, **params)
        except (gymnasium.error.Error, ValueError, TypeError) as error:
            raise ValueError(f"environment.id {level!r} with params {params!r}: {error}"
                             ) from None

    def task(self) -> MazeTask | MiniGridTask:
        """The GRPO task of the file's environment."""
        if not self.is_minigrid:
            return MazeTask(self.maze())
        held = self.held_out
        return MiniGridTask(self.make_env, train_seed=TRAIN_SEED, eval_seed=held.seed,
                            eval_episodes=held.episodes, eval_max_steps=held.max_steps)

    def check(self) -> None:
        """The checks that need the environment or the model's files (ValueError naming the
        key)."""
        if self.model is not None:
            try:
                check_causal_lm(self.model)
            except ValueError as error:
                raise ValueError(f"model: {error}") from None
        env = self.make_env()
        g = self.grpo
        if self.is_minigrid:
            if g.states == "all":
                raise ValueError("grpo.states is 'all', which only a maze has; expected a "
                                 "number of start states per step for a MiniGrid level")
            if g.shaping == "oracle":
                raise ValueError("grpo.shaping is 'oracle', but a MiniGrid level has no oracle "
                                 "potential; expected none")
        elif g.shaping == "none" and env.goal_reward == 0 and (
                g.reward == "step" or env.step_reward == 0):
            raise ValueError(
                f"the run has no reward source: environment.goal_reward is 0 and "
                f"{'grpo.reward is step' if g.reward == 'step' else 'environment.step_reward is 0'}"
                " with grpo.shaping none; expected a goal reward (or shaping: oracle)")


def load_finetune_config(path: str | Path) -> FinetuneConfig:
    """Read and validate a finetune YAML file (ValueError naming the file on bad input)."""
    source = Path(path)
    if not source.is_file():
        raise ValueError(f"finetune config {str(source)!r} does not exist")
    data = yaml.safe_load(source.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{source}: expected a YAML mapping of settings")
    from pydantic import ValidationError

    try:
        config = FinetuneConfig(**data)
    except ValidationError as error:
        raise ValueError(f"{source}: {_one_line(error)}") from None
    try:
        config.check()
    except (TypeError, ValueError) as error:
        raise ValueError(f"{source}: {error}") from None
    return config


def _one_line(error: Any) -> str:
    """A pydantic error as one line: each bad key and why, e.g. ``grpo.steps: Input should
    be greater than or equal to 1``."""
    return "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}"
                     for e in error.errors())


def _seed_everything(seed: int) -> None:
    import random

    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train_seed(config: FinetuneConfig, seed: int, folder: Path, progress: bool = True
               ) -> dict[str, Any]:
    """GRPO for one seed into ``folder`` (resuming a checkpoint there); the final evaluation."""
    done = folder / "final.json"
    if done.is_file():
        return json.loads(done.read_text(encoding="utf-8"))
    checkpoint = folder / "checkpoint" / "trainer.pt"
    if checkpoint.is_file():
        read_checkpoint(checkpoint)  # refused or damaged: say so before loading the model
    _seed_everything(seed)
    task = config.task()
    started = time.perf_counter()
    policy = LoRAPolicy(language_for(config.make_env()), model=config.model, lora=config.lora,
                        temperature=config.grpo.temperature, seed=seed, progress=progress)
    load_seconds = time.perf_counter() - started
    trainer = GRPOTrainer(policy, task, config.grpo, out=folder, seed=seed)
    trainer.train(progress=progress)
    policy.save_adapter(folder / "adapter", extra={
        "environment": config.environment, "seed": seed, "steps": trainer.step_index})
    final = {**trainer.final, "seed": seed, "load_seconds": load_seconds}
    done.write_text(json.dumps(final, indent=2) + "\n", encoding="utf-8")
    return final


def run_reference(config: FinetuneConfig, progress: bool = True) -> list[dict[str, Any]]:
    """DQN (or the named agent) on the same maze for every seed: greedy success, shortest
    path and per-state accuracy every ``eval_every`` episodes, against training seconds."""
    return [row for seed in config.seeds for row in _reference_seed(config, seed, progress)]


def _reference_seed(config: FinetuneConfig, seed: int, progress: bool) -> list[dict[str, Any]]:
    ref = config.reference
    _seed_everything(seed)
    env, judge = config.maze(), MazeTask(config.maze())
    agent = make_agent(ref.agent, env.observation_space, env.action_space, seed=seed,
                       **ref.params)
    rows: list[dict[str, Any]] = []
    start, evaluating = time.perf_counter(), 0.0

    def greedy(observed: list[tuple[Any, tuple[int, ...]]]) -> list[int]:
        return [int(agent.act(obs, legal, explore=False)) for obs, legal in observed]

    def record(episode: int) -> None:
        nonlocal evaluating
        t = time.perf_counter()
        rows.append({"seed": seed, "episode": episode,
                     "train_seconds": t - start - evaluating, **judge.evaluate(greedy)})
        evaluating += time.perf_counter() - t

    def on_episode(item: Any) -> None:
        if item.phase == "train" and item.episode % ref.eval_every == 0:
            record(item.episode)

    record(0)
    train(agent, env, episodes=ref.episodes, seed=seed, progress=progress,
          on_episode=on_episode)
    return rows


BASELINE_COLUMNS = ("agent", "seed", "env_steps", "train_seconds", "eval_seconds",
                    "greedy_success", "greedy_return", "greedy_length", "episodes")


def run_baselines(config: FinetuneConfig, env_steps: dict[int, int], path: Path,
                  progress: bool = True) -> list[dict[str, Any]]:
    """A MiniGrid level's baselines on the same held-out episodes, each row appended to
    ``path`` (a CSV) as soon as it is measured, and the rows already there kept: uniform
    random legal moves and the reference agent (DQN) on rule-language states (MiniLM vectors
    of the level's descriptions) trained for as many environment steps as GRPO took, for
    each seed, then the untuned model (a fresh, zero adapter; greedy), the slowest."""
    from ..adapters import LanguageObservation
    from ..adapters import make as make_adapter

    rows: list[dict[str, Any]] = []
    if path.is_file():
        with path.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    done = {(r["agent"], str(r["seed"])) for r in rows}
    task = config.task()

    def record(agent: str, seed: int | str, steps: int, seconds: float, greedy: Any) -> None:
        t = time.perf_counter()
        result = task.evaluate(greedy)
        row = {"agent": agent, "seed": seed, "env_steps": steps,
               "train_seconds": round(seconds, 1),
               "eval_seconds": round(time.perf_counter() - t, 1), **result}
        append_row(path, row, BASELINE_COLUMNS)
        rows.append(row)

    for seed in config.seeds:
        if ("random", str(seed)) not in done:
            record("random", seed, 0, 0.0, _random_moves(np.random.default_rng(seed)))
    ref = config.reference
    for seed in config.seeds if ref is not None else ():
        if (f"{ref.agent}_language", str(seed)) in done:
            continue
        _seed_everything(seed)
        raw = config.make_env()
        adapter = make_adapter("language", raw)
        env = LanguageObservation(raw, adapter)
        agent = make_agent(ref.agent, env.observation_space, env.action_space, seed=seed,
                           **ref.params)
        started = time.perf_counter()
        train(agent, env, steps=max(1, env_steps.get(seed, 0)), seed=TRAIN_SEED + seed,
              progress=progress)
        seconds = time.perf_counter() - started
        record(f"{ref.agent}_language", seed, env_steps.get(seed, 0), seconds,
               _agent_moves(agent, adapter))
    if ("untuned", "-") not in done:
        policy = LoRAPolicy(language_for(config.make_env()), model=config.model,
                            lora=config.lora, progress=progress)  # a zero adapter: untuned
        record("untuned", "-", 0, 0.0, GRPOTrainer(policy, task, config.grpo).greedy_actions)
    return rows


def _random_moves(rng: np.random.Generator) -> Any:
    return lambda observed: [int(rng.choice(legal)) for _, legal in observed]


def _agent_moves(agent: Any, adapter: Any) -> Any:
    """The agent's greedy moves on the adapter's vectors of the observed states."""
    return lambda observed: [
        int(agent.act(adapter.adapt(obs, list(legal))[0], list(legal), explore=False))
        for obs, legal in observed]


def _read_log(path: Path) -> list[dict[str, float]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return [{k: float(v) if v not in ("", "nan") else math.nan for k, v in row.items()}
                for row in csv.DictReader(fh)]


def summarise(seed: int, log: list[dict[str, float]], final: dict[str, Any]) -> dict[str, Any]:
    """One summary row of a seed's log and final evaluation."""
    # row i is the evaluation of the policy before step i's update (reached after
    # train_seconds - step_seconds); the final evaluation follows the last step
    curve = [(r["step"], r["train_seconds"] - r["step_seconds"]) for r in log
             if r.get("greedy_shortest") == 1.0]
    if final.get("greedy_shortest") == 1.0:
        curve.append((final["step"], final["train_seconds"]))
    steps = int(final["step"])
    seconds = float(final["train_seconds"])
    return {
        "seed": seed, "steps": steps,
        "first_success_step": int(curve[0][0]) if curve else "",
        "first_success_train_seconds": round(float(curve[0][1]), 1) if curve else "",
        "final_success": final["greedy_success"],
        "final_shortest": final.get("greedy_shortest", ""),
        "final_state_accuracy": (round(float(final["state_accuracy"]), 3)
                                 if "state_accuracy" in final else ""),
        "env_steps": int(np.nansum([r.get("env_steps", math.nan) for r in log])),
        "train_seconds": round(seconds, 1),
        "seconds_per_step": round(seconds / steps, 2) if steps else "",
        "cpu_seconds": round(float(np.nansum([r["cpu_seconds"] for r in log])), 1),
        "peak_rss_mb": round(float(np.nanmax([r["peak_rss_mb"] for r in log] or [math.nan])),
                             0),
        "zero_spread_fraction_mean": round(float(np.nanmean(
            [r["zero_spread_fraction"] for r in log] or [math.nan])), 3),
    }


def write_summary(folder: Path, rows: list[dict[str, Any]], config: FinetuneConfig) -> None:
    with (folder / "summary.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=SUMMARY_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    if config.is_minigrid:
        rates = ", ".join(f"seed {r['seed']}: {r['final_success']:.2f}" for r in rows)
        verdict = (f"Greedy success on {config.held_out.episodes} held-out episodes after "
                   f"training: {rates}.")
    else:
        solved = sum(1 for r in rows if r["final_shortest"] == 1.0)
        verdict = (f"Greedy rollout on the shortest path after training: {solved} of "
                   f"{len(rows)} seeds.")
    lines = [f"# {config.name}", "", config.description, "", verdict, "",
             "| " + " | ".join(SUMMARY_COLUMNS) + " |",
             "|" + "---|" * len(SUMMARY_COLUMNS)]
    lines += ["| " + " | ".join(str(r[c]) for c in SUMMARY_COLUMNS) + " |" for r in rows]
    (folder / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def plot_curves(folder: Path, logs: dict[int, list[dict[str, float]]],
                finals: dict[int, dict[str, Any]], reference: list[dict[str, Any]],
                title: str) -> Path:
    """``learning_curve.png``: success and accuracy against GRPO steps, and against
    training seconds beside the reference agent."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(12, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, (seed, log) in enumerate(sorted(logs.items())):
        final = finals.get(seed)
        rows = [r for r in log if not math.isnan(r["greedy_success"])]
        # row i holds the evaluation before step i's update; the final row, after the last
        steps = [r["step"] for r in rows] + ([final["step"]] if final else [])
        times = [r["train_seconds"] - r["step_seconds"] for r in rows] + (
            [final["train_seconds"]] if final else [])
        success = [r["greedy_shortest"] for r in rows] + ([final["greedy_shortest"]]
                                                          if final else [])
        accuracy = [r["state_accuracy"] for r in rows] + ([final["state_accuracy"]]
                                                          if final else [])
        color = colors[k % len(colors)]
        label = f"GRPO seed {seed}"
        by_step.plot(steps, accuracy, color=color, label=f"{label}: state accuracy")
        by_step.plot(steps, success, color=color, linestyle=":", marker="o", markersize=3,
                     label=f"{label}: greedy shortest path")
        by_time.plot(times, accuracy, color=color, label=f"{label}: state accuracy")
    if reference:
        seeds = sorted({r["seed"] for r in reference})
        for k, seed in enumerate(seeds):
            rows = [r for r in reference if r["seed"] == seed]
            by_time.plot([r["train_seconds"] for r in rows], [r["state_accuracy"] for r in rows],
                         color="grey", alpha=0.6, linestyle="--",
                         label="DQN state accuracy" if k == 0 else None)
            by_time.plot([r["train_seconds"] for r in rows],
                         [r["greedy_shortest"] for r in rows], color="black", alpha=0.5,
                         linestyle=":", label="DQN greedy shortest path" if k == 0 else None)
    by_step.set_xlabel("GRPO step")
    by_step.set_ylabel("fraction")
    by_step.set_title("GRPO: per-state accuracy (solid) and greedy shortest path (dotted)")
    by_time.set_xlabel("training seconds (wall, shared 2-core CPU)")
    by_time.set_title("against training time, DQN on (row, col) beside it")
    for ax in (by_step, by_time):
        ax.set_ylim(-0.05, 1.05)
        ax.grid(alpha=0.3)
    by_step.legend(fontsize=6, loc="lower right")
    by_time.legend(fontsize=6, loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    path = folder / "learning_curve.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run_finetune(config: FinetuneConfig, out: str | Path | None = None, force: bool = False,
                 progress: bool = True, seeds: list[int] | None = None) -> Path:
    """Train every seed (resuming), run the reference, write summary and plot; the folder."""
    import torch

    if seeds is not None:
        config = config.model_copy(update={"seeds": FinetuneConfig(
            name=config.name, seeds=seeds).seeds})
    folder = Path(out or config.output or Path("results") / config.name)
    if force and folder.exists():
        if not (folder / "config.yaml").is_file():
            raise ValueError(f"--force: {folder} is not a finetune results folder (no "
                             "config.yaml); refusing to remove it")
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(
        yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
    torch.set_num_threads(config.threads)
    finals: dict[int, dict[str, Any]] = {}
    logs: dict[int, list[dict[str, float]]] = {}
    rows = []
    for seed in config.seeds:
        seed_folder = folder / f"seed_{seed}"
        finals[seed] = train_seed(config, seed, seed_folder, progress)
        logs[seed] = _read_log(seed_folder / "log.csv")
        rows.append(summarise(seed, logs[seed], finals[seed]))
        write_summary(folder, rows, config)
    reference: list[dict[str, Any]] = []
    if config.is_minigrid:
        run_baselines(config, {r["seed"]: r["env_steps"] for r in rows},
                      folder / "baselines.csv", progress)
    elif config.reference is not None:
        ref_path = folder / "reference.csv"
        if ref_path.is_file():
            with ref_path.open(newline="", encoding="utf-8") as fh:
                reference = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(fh)]
        else:
            reference = run_reference(config, progress)
            with ref_path.open("w", newline="", encoding="utf-8") as fh:
                writer = csv.DictWriter(fh, fieldnames=list(reference[0]))
                writer.writeheader()
                writer.writerows(reference)
    plot_curves(folder, logs, finals, reference, config.name)
    return folder
