"""The encoder's backends: OpenVINO's vectors match torch's, keyed apart in caches; an export
that cannot be made falls back to torch with one warning; bad settings name their key."""

from __future__ import annotations

import multiprocessing
import warnings

import numpy as np
import pytest

from langadapt.adapters import EmbeddingCache, encoder_openvino
from langadapt.adapters import encoder as encoder_module
from langadapt.adapters.encoder import BACKEND_VARIABLE, MiniLMEncoder, get_encoder

# Descriptions in the words of the BabyAI describer (fixed, so no MiniGrid is needed).
COLOURS = ("red", "green", "blue", "purple", "yellow", "grey")
OBJECTS = ("ball", "box", "key", "door")
TEXTS = [
    f"Mission: go to the {colour} {thing}. You face {facing} and carry nothing. Ahead of you "
    f"is {ahead}. You see a {colour} {thing} {steps} steps forward and {side} step right."
    for colour in COLOURS for thing in OBJECTS
    for facing, ahead, steps, side in (("north", "free space", 3, 1), ("west", "a wall", 5, 2))
] + ["", "A wall.", "word " * 300]  # the empty text, a short one, one cut at 256 tokens

openvino_only = pytest.mark.skipif(not encoder_module.openvino_installed(),
                                   reason="needs the openvino extra")


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture
def quiet_once(monkeypatch):
    """Forget which warnings this process already gave."""
    monkeypatch.setattr(encoder_module, "_WARNED", set())


@openvino_only
def test_openvino_vectors_match_torch_and_are_keyed_apart(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the export reads the local weights only
    fast = get_encoder(backend="openvino")
    slow = get_encoder(backend="torch")
    assert fast.backend_used == "openvino" and slow.backend_used == "torch"
    a, b = slow.encode_many(TEXTS), fast.encode_many(TEXTS)
    assert a.shape == b.shape == (len(TEXTS), 384) and b.dtype == np.float32
    assert cosines(a, b).min() >= 0.999
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-6)  # still unit norm
    assert slow.name == "all-MiniLM-L6-v2"
    assert fast.name == f"all-MiniLM-L6-v2+openvino-{fast.precision}"
    # one SQLite file, both encoders: neither is served the other's vectors
    path = tmp_path / "embeddings.sqlite"
    EmbeddingCache(slow, path=path).get_many(TEXTS[:3])
    reader = EmbeddingCache(fast, path=path)
    np.testing.assert_array_equal(reader.get_many(TEXTS[:3]), fast.encode_many(TEXTS[:3]))
    assert reader.store_hits == 0 and reader.misses == 3


def _encode_in_child(queue) -> None:
    queue.put(get_encoder(backend="openvino").encode_many(TEXTS[:4]))


@openvino_only
# Green alone and with its module (about 20 s); inside the whole suite its forked child never
# answered on a fresh clone this release (a fork after earlier tests' threads): left out of
# `make test` until that is understood (make test-slow runs it).
@pytest.mark.heavy
@pytest.mark.slow
def test_openvino_encoder_works_in_a_forked_child():
    parent = get_encoder(backend="openvino")
    expected = parent.encode_many(TEXTS[:4])
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_encode_in_child, args=(queue,))
    child.start()
    vectors = queue.get(timeout=120)
    child.join(timeout=30)
    assert child.exitcode == 0
    assert cosines(vectors, expected).min() >= 0.9999


@pytest.mark.parametrize("backend", ["openvino", "auto"])
def test_a_failed_export_falls_back_to_torch_with_one_warning(monkeypatch, tmp_path, quiet_once,
                                                              backend):
    if not encoder_module.openvino_installed():
        pytest.skip("needs the openvino extra")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("LANGADAPT_CACHE_DIR", str(tmp_path))  # no export there yet

    def cannot_export(model, folder):
        raise OSError(f"[Errno 30] Read-only file system: {str(folder)!r}")

    monkeypatch.setattr(encoder_openvino, "_export", cannot_export)
    expected = (r"could not export or compile all-MiniLM-L6-v2 for OpenVINO "
                r"\(OSError: \[Errno 30\] Read-only")
    with pytest.warns(RuntimeWarning, match=expected) as seen:
        first = MiniLMEncoder(backend=backend)
        second = MiniLMEncoder(backend=backend)
        vectors = [encoder.encode_many(TEXTS[:2]) for encoder in (first, second)]
    assert len([w for w in seen if "could not export" in str(w.message)]) == 1
    assert first.backend_used == second.backend_used == "torch"
    assert first.name == "all-MiniLM-L6-v2" and first.precision == "f32"
    np.testing.assert_allclose(vectors[0], get_encoder(backend="torch").encode_many(TEXTS[:2]),
                               atol=1e-6)


