"""Prediction saved in parts (``run_predict.predict_chunks``) for every method, on a handful of sentences in parts of 2.

What a user gets from a run's prediction step, checked against the library's predictors called directly on all the
sentences at once (an independent path: no chunks, no resume): the values and their order across chunks, the
model record in ``.chunks/model.json`` (its ``fingerprint`` included), a progress tick per chunk, the terminal bar,
the ``queergen`` config's raw top-k (the paper's procedure, one sentence at a time), the generative predictors built
with the run's options, and a resume that predicts only the missing chunk or refuses other weights.

Fast on purpose: ``tools/mutation.py`` runs this file against every mutant of ``predict_chunks``. Real tiny models
(``tests/tiny_models.py``), no mock of the code under test.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from queerbench.methods.scored.predictor import ScoredPredictor
from queerbench.models.fingerprint import fingerprint_model
from queerbench.models.generation import ResponseCache
from queerbench.models.masked.predict import load_masked_lm, paper_one_at_a_time, predict
from queerbench.models.spec import ModelSpec
from queerbench.run import parts as run_predict
from queerbench.run import pipeline as run_module
from queerbench.run.pipeline import RunOptions
from tests.run_parts import fix_part_size, stderr_is_a_terminal
from tests.tiny_models import tiny_bert, tiny_llama, tiny_roberta

N = 5  # sentences: chunks of 2, 2 and 1
CHUNK = 2
FAST = {"n_bootstrap": 20, "n_permutations": 20, "toxicity": "none"}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("models")
    return {
        "bert": str(tiny_bert(root)),
        "roberta": str(tiny_roberta(root)),
        "llama": str(tiny_llama(root, chat_template=False)),
    }


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    fix_part_size(monkeypatch, CHUNK)


def _frame(config: str = "default", n: int = N) -> pd.DataFrame:
    """The first ``n`` sentences of a config, spread over several templates and subjects."""
    frame = run_module.run_items(RunOptions(model="org/m", config=config, **FAST))
    return frame.iloc[:: len(frame) // n].head(n).reset_index(drop=True)


class Ticks:
    """A ``progress`` callback that records every (done, total) it is given."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []

    def __call__(self, done: int, total: int) -> None:
        self.seen.append((done, total))


def _chunks(
    frame: pd.DataFrame, options: RunOptions, out: Path, progress=None, fingerprint=None, log=None
) -> tuple[pd.DataFrame, dict, int]:
    out.mkdir(parents=True, exist_ok=True)
    lines: list[str] = [] if log is None else log
    return run_predict.predict_chunks(frame, options, out, progress, fingerprint=fingerprint, log=lines.append)


def _close(column: pd.Series, expected: list[list[float]]) -> bool:
    """Row by row, the same numbers (to float32 precision) in the same order."""
    rows = [list(v) for v in column]
    return len(rows) == len(expected) and all(
        len(a) == len(b) and np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(rows, expected, strict=True)
    )


def _saved_chunks(out: Path) -> list[str]:
    return sorted(p.name for p in (out / ".chunks").glob("chunk-*.parquet"))


def _parts(n: int = N) -> list[str]:
    """The names of the parts of ``n`` sentences in parts of ``CHUNK``: ``chunk-<first row>-<end row>.parquet``."""
    return [f"chunk-{a:06d}-{min(a + CHUNK, n):06d}.parquet" for a in range(0, n, CHUNK)]


