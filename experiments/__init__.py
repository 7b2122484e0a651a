"""Experiments: YAML experiment files, the runner, summaries and plots, the `langadapt` CLI."""