def test_auto_without_openvino_runs_torch_and_says_how_to_install(monkeypatch, quiet_once):
    monkeypatch.setattr(encoder_module, "openvino_installed", lambda: False)
    with pytest.raises(ImportError, match=r"backend=openvino needs OpenVINO.*"
                                          r"pip install 'langadapt\[openvino\]'"):
        MiniLMEncoder(backend="openvino")
    with pytest.warns(RuntimeWarning, match=r"pip install 'langadapt\[openvino\]'") as seen:
        encoders = [MiniLMEncoder(backend="auto") for _ in range(2)]
        assert [encoder.name for encoder in encoders] == ["all-MiniLM-L6-v2"] * 2
    assert len(seen) == 1
    assert encoders[0].backend_used == "torch"


def test_backend_comes_from_the_environment_and_a_bad_value_names_the_key(monkeypatch):
    monkeypatch.setenv(BACKEND_VARIABLE, "torch")
    encoder = MiniLMEncoder()
    assert encoder.backend == encoder.backend_used == "torch"
    assert encoder.name == "all-MiniLM-L6-v2"  # known without loading the model
    assert encoder._model is None
    monkeypatch.setenv(BACKEND_VARIABLE, "onnx")
    with pytest.raises(ValueError, match=r"LANGADAPT_ENCODER_BACKEND='onnx': expected one of "
                                         r"auto, torch, openvino"):
        MiniLMEncoder()
    with pytest.raises(ValueError, match=r"backend='Torch': expected one of auto, torch"):
        MiniLMEncoder(backend="Torch")
    monkeypatch.delenv(BACKEND_VARIABLE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no model is loaded: nothing to warn about yet
        assert MiniLMEncoder().backend == "torch"  # the default: reproducible vectors
    assert get_encoder(backend="torch") is get_encoder(backend="torch")
    assert get_encoder(backend="torch") is not get_encoder(backend="auto")


def test_a_bad_backend_variable_is_one_line_of_the_cli_before_any_work(monkeypatch, capsys):
    from langadapt.experiments.cli import main

    monkeypatch.setenv(BACKEND_VARIABLE, "bogus")
    assert main(["run", "--list"]) == 2
    assert capsys.readouterr().err.strip() == (
        "langadapt run: error: LANGADAPT_ENCODER_BACKEND='bogus': expected one of auto, "
        "torch, openvino")


@openvino_only
def test_openvino_gives_a_text_the_same_vector_alone_and_in_a_batch_of_32(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    encoder = get_encoder(backend="openvino")
    batch = TEXTS[:32]
    together = encoder.encode_many(batch)
    alone = np.concatenate([encoder.encode_many([text]) for text in batch])
    assert encoder.backend_used == "openvino"
    assert np.abs(together - alone).max() <= encoder_openvino.REPRODUCE_ATOL


def test_an_openvino_model_that_cannot_reproduce_falls_back_to_torch_with_one_warning(
        monkeypatch, quiet_once):
    if not encoder_module.openvino_installed():
        pytest.skip("needs the openvino extra")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(encoder_openvino, "batch_difference", lambda pipeline: 3e-4)
    with pytest.warns(RuntimeWarning, match=r"a text's vector changes with its batch \(by up "
                                            r"to 3\.0e-04, more than 1e-06\)") as seen:
        encoders = [MiniLMEncoder(backend="openvino") for _ in range(2)]
        assert [encoder.backend_used for encoder in encoders] == ["torch", "torch"]
    assert len([w for w in seen if "changes with its batch" in str(w.message)]) == 1
