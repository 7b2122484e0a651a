"""Test-session settings shared by every test module: offline model loading, quiet threads."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")
# Ray clusters the tests start (ray.init, `ray start`) listen on 127.0.0.1 only: Ray reads
# this when it is imported and then uses the loopback address for every node.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
