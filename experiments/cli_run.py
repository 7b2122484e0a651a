"""``langadapt run`` (alias ``finetune``), ``init``, ``prerender`` and ``report``: the commands
of an experiment file and its results folder, with the options they share with the other
commands (``--import``, the overrides ``--set``, ``--tasks``, ``--backend``; see
docs/configuration.md, "Overrides from the command line")."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import copy
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..environments.user_code import import_user_modules, suggest
from .schema import ConfigError, UsageError, check_path


def path_argument(text: str) -> Path:
    """A command-line path (argparse ``type``): one line if the file system cannot hold it."""
    try:
        return Path(check_path(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_parsers(commands: Any) -> None:
    run = commands.add_parser(
        "run",
        aliases=["finetune"],  # the GRPO files are experiments too; `finetune --list` names them
        help="train and evaluate every adapter x agent x seed of an experiment file "
        "(alias: finetune)",
        description="Train and evaluate every (adapter x agent x seed) combination of an "
        "experiment file, then write episodes.csv, summary.csv, summary.md and plots.",
    )
    run.add_argument("file", nargs="?", metavar="FILE",
                     help="experiment YAML file, or the name of a packaged experiment "
                     "(e.g. quickstart; see --list)")
    run.add_argument("--list", action="store_true",
                     help="list the packaged experiments with their descriptions and exit")
    run.add_argument("--check", action="store_true",
                     help="validate the file and the options, print what would run, run nothing")
    run.add_argument("--out", type=path_argument, help="results folder (default: the file's "
                     "output, else results/<name>)")
    run.add_argument("--seeds", type=int, help="use seeds 0..N-1 instead of the file's seeds")
    run.add_argument("--jobs", type=int, help="runs at a time (default: the file's executor.jobs; "
                     "process pool: 1, ray: as many as the cluster fits)")
    run.add_argument("--executor", choices=("process", "ray"),
                     help="where runs execute: this machine's process pool (default) or a Ray "
                     "cluster (needs langadapt[ray])")
    run.add_argument("--address", help="ray: 'auto' (the cluster on this machine), HOST:PORT "
                     "of a head node or ray://HOST:PORT; default: start a local cluster")
    run.add_argument("--resume", action="store_true",
                     help="keep finished runs of the same experiment in --out, do the rest")
    run.add_argument("--force", action="store_true",
                     help="replace the earlier results in --out: only in a folder langadapt "
                     "wrote, only the files it wrote (docs/configuration.md)")
    run.add_argument("--offline", action="store_true", help="with --check: do not ask the "
                     "LLM servers the file names (by default one cheap request each)")
    run.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_override_options(run)
    add_import_option(run)  # a results folder's config.yaml imports only these

    prerender = commands.add_parser(
        "prerender",
        help="describe and encode every reachable state of an experiment into the caches",
        description="Describe and encode every reachable state (discrete environments) for "
        "each language and llm adapter of an experiment file, filling the persistent caches.",
    )
    prerender.add_argument("file", metavar="FILE",
                           help="experiment YAML file or the name of a packaged experiment")
    prerender.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_import_option(prerender)

    init = commands.add_parser(
        "init", help="write a packaged experiment file to edit",
        description="Copy a packaged experiment file (see `langadapt run --list`), comments "
        "and all, to PATH (default: ./NAME.yaml); then `langadapt run PATH`.")
    init.add_argument("name", metavar="NAME", help="a packaged experiment, e.g. quickstart")
    init.add_argument("path", nargs="?", type=path_argument, metavar="PATH",
                      help="where to write it (a folder: NAME.yaml in it); never overwritten")

    report = commands.add_parser(
        "report",
        help="rebuild summary and plots from a results folder, or compare several",
        description="Rebuild summary.csv, summary.md and the plots from a results folder's "
        "episodes.csv and config.yaml. With several folders: one summary and one set of "
        "curves of them all (adapters named FOLDER/ADAPTER) in --out, the folders only read.",
    )
    report.add_argument("folder", type=path_argument, nargs="+")
    report.add_argument("--out", type=path_argument, help="with several folders: where the "
                        "comparison goes (default: comparison)")


def add_import_option(command: argparse.ArgumentParser) -> None:
    command.add_argument("--import", dest="imports", action="append", default=[],
                         metavar="MODULE", help="import this module first (it registers your "
                         "environment and its language spec); repeatable. An id written "
                         "as MODULE:EnvId imports MODULE by itself")


def import_modules(names: list[str]) -> None:
    try:
        import_user_modules(names, where="--import")
    except ValueError as error:
        raise UsageError(str(error)) from None


def quiet_model_loading() -> None:
    """No Hugging Face download or weight-loading bars in this process (before any model
    loads): transformers' switch, which turns huggingface_hub's bars off too."""
    try:
        from transformers.utils import logging as transformers_logging
    except ImportError:  # no transformers: only huggingface_hub could show a bar
        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
        return
    transformers_logging.disable_progress_bar()


def add_override_options(command: Any) -> None:
    """``--set``, ``--tasks`` and the backend options of ``langadapt run``."""
    command.add_argument("--set", dest="assignments", action="append", default=[],
                         metavar="KEY=VALUE", help="change one key of the file, validated like "
                         "the file (e.g. --set training.steps=3000 --set seeds=1; into a list "
                         "by name: --set agents.dqn.params.gamma=0.9); repeatable")
    command.add_argument("--tasks", metavar="A,B", help="a suite: only these tasks")
    command.add_argument("--backend", help="the LLM of every LLM agent and advisor of the file: "
                         "a backend name (openai, ollama, llamacpp, ...)")
    command.add_argument("--model", help="with --backend: the model name")
    command.add_argument("--base-url", help="with --backend openai: the server's API root, "
                         "e.g. http://127.0.0.1:8000/v1")
    command.add_argument("--api-key-env", metavar="NAME", help="with --backend openai: the "
                         "environment variable holding the key (default OPENAI_API_KEY; none: "
                         "a server that needs no key)")


def apply_overrides(data: dict[str, Any], args: Any, source: str) -> list[str]:
    """Apply the override options of ``args`` to ``data`` — the backend options first, so
    that a ``--set`` inside the backend they set applies to it — and return them as
    written, for the error messages' source (empty when there are none)."""
    from .config import apply_set, select_tasks, set_backend, spread_budget  # lazy: fast start

    written = []
    given = {"--model": args.model, "--base-url": args.base_url,
             "--api-key-env": args.api_key_env}
    if args.backend is None and any(v is not None for v in given.values()):
        named = [k for k, v in given.items() if v is not None]
        raise UsageError(f"{' and '.join(named)} {'goes' if len(named) == 1 else 'go'} with "
                         "--backend (e.g. --backend openai --model gpt-4o-mini --base-url "
                         "https://api.openai.com/v1)")
    if args.backend is not None:
        spec = {k: v for k, v in (("model", args.model), ("base_url", args.base_url))
                if v is not None}
        if args.api_key_env is not None:
            spec["api_key_env"] = None if args.api_key_env == "none" else args.api_key_env
        set_backend(data, {"backend": args.backend, **spec}, source)
        written.append(" ".join([f"--backend {args.backend}",
                                 *(f"{k} {v}" for k, v in given.items() if v is not None)]))
    for assignment in args.assignments:
        apply_set(data, assignment)
        written.append(f"--set {assignment}")
        own = spread_budget(data, assignment)
        if own:
            print(f"note: {assignment.strip()} applies to every agent, {', '.join(own)}'s own "
                  f"training block too; one agent's own: --set agents.{own[0]}.training."
                  f"{assignment.split('=')[0].split('.')[-1].strip()}=N after it")
    if args.tasks is not None:
        select_tasks(data, args.tasks, source)
        written.append(f"--tasks {args.tasks}")
    return written


