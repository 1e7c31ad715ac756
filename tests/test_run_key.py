"""What may be reused between runs: every field of the run key, the resume's revision pin and the chunk-id guard.

All through the public API (``run_benchmark``/``RunOptions``) on a tiny local BERT. ``load_masked_lm`` is wrapped,
not replaced, to count loads and to see which revision a resume asks for; the real model always runs.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

import queerbench.models.masked.predict as predict_module
from queerbench.run.pipeline import RunOptions, default_out_dir, run_benchmark
from tests.run_parts import fix_part_size, stderr_is_a_terminal
from tests.tiny_models import tiny_bert

FAST = {"n_bootstrap": 20, "n_permutations": 20, "toxicity": "none"}
N_SENTENCES_PER_TEMPLATE = 77


def quiet(_: str) -> None:
    pass


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tiny_bert(tmp_path_factory.mktemp("models")))


@pytest.fixture(scope="module")
def finished(bert: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[RunOptions, Path]:
    options = RunOptions(model=bert, limit=2, top_k=5, **FAST)
    out = tmp_path_factory.mktemp("runs") / "run"
    run_benchmark(options, out, log=quiet)
    return options, out


@pytest.fixture()
def loads(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """Every call of the real ``load_masked_lm``, with its keyword arguments."""
    real = predict_module.load_masked_lm
    calls: list[dict] = []

    def spy(model: str, **kwargs):
        calls.append({"model": model, **kwargs})
        return real(model, **kwargs)

    monkeypatch.setattr(predict_module, "load_masked_lm", spy)
    return calls


@pytest.mark.parametrize(
    "change",
    [{"top_k": 3}, {"config": "paper"}, {"dtype": "bfloat16"}, {"revision": "v2"}, {"limit": 1}, {"limit": None}],
    ids=["top_k", "config", "dtype", "revision", "limit", "no-limit"],
)
def test_a_rerun_with_another_key_field_never_reuses_predictions(
    finished: tuple[RunOptions, Path], tmp_path: Path, loads: list[dict], change: dict
):
    options, done = finished
    out = tmp_path / "run"
    shutil.copytree(done, out)
    before = (out / "predictions.parquet").read_bytes()
    other = replace(options, **change)
    try:
        result = run_benchmark(other, out, log=quiet)
    except FileExistsError as exc:  # refused: the folder names the field that differs and is left as it was
        assert "holds another run" in str(exc) and next(iter(change)) in str(exc)
        assert (out / "predictions.parquet").read_bytes() == before
    else:  # or predicted afresh for the new key: never the old predictions
        assert not result.reused_predictions and result.n_predicted > 0 and loads
        preds = pd.read_parquet(out / "predictions.parquet")
        assert all(len(t) == other.top_k for t in preds["tokens"]) and result.scores["config"] == other.config


def test_scoring_only_options_reuse_the_predictions(finished: tuple[RunOptions, Path], tmp_path: Path, loads):
    options, done = finished
    out = tmp_path / "run"
    shutil.copytree(done, out)
    other = replace(options, n_bootstrap=30, n_permutations=0, seed=3, batch_size=7, device="cpu")
    result = run_benchmark(other, out, log=quiet)
    assert result.reused_predictions and result.n_predicted == 0 and loads == []
    assert result.scores["run"]["options"]["seed"] == 3


def test_default_out_dirs_differ_in_every_key_field():
    base = RunOptions(model="org/m")
    variants = [
        base,
        replace(base, top_k=3),
        replace(base, config="paper", toxicity_input="full"),
        replace(base, dtype="bfloat16"),
        replace(base, revision="v1"),
        replace(base, limit=10),
        replace(base, model="org/other"),
    ]
    assert len({default_out_dir(v) for v in variants}) == len(variants)
    assert default_out_dir(replace(base, seed=9, n_bootstrap=5)) == default_out_dir(base)
    # the names the README documents: runs/<model>-<config>-k<k>, plus -limit<N>, -rev<revision>, -<dtype>
    assert [default_out_dir(v).as_posix() for v in variants] == [
        "runs/org_m-default-k5",
        "runs/org_m-default-k3",
        "runs/org_m-paper-k5",
        "runs/org_m-default-k5-bfloat16",
        "runs/org_m-default-k5-revv1",
        "runs/org_m-default-k5-limit10",
        "runs/org_other-default-k5",
    ]
    every = replace(base, limit=2, revision="main", dtype="float16")
    assert default_out_dir(every).as_posix() == "runs/org_m-default-k5-limit2-revmain-float16"


def _interrupted(options: RunOptions, out: Path, monkeypatch: pytest.MonkeyPatch, after_chunks: int = 1) -> None:
    """Start a run and kill it (KeyboardInterrupt) once ``after_chunks`` chunks are saved."""
    real = predict_module.predict
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > after_chunks:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(predict_module, "predict", flaky)
    with pytest.raises(KeyboardInterrupt):
        run_benchmark(options, out, log=quiet)
    monkeypatch.setattr(predict_module, "predict", real)
    assert len(list((out / ".chunks").glob("chunk-*.parquet"))) == after_chunks
    assert not (out / "predictions.parquet").exists()


def _reporting_commit(monkeypatch: pytest.MonkeyPatch, commits: list[str]) -> list[dict]:
    """Wrap the loader so that successive loads report the given commits (as a Hub model would)."""
    real = predict_module.load_masked_lm
    calls: list[dict] = []

    def loader(model: str, **kwargs):
        calls.append(kwargs)
        lm = real(model, **kwargs)
        lm.commit_hash = commits[min(len(calls), len(commits)) - 1]
        return lm

    monkeypatch.setattr(predict_module, "load_masked_lm", loader)
    return calls


def test_a_resume_is_pinned_to_the_commit_of_its_first_chunks(bert: str, tmp_path: Path, monkeypatch):
    fix_part_size(monkeypatch, 40)
    first, later = "a" * 40, "b" * 40
    calls = _reporting_commit(monkeypatch, [first, first])
    options = RunOptions(model=bert, limit=1, **FAST)  # no --revision: the first load resolves one
    _interrupted(options, tmp_path / "r", monkeypatch)
    assert calls[0].get("revision") is None
    seen: list[tuple[int, int]] = []
    result = run_benchmark(options, tmp_path / "r", log=quiet, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (N_SENTENCES_PER_TEMPLATE, N_SENTENCES_PER_TEMPLATE) and seen[0][0] > 40  # counts the saved 40
    assert calls[1].get("revision") == first  # the resume asks for the very commit of the saved chunks
    assert result.n_predicted == N_SENTENCES_PER_TEMPLATE - 40
    assert result.scores["run"]["revision"] == first

    # a resume whose model resolves to another commit is refused, and nothing is mixed
    fix_part_size(monkeypatch, 40)
    _reporting_commit(monkeypatch, [first, later])
    _interrupted(options, tmp_path / "s", monkeypatch)
    with pytest.raises(RuntimeError) as info:
        run_benchmark(options, tmp_path / "s", log=quiet)
    assert str(info.value) == (
        f"{bert} now resolves to commit {later}, but the saved chunks in {tmp_path / 's/.chunks'} came from another "
        "commit; delete that folder to start over"
    )
    assert not (tmp_path / "s/predictions.parquet").exists()


def test_a_resume_loads_the_model_as_the_run_asked(bert: str, tmp_path: Path, monkeypatch, capsys):
    """The device and dtype of the options reach the loader on the first start and on the resume; without a
    progress callback a terminal bar counts the sentences, the saved ones included."""
    stderr_is_a_terminal(monkeypatch)
    fix_part_size(monkeypatch, 40)
    calls = _reporting_commit(monkeypatch, ["c" * 40])
    options = RunOptions(model=bert, limit=1, device="cpu", dtype="bfloat16", **FAST)
    _interrupted(options, tmp_path / "r", monkeypatch)
    capsys.readouterr()
    result = run_benchmark(options, tmp_path / "r", log=quiet)
    assert [(c["device"], c["dtype"]) for c in calls] == [("cpu", "bfloat16")] * 2
    assert result.scores["run"]["dtype"] == "bfloat16" and result.n_predicted == N_SENTENCES_PER_TEMPLATE - 40
    bar = capsys.readouterr().err
    assert re.search(rf"predicting: +100%.*\b{N_SENTENCES_PER_TEMPLATE}/{N_SENTENCES_PER_TEMPLATE}\b.*sent", bar), bar
    assert f"40/{N_SENTENCES_PER_TEMPLATE}" in bar  # the bar starts at the saved chunk


def test_a_resume_never_mixes_chunks_of_other_sentences(bert: str, tmp_path: Path, monkeypatch):
    fix_part_size(monkeypatch, 40)
    options = RunOptions(model=bert, limit=1, **FAST)
    _interrupted(options, tmp_path / "r", monkeypatch)
    chunk = next((tmp_path / "r/.chunks").glob("chunk-*.parquet"))
    saved = pd.read_parquet(chunk)
    saved["id"] = saved["id"].iloc[::-1].to_numpy()  # the same ids in another order: not this run's sentences
    saved.to_parquet(chunk, index=False)
    with pytest.raises(ValueError, match="do not match this run's sentences"):
        run_benchmark(options, tmp_path / "r", log=quiet)
    assert not (tmp_path / "r/predictions.parquet").exists()


@pytest.mark.parametrize("chunk", [38, 77, 100])
def test_every_sentence_lands_in_exactly_one_chunk(bert: str, tmp_path: Path, monkeypatch, chunk: int):
    """77 sentences in chunks of 38 (the last holds one), 77 (exactly one) or 100 (one, partly filled)."""
    fix_part_size(monkeypatch, chunk)
    result = run_benchmark(RunOptions(model=bert, limit=1, **FAST), tmp_path / "r", log=quiet)
    preds = pd.read_parquet(tmp_path / "r/predictions.parquet")
    assert result.n_predicted == N_SENTENCES_PER_TEMPLATE == len(preds) == preds["id"].nunique()