# ------------------------------------------------------------------------------------------------ masked LM
def test_masked_lm_chunks_hold_the_predictions_in_order(models: dict[str, str], tmp_path: Path, capsys):
    frame = _frame()
    options = RunOptions(model=models["bert"], method="mlm", top_k=3, **FAST)
    fingerprint = fingerprint_model(models["bert"])
    ticks = Ticks()
    chunks, meta, predicted = _chunks(frame, options, tmp_path / "run", ticks, fingerprint)
    lm = load_masked_lm(models["bert"])
    sentences = frame["masked_sentence"].tolist()
    expected = predict(lm, sentences, 3, mode="whole_word")  # all sentences at once: no chunks
    assert predicted == N and _saved_chunks(tmp_path / "run") == _parts()
    assert list(chunks.columns) == ["id", "tokens", "token_ids", "probs"]
    assert list(chunks.index) == list(range(N))  # one table, not three stacked with their own row numbers
    assert chunks["id"].tolist() == frame["id"].tolist()
    assert [list(t) for t in chunks["tokens"]] == expected.tokens
    assert [list(t) for t in chunks["token_ids"]] == expected.ids
    assert _close(chunks["probs"], expected.probs)
    # the default config ranks whole words only: the paper's raw top-k differs on these sentences
    assert predict(lm, sentences, 3, mode="raw").tokens != expected.tokens
    # what was loaded, with the model folder's fingerprint, also on disk for a resume to compare with
    assert meta == {**lm.metadata(), "fingerprint": fingerprint}
    assert json.loads((tmp_path / "run/.chunks/model.json").read_text()) == meta
    # one tick per part (a batch each), counting up to the total; the terminal bar stays off
    assert ticks.seen == [(2, N), (4, N), (5, N)]
    assert "predicting" not in capsys.readouterr().err


def test_a_masked_lm_resume_predicts_only_the_missing_chunks(
    models: dict[str, str], tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
):
    """A run killed after its first chunk: the resume predicts the other two, in batches of the run's size."""
    stderr_is_a_terminal(monkeypatch)
    frame = _frame()
    options = RunOptions(model=models["bert"], method="mlm", top_k=2, batch_size=1, **FAST)
    out = tmp_path / "run"
    first, first_meta, _ = _chunks(frame, options, out)
    bar = capsys.readouterr().err  # no progress callback: a terminal bar counts the sentences
    assert re.search(rf"predicting: 100%\|[^|]*\| {N}/{N} \[[^]]*(\d|\?)sent/s\]", bar), bar
    for name in _parts()[1:]:
        (out / ".chunks" / name).unlink()
    ticks = Ticks()
    again, meta, predicted = _chunks(frame, options, out, ticks)
    # the 2 saved sentences count from the start; then a tick per batch of one sentence
    assert predicted == 3 and ticks.seen == [(3, N), (4, N), (5, N)]
    assert meta == first_meta == json.loads((out / ".chunks/model.json").read_text())
    assert again.equals(first) and _saved_chunks(out) == _parts()


def test_the_queergen_config_is_the_papers_raw_top_k(models: dict[str, str], tmp_path: Path):
    """QueerGen's predictions are the paper's procedure: the sentence wrapped in ``<s> … </s>``, raw top-k."""
    frame = _frame("queergen")
    options = RunOptions(model=models["roberta"], config="queergen", method="mlm", top_k=4, **FAST)
    chunks, _, _ = _chunks(frame, options, tmp_path / "run")
    lm = load_masked_lm(models["roberta"])
    sentences = frame["masked_sentence"].tolist()
    paper = [paper_one_at_a_time(lm.model, lm.tokenizer, s, 4) for s in sentences]
    assert [list(t) for t in chunks["tokens"]] == [p.tokens for p in paper]
    assert [list(t) for t in chunks["token_ids"]] == [p.ids for p in paper]
    assert _close(chunks["probs"], [p.probs for p in paper])
    # neither the whole-word ranking nor the raw top-k without the paper's wrapping gives these
    assert predict(lm, sentences, 4, mode="whole_word").ids != [p.ids for p in paper]
    tok = lm.tokenizer
    enc = tok([s.replace("[MASK]", tok.mask_token) for s in sentences], return_tensors="pt", padding=True)
    with torch.inference_mode():
        logits = lm.model(**enc).logits
    rows, cols = (enc["input_ids"] == tok.mask_token_id).nonzero(as_tuple=True)
    unwrapped = [logits[r, c].softmax(-1).topk(4).indices.tolist() for r, c in zip(rows, cols, strict=True)]
    assert unwrapped != [p.ids for p in paper]