# ----------------------------------------------------------------- packaged experiment files


def _packaged_configs() -> dict[str, dict[str, Any]]:
    """``{name: {"grpo", "description", "resource"}}`` of the experiment files shipped in
    ``langadapt/configs`` (``grpo``: it has an agent of type grpo)."""
    from importlib.resources import files

    import yaml

    folder = files("langadapt") / "configs"
    if not folder.is_dir():
        return {}
    found = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not (entry.name.endswith(".yaml") and entry.is_file()):
            continue
        try:
            data = yaml.safe_load(entry.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError):
            data = None
        data = data if isinstance(data, dict) else {}
        agents = data.get("agents") if isinstance(data.get("agents"), list) else []
        grpo = any(isinstance(a, dict) and a.get("type") == "grpo" for a in agents)
        description = " ".join(str(data.get("description") or "").split())
        found[entry.name[: -len(".yaml")]] = {
            "grpo": grpo, "description": description, "resource": entry}
    return found


_RESOURCES = contextlib.ExitStack()  # packaged files extracted to disk (only from a zip)
atexit.register(_RESOURCES.close)


def _config_file(text: str | None) -> Path:
    """The file ``langadapt run TEXT`` means: an existing path as it is, else the packaged
    file of a bare name (``quickstart`` or ``quickstart.yaml``); a UsageError naming the
    packaged ones otherwise."""
    from importlib.resources import as_file

    packaged = _packaged_configs()
    names = ", ".join(packaged) or "none"
    if text is None:
        raise UsageError(f"FILE is required: an experiment file or one of the packaged "
                         f"experiments {names} (see --list)")
    path = Path(text).expanduser()
    if path.exists():
        return path
    bare = "/" not in text and os.sep not in text
    name = text[: -len(".yaml")] if text.endswith(".yaml") else text
    entry = packaged.get(name) if bare else None
    if entry is not None:
        return _RESOURCES.enter_context(as_file(entry["resource"]))
    if bare:
        raise UsageError(f"{text!r}: no such file and no packaged experiment of that name; "
                         f"packaged experiments: {names}")
    stem = Path(text).stem
    hint = f" (the packaged one is `langadapt run {stem}`)" if stem in packaged else ""
    raise UsageError(f"{text}: no such experiment file{hint}")


