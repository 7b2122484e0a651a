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


#: Fixtures that start a process, a server with a real model, or a model: a test using one is
#: marked ``heavy`` (left out of `make test-fast`).
HEAVY_FIXTURES = frozenset({
    "llama_server", "generated", "tiny_model_dir", "exported", "base_gguf", "tiny_model",
    "finished_tiny_run",
})
#: Modules whose tests start subprocesses, worker pools, Ray clusters or the embedded model.
HEAVY_MODULES = frozenset({
    "test_ray", "test_first_hour", "test_embedded_extra", "test_faults_fork",
    "test_llm_llamacpp", "test_llm_openai", "test_finetune", "test_finetune_export",
    "test_finetune_trl_bench", "test_package", "test_checkpoints", "test_grpo_frozenlake",
    "test_continuous_control", "test_continuous_language", "test_user_code_errors",
})


def pytest_collection_modifyitems(config, items):
    """Mark ``heavy`` the tests of `HEAVY_MODULES` and those using a `HEAVY_FIXTURES` one."""
    heavy = pytest.mark.heavy
    for item in items:
        module = item.module.__name__.rpartition(".")[2] if item.module else ""
        if module in HEAVY_MODULES or HEAVY_FIXTURES & set(item.fixturenames):
            item.add_marker(heavy)


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions make, kept open to look at (matplotlib imported here
    only when a test asks for them)."""
    from matplotlib import pyplot

    kept, close = [], pyplot.close
    monkeypatch.setattr(pyplot, "close", kept.append)
    yield kept
    for figure in kept:
        close(figure)
