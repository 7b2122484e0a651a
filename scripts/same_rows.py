"""Per-episode rows of two source trees side by side, on shrunk copies of the shipped
experiment files: ``python scripts/same_rows.py OLD_ROOT NEW_ROOT [NAME ...] [--embedded]``.

Each ``ROOT`` holds a ``langadapt`` checkout (``git worktree add --detach ROOT/langadapt REV``).
Each file is cut to its first seed and task, 400 steps or 4 episodes (GRPO's steps and a
search's rounds to 2) and 2 final episodes, run once per tree (fresh caches, one process at a
time), and its ``episodes.csv`` compared without the wall-time column. Files that ask an LLM
are named and skipped; ``--embedded`` runs those whose LLM is the embedded SmolLM2 (slower),
files naming an LLM server stay skipped. One line per file (same, differs at row N, failed);
exit 1 if any differs. See docs/development.md."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
IGNORED = {"wall_time"}
LLM_AGENTS = {"llm_policy", "llm_policy_search", "grpo"}


def needs_llm(data: dict) -> bool:
    """Whether the file asks an LLM anything (an llm adapter, an LLM role or agent)."""
    env = data.get("environment", {})
    return (any(a.get("type") == "llm" for a in data.get("adapters", []))
            or any(a.get("type") in LLM_AGENTS or a.get("advisor") or a.get("reward_shaping")
                   for a in data.get("agents", []))
            or bool(env.get("reward_shaping") or env.get("instructions")))


def needs_server(data: dict) -> bool:
    """Whether the file names an LLM server (Ollama, OpenAI-compatible) rather than the
    embedded model: such a file's rows depend on the server, not on the tree."""
    text = yaml.safe_dump(data)
    return any(word in text for word in ("backend: ollama", "backend: openai", "base_url:",
                                         "host:"))


def shrunk(data: dict, out: Path, cache: Path) -> dict:
    """``data`` cut to one seed, one task, 400 steps or 4 episodes, 2 final episodes."""
    data = dict(data, output=str(out), cache_dir=str(cache), executor={"jobs": 1})
    seeds = data.get("seeds", 3)
    data["seeds"] = [seeds[0]] if isinstance(seeds, list) else 1
    if data.get("tasks"):
        first = next(iter(data["tasks"]))
        data["tasks"] = {first: data["tasks"][first]}
    blocks = [data["training"]] + [a["training"] for a in data["agents"] if a.get("training")]
    for block in blocks:
        if block.get("steps") is not None:
            block["steps"] = min(block["steps"], 400)
        if block.get("episodes") is not None:
            block["episodes"] = min(block["episodes"], 4)
    for agent in data["agents"]:  # budgets of their own: GRPO's steps, a search's rounds
        params = agent.get("params") or {}
        for key, most in (("steps", 2), ("rounds", 2)):
            if agent.get("type") in LLM_AGENTS and isinstance(params.get(key), int):
                params[key] = min(params[key], most)
    evaluation = data.setdefault("evaluation", {})
    for key in ("every", "every_steps", "keep_best"):
        evaluation.pop(key, None)
    for block in (evaluation, evaluation.get("transfer") or {}):
        if block.get("heldout_seeds"):
            block["heldout_seeds"] = dict(block["heldout_seeds"], count=2)
    if not evaluation.get("heldout_seeds"):
        evaluation["final_episodes"] = 2
    return data


def rows(folder: Path) -> list[dict]:
    found = sorted(folder.rglob("episodes.csv"))
    found = [f for f in found if f.parent.parent.name == "runs"]
    out = []
    for path in found:
        with path.open() as handle:
            for row in csv.DictReader(handle):
                out.append({k: v for k, v in row.items() if k not in IGNORED})
    return out


def run(root: Path, data: dict, work: Path) -> list[dict] | str:
    work.mkdir(parents=True)
    path = work / "experiment.yaml"
    path.write_text(yaml.safe_dump(shrunk(data, work / "out", work / "cache")))
    env = dict(os.environ, PYTHONPATH=str(root))
    done = subprocess.run([sys.executable, "-m", "langadapt.experiments.cli", "run", str(path),
                           "--no-progress", "--force"], env=env, capture_output=True, text=True,
                          timeout=900)
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return rows(work / "out")


def main(argv: list[str]) -> int:
    embedded = "--embedded" in argv
    old, new, *names = [word for word in argv if word != "--embedded"]
    files = [CONFIGS / f"{n}.yaml" for n in names] or sorted(CONFIGS.glob("*.yaml"))
    differ = False
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            data = yaml.safe_load(path.read_text())
            if needs_llm(data) and (not embedded or needs_server(data)):
                why = "an LLM server" if embedded else "an LLM; --embedded runs SmolLM2's"
                print(f"{path.stem}: skipped (asks {why})", flush=True)
                continue
            a = run(Path(old), data, Path(tmp) / path.stem / "old")
            b = run(Path(new), data, Path(tmp) / path.stem / "new")
            if isinstance(a, str) or isinstance(b, str):
                print(f"{path.stem}: failed: old {a if isinstance(a, str) else 'ran'}; "
                      f"new {b if isinstance(b, str) else 'ran'}", flush=True)
                differ = True
                continue
            first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
            if first is None and len(a) == len(b):
                print(f"{path.stem}: same ({len(a)} rows)", flush=True)
            else:
                differ = True
                where = first if first is not None else min(len(a), len(b))
                print(f"{path.stem}: differs at row {where} ({len(a)} vs {len(b)} rows)",
                      flush=True)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
