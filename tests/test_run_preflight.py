"""Checks before inference: every check that needs no weights runs before the model loads, and a failed start
leaves no half-made output folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from queerbench.run.pipeline import RunOptions, run_benchmark
from tests.tiny_models import tiny_bert

FAST = {"n_bootstrap": 0, "n_permutations": 0}


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_bert(tmp_path_factory.mktemp("models"))


# ------------------------------------------------------------------------------------------ before inference
@pytest.fixture
def no_model_load(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args, **kwargs):
        raise AssertionError("the model's weights must not load before every check has passed")

    monkeypatch.setattr("queerbench.models.masked.predict.load_masked_lm", boom)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"top_k": 100000}, r"--top-k 100000 exceeds the \d+ whole-word"),
        ({"top_k": 100000, "config": "paper"}, r"--top-k 100000 exceeds the \d+ vocabulary entries"),
        ({"toxicity": "precomputed"}, "use `queerbench score"),
        ({"toxicity": "hf:/no/such/folder"}, "no such folder"),
        ({"model": "/no/such/model"}, "--model /no/such/model: no such"),
    ],
)
def test_checks_run_before_the_model_loads_and_leave_no_folder(
    bert: Path, tmp_path: Path, no_model_load: None, options: dict, message: str
):
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        run_benchmark(RunOptions(**{"model": str(bert), "toxicity": "none", **options}), tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_an_unavailable_device_fails_before_the_model_loads(
    bert: Path, tmp_path: Path, no_model_load: None, monkeypatch: pytest.MonkeyPatch
):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # this machine's GPU, if any, is not there
    with pytest.raises(ValueError, match="CUDA is not available"):
        run_benchmark(RunOptions(model=str(bert), toxicity="none", device="cuda"), tmp_path / "r")
    assert not (tmp_path / "r").exists()
    with pytest.raises(ValueError, match="--dtype must be one of"):
        RunOptions(model=str(bert), dtype="int8")


def test_a_failed_model_load_leaves_no_half_made_folder(bert: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from queerbench.models.device import ModelLoadError

    def broken(*args, **kwargs):
        raise ModelLoadError("weights are corrupt")

    monkeypatch.setattr("queerbench.models.masked.predict.load_masked_lm", broken)
    options = RunOptions(model=str(bert), limit=1, toxicity="none", **FAST)
    with pytest.raises(ModelLoadError):
        run_benchmark(options, tmp_path / "new")
    assert not (tmp_path / "new").exists()
    (tmp_path / "mine").mkdir()  # an empty folder the user made stays, and stays empty
    with pytest.raises(ModelLoadError):
        run_benchmark(options, tmp_path / "mine")
    assert (tmp_path / "mine").is_dir() and not any((tmp_path / "mine").iterdir())


def test_a_rerun_of_a_finished_run_needs_no_model(bert: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    options = RunOptions(model=str(bert), limit=1, toxicity="none", **FAST)
    run_benchmark(options, tmp_path / "r", log=lambda _: None)

    def boom(*args, **kwargs):
        raise AssertionError("a finished run is re-scored without loading the model or its tokenizer")

    monkeypatch.setattr("queerbench.models.masked.predict.load_masked_lm_tokenizer", boom)
    assert run_benchmark(options, tmp_path / "r", log=lambda _: None).reused_predictions