def _print_packaged(grpo_only: bool) -> int:
    packaged = {n: e for n, e in _packaged_configs().items() if e["grpo"] or not grpo_only}
    kind = "GRPO fine-tuning experiments" if grpo_only else "experiments"
    if not packaged:
        print(f"no packaged {kind} in this installation")
        return 0
    print(f"packaged {kind} (langadapt run NAME):")
    width = max(len(n) for n in packaged)
    for name, entry in packaged.items():
        print(f"  {name:<{width}}  {entry['description']}".rstrip())
    return 0


# ----------------------------------------------------------------- commands


def command_run(args: argparse.Namespace) -> int:
    if args.list:
        return _print_packaged(grpo_only=args.command == "finetune")
    from .runner import run_experiment

    path = _config_file(args.file)
    config = _load_experiment(path, args.imports, lambda data: _apply_options(data, args))
    if args.check:
        _build_environments(config)
        if not args.offline:
            probe_llm_servers(config)
        tasks = len(config.tasks or [None])
        runs = len(config.adapters) * len(config.agents) * len(config.seed_list) * tasks
        print(f"{path}: experiment {config.name!r}, {runs} runs ({len(config.adapters)} "
              f"adapters x {len(config.agents)} agents x {len(config.seed_list)} seeds"
              f"{f' x {tasks} tasks' if config.tasks else ''}), "
              f"executor {config.executor.type}, results in {args.out or config.output_dir}")
        print("each run's budget: " + "; ".join(
            f"{agent.name} " + ("none (zero-shot: evaluated only)" if agent.type == "llm_policy"
                                and not agent.params.get("few_shot")
                                else "none (learns nothing: evaluated only)"
                                if agent.type in ("random", "oracle")
                                else budget_text(config.training_for(agent)))
            for agent in config.agents))
        return 0
    if args.no_progress:
        quiet_model_loading()
    started = time.perf_counter()
    from .suite import run_suite  # a suite: one experiment per task, then its report

    try:
        out = (run_suite if config.tasks else run_experiment)(
            config,
            out_dir=args.out,
            resume=args.resume,
            force=args.force,
            progress=not args.no_progress,
        )
    except KeyboardInterrupt as stop:  # the interrupt line's resume command names the folder
        stop.langadapt_out = args.out or config.output_dir  # type: ignore[attr-defined]
        raise
    print(f"done in {time.perf_counter() - started:.0f} s: {out}")
    return 0


def budget_text(training: Any) -> str:
    """``3,000 steps over 8 copies``, ``1 episode``: a training block's budget."""
    amount, unit = ((training.steps, "step") if training.steps is not None
                    else (training.episodes, "episode"))
    copies = f" over {training.n_envs} copies" if training.n_envs > 1 else ""
    return f"{amount:,} {unit}{'' if amount == 1 else 's'}{copies}"


