"""``langadapt evaluate`` and ``langadapt play``: a results folder's kept policies played
again, on held-out episodes or into a picture (docs/configuration.md, "Kept policies")."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .cli_run import add_import_option, import_modules, path_argument
from .schema import UsageError


def add_parsers(commands: Any) -> None:
    evaluate = commands.add_parser(
        "evaluate", help="play a results folder's kept policies again on held-out episodes",
        description="Play the kept policies of a results folder (or of one of its run "
        "folders, runs/<run>) on held-out episodes of the same or other environment "
        "parameters, writing a results folder that `report` reads like any other. Nothing "
        "the folder holds is imported or unpickled.")
    evaluate.add_argument("folder", type=path_argument, metavar="RUN_OR_FOLDER")
    evaluate.add_argument("--out", type=path_argument, required=True, help="the new results folder")
    evaluate.add_argument("--set", dest="assignments", action="append", default=[],
                          metavar="KEY=VALUE", help="change the folder's experiment, e.g. "
                          "--set environment.params.num_dists=8; repeatable")
    evaluate.add_argument("--episodes", type=int, help="held-out episodes per policy "
                          "(default: the folder's)")
    evaluate.add_argument("--heldout", metavar="FIRST,COUNT",
                          help="the held-out seeds FIRST..FIRST+COUNT-1 (default: the folder's)")
    mode = evaluate.add_mutually_exclusive_group()
    mode.add_argument("--sampled", action="store_const", const=True, dest="sampled",
                      help="sample the policy's legal actions (SB3 agents)")
    mode.add_argument("--greedy", action="store_const", const=False, dest="sampled",
                      help="the policy's most probable legal action (SB3 agents)")
    evaluate.add_argument("--force", action="store_true",
                          help="replace the earlier results in --out (a folder langadapt wrote)")
    add_import_option(evaluate)

    play = commands.add_parser(
        "play", help="render a kept policy's episodes to a GIF (or MP4)",
        description="Play a run's kept policy as the run evaluated it (greedy, or sampled "
        "with deterministic: false) and write its episodes as a GIF (or an MP4 where "
        "imageio's ffmpeg writer is installed), with the description the agent saw and the "
        "action it chose under each frame.")
    play.add_argument("run", type=path_argument, metavar="RUN",
                      help="a run folder, results/<name>/runs/<run>")
    play.add_argument("--out", type=path_argument,
                      help="the .gif or .mp4 file (default: RUN's name.gif)")
    play.add_argument("--episodes", type=int, default=1, help="episodes to play (default 1)")
    play.add_argument("--seed", type=int, help="reset seed of the first episode (default: the "
                      "run's first held-out seed, else its final evaluation's first seed)")
    play.add_argument("--policy", choices=("final", "best"), default="final",
                      help="which kept policy (default final)")
    play.add_argument("--fps", type=float, default=4.0, help="frames per second (default 4)")
    play.add_argument("--set", dest="assignments", action="append", default=[],
                      metavar="KEY=VALUE", help="change the run's experiment as evaluate "
                      "--set does, e.g. --set environment.params.maze=medium; repeatable")
    add_import_option(play)


def _heldout(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    first, _, count = text.partition(",")
    try:
        pair = (int(first), int(count))
    except ValueError:
        pair = (-1, -1)
    if pair[0] < 0 or not 1 <= pair[1] <= 1_000_000:
        raise UsageError(f"--heldout {text!r}: expected FIRST,COUNT (whole numbers, FIRST >= 0, "
                         "COUNT from 1 to 1,000,000)")
    return pair


def command_evaluate(args: argparse.Namespace) -> int:
    from .kept import evaluate_folder

    if args.episodes is not None and not 1 <= args.episodes <= 1_000_000:
        raise UsageError(f"--episodes {args.episodes}: expected 1 to 1,000,000")
    import_modules(args.imports)
    evaluate_folder(args.folder, args.out, args.assignments, args.episodes,
                    _heldout(args.heldout), args.sampled, args.force, args.imports)
    return 0


def command_play(args: argparse.Namespace) -> int:
    from .play import play_run

    if not 1 <= args.episodes <= 100:
        raise UsageError(f"--episodes {args.episodes}: expected 1 to 100")
    if not 0.1 <= args.fps <= 60:
        raise UsageError(f"--fps {args.fps}: expected 0.1 to 60")
    if args.seed is not None and args.seed < 0:
        raise UsageError(f"--seed {args.seed}: expected a whole number >= 0")
    import_modules(args.imports)
    play_run(args.run, args.out or Path(f"{args.run.resolve().name}.gif"), args.episodes,
             args.seed, args.policy, args.fps, assignments=args.assignments)
    return 0


COMMANDS = {"evaluate": command_evaluate, "play": command_play}
