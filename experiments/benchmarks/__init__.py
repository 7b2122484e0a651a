"""Benchmark scripts behind `langadapt bench`.

Each module ``<area>_bench.py`` exposes ``run(quick: bool = False) -> dict[str, float | str]``:
it measures everything it compares within one run (this machine is shared and noisy, so
only ratios measured side by side are meaningful), prints a readable table while it
goes, and returns the named figures. ``python -m experiments.benchmarks.<area>_bench``
runs one of them on its own.
"""