def _apply_options(data: dict[str, Any], args: argparse.Namespace) -> str:
    """``run``'s options that change the file (``--seeds``, the executor's, the overrides)
    applied to its data; the source its errors name."""
    if args.seeds is not None:
        data["seeds"] = args.seeds
    executor = {key: value for key, value in (
        ("type", args.executor), ("address", args.address), ("jobs", args.jobs))
        if value is not None}
    if executor:
        data["executor"] = {**(data.get("executor") or {}), **executor}
    changes = [c if c.isprintable() else json.dumps(c)  # a newline would split the error
               for c in apply_overrides(data, args, str(args.file))]
    return (f"{args.file} with {' '.join(changes)}" if changes
            else f"{args.file} with the command-line options")


def _load_experiment(path: Path, imports: list[str],
                     change: Callable[[dict[str, Any]], str] | None = None) -> Any:
    """The experiment of ``path`` after the ``--import`` modules and ``change`` (the command
    line's changes to its data; it returns the source the errors then name), validated
    once. A results folder's file is data: read first without importing anything it
    names, and used only when every module it names was named on the command line
    (:func:`.folders.results_folder_of`)."""
    from .config import experiment_from_dict, read_file
    from .folders import results_folder_of, unnamed_modules

    import_modules(imports)
    data = read_file(path)
    if results_folder_of(path) is not None:
        unnamed = unnamed_modules(experiment_from_dict(data, path, data_only=True), imports)
        if unnamed:
            options = " ".join(f"--import {name}" for name in unnamed)
            raise UsageError(f"{path} is a results folder's file, read as data: the modules "
                             f"it names ({', '.join(unnamed)}) are not imported; pass "
                             f"{options} to import them, only if you trust that folder's code")
        named = f" (imported as named: {', '.join(imports)})" if imports else ""
        print(f"{path}: a results folder's file; nothing it names is imported{named}")
    source: Any = path
    if change is not None and isinstance(data, dict):
        written = copy.deepcopy(data)
        changed_source = change(data)
        source = path if data == written else changed_source
    return experiment_from_dict(data, source, home=path.parent)


def _build_environments(config: Any) -> None:
    """Build the environment of the experiment (of every task of a suite) once, so that
    ``--check`` fails on bad environment params as ``run`` would."""
    from .runner import check_environments
    from .suite import task_configs

    experiments = task_configs(config) if config.tasks else {None: config}
    built: set[str] = set()  # an agent on the same spaces is built once for every task
    for task, experiment in experiments.items():
        try:
            check_environments(experiment, built)
        except ConfigError as error:
            raise ConfigError(f"{config.name}, task {task}: {error}" if task else error) \
                from None


#: Seconds ``--check`` waits for each LLM server's answer.
PROBE_SECONDS = 5.0


def llm_backend_specs(config: Any) -> dict[str, dict[str, Any]]:
    """The backend specs the experiment names (its LLM agents', advisors', reward shaping's,
    instructions' and llm adapters'), by where they stand (``agents.1.params.backend``);
    ``auto`` left out (it chooses at run time)."""
    from ..adapters.llm import LLMAdapter
    from ..llm import BACKENDS
    from .config import BACKEND_KEYS

    found: dict[str, dict[str, Any]] = {}

    def walk(value: Any, where: str) -> None:
        if isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{where}.{i}")
        if not isinstance(value, dict):
            return
        for key, item in value.items():
            spec = {"backend": item} if isinstance(item, str) else item
            if key in BACKEND_KEYS and isinstance(spec, dict) and spec.get("backend") in BACKENDS:
                found[f"{where}.{key}".lstrip(".")] = dict(spec)
            elif where != "" or key != "adapters":
                walk(item, f"{where}.{key}")

    data = config.resolved()
    walk(data, "")
    for i, adapter in enumerate(data.get("adapters") or []):
        settings = adapter.get("settings") or {}
        if adapter.get("type") == "llm" and settings.get("backend") in BACKENDS:
            found[f"adapters.{i}.settings"] = {k: v for k, v in settings.items()
                                               if k not in LLMAdapter.model_fields}
    return found


