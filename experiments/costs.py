"""What the runs of a results folder cost, read from their ``runs/<run>/done.json``: seconds
spent waiting for LLM answers and CPU seconds, per adapter x agent (summed over its runs).

A run's LLM seconds are its adapter's plus its LLM roles' (agent, advisor, reward shaping,
instructions); its CPU seconds are those of the process that ran it, all threads
(``time.process_time``). A run without a readable record, or written before this field
existed, counts as unknown (nan), never as zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import ExperimentConfig
from .results import read_run_record, runs_of


@dataclass(frozen=True)
class Cost:
    """Totals over the runs of one adapter x agent (nan: some run's figure is unknown)."""

    llm_seconds: float = 0.0
    cpu_seconds: float = 0.0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.llm_seconds + other.llm_seconds, self.cpu_seconds + other.cpu_seconds)


def run_cost(record: dict[str, Any] | None) -> Cost:
    """The cost one ``done.json`` records (nan where it records none)."""
    if record is None:
        return Cost(math.nan, math.nan)
    sources = [record.get("adapter_stats"), *(record.get("llm_roles") or {}).values()]
    llm = sum(float(s.get("llm_seconds", 0.0)) for s in sources if isinstance(s, dict))
    cpu = record.get("cpu_seconds")
    return Cost(llm, float(cpu) if isinstance(cpu, int | float) else math.nan)


def folder_costs(config: ExperimentConfig, folder: Path) -> dict[tuple[str, str], Cost]:
    """``{(adapter, agent): Cost}`` of the finished runs of ``config`` in ``folder``."""
    costs: dict[tuple[str, str], Cost] = {}
    for run in runs_of(config):
        done = folder / "runs" / run.key / "done.json"
        if not done.is_file():
            continue  # a failed run: not in the table either
        key = (run.adapter.name, run.agent.name)
        costs[key] = costs.get(key, Cost()) + run_cost(read_run_record(done))
    return costs
