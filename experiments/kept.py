"""Kept policies played again: :func:`load_run` rebuilds a run's policy
(``runs/<run>/policy_final.safetensors``, ``policy_best.safetensors``: the agent's weights or
table and the adapter's fitted normaliser, safetensors, loading runs no code) and its
observations from the folder's ``config.yaml`` read as data; :func:`evaluate_folder` plays
them on held-out episodes into a results folder ``report`` reads. See docs/configuration.md
("Kept policies").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import agents
from ..agents.base import read_agent_file
from .config import apply_set, experiment_from_dict
from .folders import (
    ResultsFolderError,
    folder_lock,
    inside,
    prepare_output,
    refuse_foreign,
    unnamed_modules,
    write_text,
    writing,
)
from .one_run import (
    FINAL_EVAL_SEED,
    OBSERVATION_TENSORS,
    HeldOutEpisodes,
    agent_params,
    make_adapter,
    make_env,
    with_layout,
    wrap,
)
from .received import note, read_received, received_config, received_data
from .report import write_report
from .results import (
    POLICY_FILES,
    Run,
    find_run,
    folder_config,
    merge_episodes,
    runs_of,
    write_failed_run,
    write_finished_run,
)
from .schema import ConfigError, ExperimentConfig, UsageError


@dataclass
class LoadedRun:
    """A kept policy with what rebuilds its observations: ``agent`` acts on the
    observations of ``make_env()``."""

    config: ExperimentConfig
    run: Run
    agent: Any
    adapter: Any
    path: Path

    def make_env(self, render_mode: str | None = None, **params: Any) -> Any:
        """A new environment of the run (``params`` over the file's environment parameters,
        checked as ``evaluate --set environment.params.KEY=VALUE`` checks them), observed
        through the run's adapter — built anew for that environment when ``params`` change
        it (a maze or a lake of its own is described as itself), with the kept normaliser."""
        if not params:
            return wrap(make_env(self.config, render_mode), self.adapter)
        data = self.config.resolved()
        data["environment"]["params"] = {**data["environment"]["params"], **params}
        changes = " ".join(f"{key}={value!r}" for key, value in params.items())
        config = experiment_from_dict(data, f"make_env({changes})", data_only=True)
        made = make_env(config)  # the adapter's environment: the world it describes
        adapter = _kept_adapter(self.run, made, config.cache_dir, self.adapter)
        made.close()
        shape = tuple(self.adapter.observation_space.shape)
        if tuple(adapter.observation_space.shape) != shape:
            raise ResultsFolderError(
                f"make_env({changes}): adapter {self.run.adapter.name} gives observations of "
                f"shape {tuple(adapter.observation_space.shape)} there; the policy expects "
                f"{shape}")
        return wrap(make_env(config, render_mode), adapter)


def load_run(path: str | Path, which: str = "final", config: ExperimentConfig | None = None,
             log: Callable[[str], None] = print) -> LoadedRun:
    """The kept ``which`` policy (final or best) of a run folder ``results/<name>/runs/<run>``,
    rebuilt from the folder's ``config.yaml`` read as a received folder's
    (:func:`received_config`: no server, key, cache or size of its own; ``log`` says what was
    not used) or from ``config`` (the same experiment changed), and the policy file; one
    `ResultsFolderError` (a ValueError) naming what is missing or does not fit."""
    run_dir = Path(path)
    if which not in POLICY_FILES:
        raise ResultsFolderError(f"which={which!r}: expected one of {', '.join(POLICY_FILES)}")
    home = run_dir.parent.parent
    file = inside(home, Path("runs") / run_dir.name / POLICY_FILES[which],
                  "a received folder is read only inside itself; copy the file in")
    if not file.is_file():
        kept = [w for w, name in POLICY_FILES.items() if (run_dir / name).is_file()]
        raise ResultsFolderError(f"{run_dir} keeps no {which} policy ({POLICY_FILES[which]}); "
                         + (f"it keeps {', '.join(kept)}" if kept else
                            "expected a run folder results/<name>/runs/<run> of a run "
                            "trained with logging.policies on"))
    config = config or received_config(home, log=log)
    run = _run_of(config, run_dir)
    try:
        header, tensors = read_agent_file(file)
    except ValueError as error:
        raise ResultsFolderError(str(error)) from None
    env = make_env(config)  # for the adapter's language spec and the agent's action space
    mean = tensors.pop(f"{OBSERVATION_TENSORS}mean", None)
    matrix = tensors.pop(f"{OBSERVATION_TENSORS}matrix", None)
    adapter = make_adapter(run.adapter, env, config.cache_dir)
    action_space = env.action_space
    env.close()
    try:
        adapter.use_standardiser(None if mean is None else mean.numpy(),
                                 None if matrix is None else matrix.numpy(), file)
    except ValueError as error:
        raise ResultsFolderError(str(error)) from None
    space = adapter.observation_space
    params = with_layout(agent_params(run.agent, run.adapter.name, config.cache_dir),
                             adapter)
    saved = tuple(header.get("obs_shape", ()))
    if saved != tuple(space.shape):
        raise ResultsFolderError(f"{file} was saved for observations of shape {saved}; adapter "
                         f"{run.adapter.name} as set now gives shape {tuple(space.shape)}")
    agent = agents.make_agent(run.agent.type, space, action_space, seed=run.seed, **params)
    try:
        agent.load_saved(header, tensors, file)
    except ValueError as error:
        raise ResultsFolderError(str(error)) from None
    return LoadedRun(config, run, agent, adapter, file)


def _kept_adapter(run: Run, env: Any, cache_dir: str, kept: Any) -> Any:
    """The run's adapter for ``env``, with the normaliser ``kept`` (the loaded run's
    adapter) was given, if any."""
    adapter = make_adapter(run.adapter, env, cache_dir)
    standardiser = kept._standardiser  # noqa: SLF001  (checked when the policy was loaded)
    if standardiser is not None:
        adapter.use_standardiser(standardiser.mean, standardiser.matrix, "the kept policy")
    return adapter


def _run_of(config: ExperimentConfig, run_dir: Path) -> Run:
    """The run of ``config`` that ``run_dir`` holds; one line naming the folder otherwise."""
    try:
        return find_run(config, run_dir.name)
    except ValueError:
        raise ResultsFolderError(
            f"{run_dir} is not a run of {run_dir.parent.parent}/config.yaml's experiment "
            f"(its runs: runs/<adapter>__<agent>__seed<k> of its adapters, agents and "
            "seeds); name one of those") from None


NOT_EVALUATED = {
    "seeds": "it plays the runs the folder kept, each with its own seed; name one run folder "
             "(runs/<run>) to play one seed, --heldout FIRST,COUNT for other episodes",
    "training": "it plays policies already trained",
    "logging": "it writes no checkpoints or logs of training",
    "executor": "it plays the runs in this process",
    "output": "the new folder is --out",
    "imports": "name modules with --import",
    "tasks": "it plays one experiment's runs"}
"""The top-level keys an evaluation's ``--set`` cannot change, and why."""