def probe_llm_servers(config: Any, timeout: float = PROBE_SECONDS) -> None:
    """One cheap request (the model list) to every LLM server (openai, ollama) the
    experiment names, each within ``timeout`` seconds: a down server or a wrong ``base_url``
    is one ConfigError naming where the file names it, before anything trains. Nothing is
    cached or written."""
    from ..llm import LLMError, make_backend

    asked: set[str] = set()
    for where, spec in llm_backend_specs(config).items():
        key = repr(sorted(spec.items(), key=str))
        if key in asked or spec["backend"] not in ("openai", "ollama"):  # the others: local
            continue
        asked.add(key)
        try:
            make_backend({**spec, "cache_path": None}).probe(timeout)
        except (LLMError, ValueError) as error:
            raise ConfigError(f"{where}: {' '.join(str(error).split())} (--offline skips this "
                              "check)") from None


def command_prerender(args: argparse.Namespace) -> int:
    from .runner import prerender

    config = _load_experiment(_config_file(args.file), args.imports)
    if args.no_progress:
        quiet_model_loading()
    counters = prerender(config, progress=not args.no_progress)
    if not counters:
        print(f"{config.environment.id}: no enumerable state set; nothing to prerender")
    for name, stats in counters.items():
        shown = ", ".join(f"{k}={v:g}" for k, v in stats.items() if v)
        print(f"{name}: {shown}")
    return 0


def command_report(args: argparse.Namespace) -> int:
    from .report import write_report
    from .suite import SUITE_FILE, write_suite_report

    suites = [folder for folder in args.folder if (folder / SUITE_FILE).is_file()]
    if len(args.folder) > 1 and suites:
        return _merge_suites(args.folder, suites, args.out or Path("comparison"))
    names = [folder.name for folder in args.folder]
    if len(set(names)) < len(names) and all((f.parent / SUITE_FILE).is_file()
                                            for f in args.folder):
        parents = " ".join(sorted({str(f.parent) for f in args.folder}))
        raise UsageError(f"{' '.join(map(str, args.folder))}: task folders of suites, named "
                         f"alike; to put the suites in one table: langadapt report {parents}")
    if len(args.folder) > 1:
        from .report import compare_folders

        out = args.out or Path("comparison")
        print(compare_folders(args.folder, out))
        print(f"written: {out}/summary.csv, summary.md, learning_curves.png, final_returns.png")
        return 0
    if args.out is not None:
        raise UsageError(f"--out {args.out} is for comparing several folders; one folder's "
                         "report is rebuilt in the folder")
    folder = args.folder[0]
    if (folder / SUITE_FILE).is_file():
        write_suite_report(folder)
    else:
        write_report(folder)
    return 0


def _merge_suites(folders: list[Path], suites: list[Path], out: Path) -> int:
    from .suite import merge_suites

    others = [str(folder) for folder in folders if folder not in suites]
    if others:
        tasks = [f for f in others if (Path(f).parent / "suite.yaml").is_file()]
        hint = (f" ({', '.join(tasks)}: a task folder of a suite; give the suite's folder)"
                if tasks else "")
        raise UsageError(f"{', '.join(map(str, suites))}: suite folders, {', '.join(others)}: "
                         f"not; report merges suite folders only with suite folders{hint}")
    merge_suites(folders, out)
    return 0


def command_init(args: argparse.Namespace) -> int:
    packaged = _packaged_configs()
    name = args.name[: -len(".yaml")] if args.name.endswith(".yaml") else args.name
    if name not in packaged:
        raise UsageError(f"{args.name!r} is not a packaged experiment"
                         f"{suggest(name, packaged)}; packaged experiments: "
                         f"{', '.join(packaged) or 'none'}")
    target = args.path if args.path is not None else Path(f"{name}.yaml")
    if target.is_dir():
        target = target / f"{name}.yaml"
    try:
        with open(target, "x", encoding="utf-8") as handle:  # "x": never over a file or link
            handle.write(packaged[name]["resource"].read_text(encoding="utf-8"))
    except FileExistsError:
        raise UsageError(f"{target} exists; give another PATH (init never overwrites)") from None
    print(f"written: {target} (edit it, then: langadapt run {target})")
    return 0


COMMANDS = {
    "init": command_init,
    "run": command_run,
    "finetune": command_run,
    "prerender": command_prerender,
    "report": command_report,
}
