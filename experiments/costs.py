"""What the runs of a results folder cost, read from their ``runs/<run>/done.json``: LLM
calls, seconds spent waiting for LLM answers and CPU seconds, per adapter x agent (summed over
its runs).

A run's LLM calls and seconds are its adapter's plus its LLM roles' (agent, advisor, reward
shaping, instructions); its CPU seconds are those of the process that ran it, all threads
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

    llm_calls: float = 0.0
    llm_seconds: float = 0.0
    cpu_seconds: float = 0.0

    @classmethod
    def unknown(cls) -> Cost:
        return cls(math.nan, math.nan, math.nan)

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.llm_calls + other.llm_calls, self.llm_seconds + other.llm_seconds,
                    self.cpu_seconds + other.cpu_seconds)

    def cells(self) -> str:
        """``calls | LLM s | CPU s`` for a markdown table (empty where unknown)."""
        calls = "" if math.isnan(self.llm_calls) else f"{self.llm_calls:.0f}"
        return " | ".join([calls, *("" if math.isnan(v) else f"{v:.1f}"
                                    for v in (self.llm_seconds, self.cpu_seconds))])


def run_cost(record: dict[str, Any] | None) -> Cost:
    """The cost one ``done.json`` records (nan where it records none)."""
    if record is None:
        return Cost.unknown()
    roles = record.get("llm_roles")
    sources = [record.get("adapter_stats"), *(roles.values() if isinstance(roles, dict) else [])]
    sources = [s for s in sources if isinstance(s, dict)]
    calls, llm = (sum(_number(s.get(key)) for s in sources)
                  for key in ("llm_calls", "llm_seconds"))
    cpu = record.get("cpu_seconds")
    return Cost(calls, llm, _number(cpu) if cpu is not None else math.nan)


def _number(value: Any) -> float:
    """A counter of a record as a float (0 when absent, nan when not a number)."""
    if value is None:
        return 0.0
    return float(value) if isinstance(value, int | float) else math.nan


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
