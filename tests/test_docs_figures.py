"""Figures the docs quote agree with their source (issue 51): BALROG's leaderboard rows in
docs/performance.md with the table the report prints (experiments/stats.py), and its
quickstart figures with what `make run` prints (the README's worked example)."""

from __future__ import annotations

import re
from pathlib import Path

from langadapt.experiments.stats import BALROG_BABYAI

ROOT = Path(__file__).resolve().parents[1]
PERFORMANCE = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_balrogs_rows_in_the_performance_page_are_the_reports():
    published = {b.model: b for b in BALROG_BABYAI}
    rows = re.findall(r"^\| BALROG: (\S+) \| ([\d.]+)(?: ± ([\d.]+))? \|$", PERFORMANCE,
                      re.MULTILINE)
    assert len(rows) >= 5
    for model, average, se in rows:
        assert (float(average), float(se)) == (published[model].average, published[model].se), \
            model
    quoted = re.findall(r"BALROG's Llama-3\.2-1B \(([\d.]+) ± ([\d.]+)\)", PERFORMANCE)
    assert quoted == [("8.0", "3.8")]
    assert published["Llama-3.2-1B-Instruct"][2:4] == (8.0, 3.8)


def test_the_quickstart_figures_are_the_ones_make_run_prints():
    """The README's first screen, its worked example and docs/performance.md quote one
    printed table, over the seeds configs/quickstart.yaml names, and the intervals they
    quote separate language from raw (issue 59's decisive quickstart)."""
    import yaml

    seeds = yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())["seeds"]
    printed = re.findall(r"^\| (raw|language) \| dqn \| (\d+) \| [\d.]+ \[[\d.]+, [\d.]+\] \| "
                         r"([\d.]+) \[([\d.]+), ([\d.]+)\] \|$", README, re.MULTILINE)
    assert len(printed) == 4  # the first screen's rliable table and the worked example's
    figures = {adapter: (point, low, high) for adapter, count, point, low, high in printed}
    assert set(printed) == {(a, str(seeds), *f) for a, f in figures.items()}  # one table
    assert float(figures["language"][1]) > float(figures["raw"][2])  # the intervals separate
    said = re.search(r"The quickstart \(`make run`\) is now FrozenLake .*?language \*\*([\d.]+)%"
                     r"\*\* \[([\d.]+), ([\d.]+)\], raw \*\*([\d.]+)%\*\*\s+\[([\d.]+), "
                     r"([\d.]+)\]", PERFORMANCE, re.DOTALL)
    assert said is not None
    assert said.groups() == (*figures["language"], *figures["raw"])