def kept_runs(folder: Path) -> list[Path]:
    """The run folders of a results folder (or the one run folder given) that keep a policy."""
    folder = Path(folder)
    if (folder / POLICY_FILES["final"]).is_file() or folder.parent.name == "runs":
        return [folder]
    runs = sorted(p for p in (folder / "runs").glob("*/") if not p.is_symlink()
                  and any((p / name).is_file() for name in POLICY_FILES.values()))
    if not runs:
        raise ResultsFolderError(f"{folder} keeps no policy (no runs/<run>/"
                                 f"{POLICY_FILES['final']}); expected a results folder of a run "
                                 "with logging.policies on (the default), or one of its runs")
    return runs


def evaluate_folder(source: Path, out_dir: Path, assignments: list[str], episodes: int | None,
                    heldout: tuple[int, int] | None, sampled: bool | None, force: bool,
                    imports: list[str], log: Callable[[str], None] = print) -> Path:
    """Play the kept policies of ``source`` (a results folder or a run folder) on held-out
    episodes — the folder's, or ``heldout`` (first seed, count) — with ``assignments``
    (``--set`` lines) over its environment, into the results folder ``out_dir``: a
    ``best`` and a ``final`` row per episode as the run wrote them, then the report."""
    for assignment in assignments:
        top = assignment.partition("=")[0].strip().split(".")[0]
        if top in NOT_EVALUATED:
            raise UsageError(f"--set {assignment}: evaluate cannot apply {top} "
                             f"({NOT_EVALUATED[top]})")
    runs = kept_runs(source)
    home = runs[0].parent.parent
    known = {run.key for run in runs_of(read_received(home))}
    if len(runs) == 1 and runs[0].name not in known:
        _run_of(folder_config(home), runs[0])  # one line naming it
    for stray in [run_dir for run_dir in runs if run_dir.name not in known]:
        log(f"{stray}: not a run of {home}/config.yaml's experiment; skipped")
    runs = [run_dir for run_dir in runs if run_dir.name in known]
    if not runs:
        raise ResultsFolderError(f"{home} keeps no policy of a run of its config.yaml's "
                                 "experiment")
    for run_dir in runs:  # before anything is written
        for name in POLICY_FILES.values():
            inside(home, Path("runs") / run_dir.name / name,
                   "a received folder is read only inside itself; copy the file in")
    data, dropped = received_data(folder_config(home).resolved(),
                                  ExperimentConfig.model_fields["cache_dir"].default)
    if dropped:
        log(note(home, dropped))
    for assignment in assignments:
        apply_set(data, assignment)
    evaluation = data["evaluation"]
    if heldout is not None:
        evaluation["heldout_seeds"] = {"first": heldout[0], "count": heldout[1]}
    if episodes is not None and evaluation.get("heldout_seeds"):
        evaluation["heldout_seeds"] = {**evaluation["heldout_seeds"], "count": episodes}
    elif episodes is not None:
        evaluation["final_episodes"] = episodes
    if evaluation.get("heldout_seeds"):  # the final evaluation plays them all
        evaluation.pop("final_episodes", None)
    data["evaluation"]["transfer"] = None  # its rows are this evaluation's own
    _only(data, [find_run(folder_config(home), run_dir.name) for run_dir in runs])
    changes = " ".join(f"--set {a}" for a in assignments)
    config = experiment_from_dict(data, f"{home}/config.yaml with {changes}" if changes
                                  else home / "config.yaml", data_only=True)
    flag = _level_flag(folder_config(home).evaluation.environment_params,
                       config.evaluation.environment_params)
    if flag:
        log(flag)
    unnamed = unnamed_modules(config, imports)
    if unnamed:
        raise UsageError(f"{home} names modules of its own ({', '.join(unnamed)}), which are "
                         "not imported from a results folder; pass "
                         + " ".join(f"--import {name}" for name in unnamed)
                         + " to import them, only if you trust their code")
    make_env(config).close()  # bad environment parameters fail before anything is written
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"{out_dir} is a file; expected a results folder")
    if out_dir.resolve() == home.resolve() or home.resolve() in out_dir.resolve().parents:
        raise UsageError(f"--out {out_dir} lies inside the folder evaluated ({home}); "
                         "choose a folder of its own")
    refuse_foreign(out_dir)
    with writing(out_dir, f"rerun: langadapt evaluate {source} --out {out_dir} --force"):
        out_dir.mkdir(parents=True, exist_ok=True)
        with folder_lock(out_dir):
            prepare_output(config, out_dir, resume=False, force=force)
            _play(runs, config, sampled, out_dir, log)
            merge_episodes(config, out_dir)
            write_report(out_dir, log=log)
            if flag:  # under the table: what the title's parameters do not say
                summary = (out_dir / "summary.md").read_text()
                write_text(out_dir, "summary.md", f"{summary.rstrip()}\n\n**{flag}**\n")
    return out_dir