# ------------------------------------------------------------------------------------------------ generative
def test_scored_chunks_come_from_a_predictor_built_with_the_run_options(models: dict[str, str], tmp_path: Path, capsys):
    frame = _frame()
    options = RunOptions(model=models["llama"], method="scored", top_k=2, batch_size=3, **FAST)
    ticks = Ticks()
    out = tmp_path / "run"
    chunks, meta, predicted = _chunks(frame, options, out, ticks)
    direct = ScoredPredictor(models["llama"], top_k=2, spec=ModelSpec(device="auto", dtype="float32", batch_size=3))
    expected = direct.predict(frame["id"].tolist(), frame["masked_sentence"].tolist(), lambda n: None)
    assert predicted == N and list(chunks.index) == list(range(N))
    assert chunks["id"].tolist() == frame["id"].tolist()
    assert list(chunks.columns) == ["id", *expected]
    assert [list(t) for t in chunks["tokens"]] == expected["tokens"]
    assert [list(n) for n in chunks["n_word_tokens"]] == expected["n_word_tokens"]
    assert _close(chunks["probs"], expected["probs"]) and _close(chunks["logprobs"], expected["logprobs"])
    assert meta == direct.metadata() and meta["fingerprint"] == fingerprint_model(models["llama"])
    assert meta["decoding"]["candidates"] == 2 * meta["decoding"]["candidates_per_k"]  # built with top_k=2
    assert json.loads((out / ".chunks/model.json").read_text()) == meta
    assert ticks.seen == [(2, N), (4, N), (5, N)] and "predicting" not in capsys.readouterr().err

    # a resume with the same weights predicts the missing chunk only; with other weights it is refused
    (out / ".chunks" / _parts()[2]).unlink()
    again, _, predicted = _chunks(frame, options, out, ticks)
    assert predicted == 1 and again.equals(chunks) and ticks.seen[-1] == (N, N)
    (out / ".chunks" / _parts()[2]).unlink()
    (out / ".chunks/model.json").write_text(json.dumps({**meta, "fingerprint": {"kind": "local", "sha256": "0"}}))
    with pytest.raises(ValueError) as info:
        _chunks(frame, options, out)
    assert str(info.value) == (
        f"the weights of {models['llama']} changed since the saved chunks in {out / '.chunks'} were predicted; "
        "delete that folder to start over (a run never mixes two models' rows)"
    )
    assert _saved_chunks(out) == _parts()[:2]


def test_instructed_chunks_keep_their_replies_in_the_run_cache(models: dict[str, str], tmp_path: Path):
    frame = _frame(n=3)
    options = RunOptions(
        model=models["llama"], method="instructed", top_k=1, method_settings={"max_new_tokens": 3}, seed=1, **FAST
    )
    out = tmp_path / "run"
    log: list[str] = []
    ticks = Ticks()
    chunks, meta, predicted = _chunks(frame, options, out, ticks, log=log)
    assert predicted == 3 and chunks["id"].tolist() == frame["id"].tolist() and list(chunks.index) == [0, 1, 2]
    assert all(len(r) == 1 for r in chunks["reply"])  # top_k=1: one reply a sentence
    assert meta["method"] == "instructed" and meta["decoding"]["max_new_tokens"] == 3
    assert ticks.seen[-1] == (3, 3)
    # the model has no chat template: said once through the run's log, not printed
    assert [line for line in log if line.startswith("note: ")], log
    # the cache is closed when the predictions are in: SQLite removes its write-ahead log with the last connection
    assert sorted(p.name for p in (out / ".chunks").iterdir()) == [*_parts(3), "model.json", "replies.sqlite"]
    with ResponseCache(out / ".chunks/replies.sqlite") as cache:  # where a resume finds them
        assert cache.count() == 3
