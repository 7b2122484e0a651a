"""Test-session settings shared by every test module: offline model loading, quiet threads."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")
# Ray clusters the tests start (ray.init, `ray start`) listen on 127.0.0.1 only: Ray reads
# this when it is imported and then uses the loopback address for every node.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


@pytest.fixture
def one_torch_thread():
    """One torch thread for the test (small networks run fastest, and reproducibly, on one
    thread on a shared machine); the thread count is restored after it. A module opts in
    with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