def _level_flag(folders: dict[str, Any], played: dict[str, Any]) -> str:
    """The line saying that ``--set`` made the policies play another level than the folder's
    held-out one (``folders``: its ``evaluation.environment_params``); empty otherwise."""
    if not folders or played == folders:
        return ""
    where = ("the training level (environment.params)" if not played
             else f"evaluation.environment_params {played}")
    return (f"Played on {where}, not the folder's held-out level (evaluation.environment_params "
            f"{folders}): changed by --set.")


def _play(runs: list[Path], config: ExperimentConfig, sampled: bool | None, out_dir: Path,
          log: Callable[[str], None]) -> None:
    """Each run's rows into ``out_dir/runs/<run>/``; a run of the evaluated adapters, agents
    and seeds that keeps no policy is recorded as failed (named in the report)."""
    kept = {run_dir.name: run_dir for run_dir in runs}
    for run in runs_of(config):
        if run.key not in kept:
            write_failed_run(out_dir, run.key, "its folder keeps no policy")
            continue
        rows = evaluate_run(kept[run.key], config, sampled)
        write_finished_run(out_dir, run.key, rows, {"run": run.key,
                                                    "evaluated_from": str(kept[run.key])})
        log(f"{run.key}: {len(rows)} episodes")


def _only(data: dict[str, Any], runs: list[Run]) -> None:
    """Narrow an experiment's data to the adapters, agents and seeds of ``runs``."""
    adapters = {run.adapter.name for run in runs}
    agent_names = {run.agent.name for run in runs}
    data["adapters"] = [a for a in data["adapters"] if (a.get("label") or a["type"]) in adapters]
    data["agents"] = [{**a, "per_adapter": {k: v for k, v in (a.get("per_adapter") or {}).items()
                                            if k in adapters}}
                      for a in data["agents"] if (a.get("label") or a["type"]) in agent_names]
    data["seeds"] = sorted({run.seed for run in runs})


def evaluate_run(run_dir: Path, config: ExperimentConfig, sampled: bool | None
                 ) -> list[dict[str, Any]]:
    """The rows of a run's kept policies (best first, as a run writes them) on the held-out
    episodes of ``config`` (the run's experiment, changed)."""
    rows: list[dict[str, Any]] = []
    for which in ("best", "final"):
        if not (run_dir / POLICY_FILES[which]).is_file():
            continue
        loaded = load_run(run_dir, which, config)
        agent = loaded.agent
        if sampled is not None and "deterministic" in type(agent.config).model_fields:
            agent.config = agent.config.model_copy(update={"deterministic": not sampled})
        env = loaded.make_env(**config.evaluation.environment_params)  # as the run's final
        held = config.evaluation.heldout_seeds
        played = agents.evaluate(
            agent, env if held is None else HeldOutEpisodes(env, held.seeds),
            episodes=config.evaluation.final_episodes, seed=loaded.run.seed + FINAL_EVAL_SEED)
        for record in played:
            rows.append({
                "adapter": loaded.run.adapter.name, "agent": loaded.run.agent.name,
                "seed": loaded.run.seed, "phase": which, "episode": 0,
                "return": repr(float(record.return_)), "length": record.length,
                "success": int(bool(record.success)), "wall_time": f"{record.wall_time:.6f}",
                "llm_calls": 0, "cache_hits": 0, "llm_fallbacks": 0})
        env.close()
    return rows
