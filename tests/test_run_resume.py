"""Resume: a run saves its predictions in parts of at most 64 sentences or 30 seconds, Ctrl-C says truthfully what
it kept, and the rerun predicts only what was not saved (``queerbench.run.parts``).

The interrupted runs are real runs of tiny models (``tests/tiny_models.py``) and of the fake endpoint; the only thing
added is the Ctrl-C itself: the predictor's ``predict`` is wrapped so that one of its calls raises
``KeyboardInterrupt`` after its work is done (the worst moment: that part's predictions are lost). The pace of the
parts is checked with a clock the test drives, never with wall time.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from queerbench.cli import main
from queerbench.methods.mlm import MaskedLMPredictor
from queerbench.methods.scored.predictor import ScoredPredictor
from queerbench.models.generation import ResponseCache
from queerbench.run import parts as run_predict
from queerbench.run.parts import SAVE_EVERY, SAVE_SECONDS, PartPlan
from queerbench.run.pipeline import RunOptions, run_benchmark
from tests.run_parts import fix_part_size
from tests.test_instructed_method import BlankServer
from tests.tiny_models import tiny_bert, tiny_llama

FAST = ["--bootstrap", "20", "--permutations", "20", "--toxicity", "none"]
UNTHROTTLED = ["--requests-per-minute", "100000"]  # a local fake server: no need for the default 10 requests/s
N_231 = 3 * 77  # `--limit 3`: three templates of 77 sentences


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("models")
    return {"llama": str(tiny_llama(root, chat_template=False)), "bert": str(tiny_bert(root))}


class Calls:
    """Wraps a predictor class's ``predict``: records the ids of each call and raises ``KeyboardInterrupt`` at the end
    of call number ``interrupt`` (1-based; None: never), after the real work."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, cls: type, interrupt: int | None = None) -> None:
        self.ids: list[list[str]] = []
        self.interrupt = interrupt
        real = cls.predict

        def predict(predictor, ids, sentences, tick):
            result = real(predictor, ids, sentences, tick)
            self.ids.append(list(ids))
            if self.interrupt is not None and len(self.ids) == self.interrupt:
                raise KeyboardInterrupt
            return result

        monkeypatch.setattr(cls, "predict", predict)

    def sentences(self, calls: slice = slice(None)) -> list[str]:
        return [sid for ids in self.ids[calls] for sid in ids]


def _saved_rows(out: Path) -> list[str]:
    """The ids of every sentence saved in the run's parts, in file order."""
    return [sid for p in sorted((out / ".chunks").glob("chunk-*.parquet")) for sid in pd.read_parquet(p)["id"]]


def _interruption_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("queerbench: ")]
    assert len(lines) == 1, err
    return lines[0]


def test_an_interrupted_231_sentence_run_resumes_without_predicting_a_saved_sentence_again(
    models: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    out = tmp_path / "run"
    args = ["run", "--model", models["llama"], "--method", "scored", "--limit", "3", "--out", str(out), *FAST]
    calls = Calls(monkeypatch, ScoredPredictor, interrupt=4)  # Ctrl-C as the fourth part finishes: it is lost
    assert main(args) == 130
    line = _interruption_line(capsys.readouterr().err)
    saved = _saved_rows(out)
    assert saved == calls.sentences(slice(0, 3))  # every finished part is on disk, in the run's order
    assert 0 < len(saved) < N_231 and all(len(ids) <= SAVE_EVERY for ids in calls.ids)
    assert len(calls.ids[3]) <= SAVE_EVERY  # what the Ctrl-C lost: one part, at most 64 sentences
    assert line == (
        f"queerbench: interrupted: the predictions of {len(saved)} of {N_231} sentences are saved in {out / '.chunks'}; "
        f"rerun the same command to resume (it predicts the other {N_231 - len(saved)})"
    )
    assert not (out / "predictions.parquet").exists()

    resumed = Calls(monkeypatch, ScoredPredictor)
    assert main(args) == 0
    assert "resuming the run in" in capsys.readouterr().out
    again = resumed.sentences()
    assert len(again) == N_231 - len(saved) and not set(again) & set(saved)  # nothing saved is predicted again
    preds = pd.read_parquet(out / "predictions.parquet")
    assert len(preds) == N_231 and set(preds["id"]) == set(saved) | set(again)

    # the same as a run that was never interrupted
    assert main([*args[: -len(FAST) - 2], "--out", str(tmp_path / "fresh"), *FAST]) == 0
    fresh = pd.read_parquet(tmp_path / "fresh/predictions.parquet")
    assert preds["id"].tolist() == fresh["id"].tolist()
    assert preds["tokens"].map(list).tolist() == fresh["tokens"].map(list).tolist()


def test_ctrl_c_before_the_first_part_is_saved_keeps_nothing_and_says_so(
    models: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    out = tmp_path / "run"
    Calls(monkeypatch, MaskedLMPredictor, interrupt=1)
    assert main(["run", "--model", models["bert"], "--limit", "1", "--out", str(out), *FAST]) == 130
    assert _interruption_line(capsys.readouterr().err) == (
        f"queerbench: interrupted before any prediction was saved: nothing is kept in {out}; rerun the same command "
        "to start"
    )
    assert not out.exists()  # the folder this run created is gone, as the message says


def test_an_interrupted_endpoint_run_keeps_its_replies_and_the_rerun_asks_only_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    """An endpoint run streams every prompt through its slots; Ctrl-C arrives after 70 rows were handed out: every
    handed-out row is saved, every reply is in the cache, and the rerun asks only the calls without a reply."""
    from queerbench.methods.instructed import replies as replies_module

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    out = tmp_path / "run"
    handed: list[str] = []
    real = replies_module.stream_instructed

    def interrupted(*args, **kwargs):
        for row in real(*args, **kwargs):
            handed.append(row["id"])
            yield row
            if len(handed) == 70:
                raise KeyboardInterrupt

    monkeypatch.setattr(replies_module, "stream_instructed", interrupted)
    with BlankServer({"[MASK]": ["doctor"]}) as server:
        args = ["run", "--endpoint", server.url, "--model", "served", "--limit", "3", "--top-k", "1"]
        args += ["--out", str(out), *FAST, *UNTHROTTLED, "--concurrency", "4"]
        assert main(args) == 130
        line = _interruption_line(capsys.readouterr().err)
        saved = _saved_rows(out)
        asked = server.calls
        with ResponseCache(out / ".chunks/replies.sqlite") as cache:
            n_replies = cache.count()
        assert sorted(saved) == sorted(handed) and len(saved) == 70  # nothing handed out is lost
        # every reply that reached the run is kept; at most the 4 calls in flight at the Ctrl-C were asked and lost
        assert 70 <= n_replies <= asked <= n_replies + 4 < N_231
        assert line == (
            f"queerbench: interrupted: the predictions of {len(saved)} of {N_231} sentences are saved in "
            f"{out / '.chunks'}, and {n_replies} replies in {out / '.chunks/replies.sqlite'}; rerun the same command "
            f"to resume (it predicts the other {N_231 - len(saved)}, asking only the calls whose replies are not saved)"
        )
        monkeypatch.setattr(replies_module, "stream_instructed", real)
        assert main(args) == 0
        assert server.calls - asked == N_231 - n_replies  # replies that came after the last save are not asked again
    preds = pd.read_parquet(out / "predictions.parquet")
    assert preds["tokens"].map(list).tolist() == [["doctor"]] * N_231
    fresh = tmp_path / "fresh"
    with BlankServer({"[MASK]": ["doctor"]}) as server:
        fresh_args = ["run", "--endpoint", server.url, "--model", "served", "--limit", "3", "--top-k", "1"]
        assert main([*fresh_args, "--out", str(fresh), *FAST, *UNTHROTTLED]) == 0
    assert preds["id"].tolist() == pd.read_parquet(fresh / "predictions.parquet")["id"].tolist()  # the task's order


def test_a_run_saved_in_512_sentence_chunks_by_an_older_version_still_resumes(
    models: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """An older version saved ``chunk-00000.parquet`` with rows 0–511, ``chunk-00001.parquet`` with 512–1023, …"""
    options = RunOptions(model=models["bert"], limit=7, toxicity="none", n_bootstrap=20, n_permutations=20)
    whole = run_benchmark(options, tmp_path / "whole", log=lambda _: None)
    preds = pd.read_parquet(tmp_path / "whole/predictions.parquet")
    assert whole.n_predicted == len(preds) == 7 * 77 > 512
    old = tmp_path / "old"
    (old / ".chunks").mkdir(parents=True)
    shutil.copyfile(tmp_path / "whole/run.json", old / "run.json")
    shutil.copyfile(tmp_path / "whole/model.json", old / ".chunks/model.json")
    preds[["id", "tokens", "token_ids", "probs"]].iloc[:512].to_parquet(
        old / ".chunks/chunk-00000.parquet", index=False
    )

    calls = Calls(monkeypatch, MaskedLMPredictor)
    resumed = run_benchmark(options, old, log=lambda _: None)
    assert resumed.n_predicted == len(calls.sentences()) == 7 * 77 - 512
    assert calls.sentences() == preds["id"].iloc[512:].tolist()
    again = pd.read_parquet(old / "predictions.parquet")
    assert again["tokens"].map(list).tolist() == preds["tokens"].map(list).tolist()


class Clock:
    """A clock the test moves: each predicted sentence takes ``per_sentence`` seconds."""

    def __init__(self, per_sentence: float) -> None:
        self.now, self.per_sentence = 0.0, per_sentence

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("per_sentence", "largest"), [(2.0, 7), (0.01, SAVE_EVERY)])
def test_parts_hold_at_most_64_sentences_or_30_seconds(
    models: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, per_sentence: float, largest: int
):
    """2 s a sentence: after the first part (1 sentence, to measure the pace) parts of 7 (half of 30 s); 0.01 s a
    sentence: parts of 64."""
    clock = Clock(per_sentence)
    calls = Calls(monkeypatch, MaskedLMPredictor)
    real = MaskedLMPredictor.predict

    def timed(predictor, ids, sentences, tick):
        clock.now += clock.per_sentence * len(ids)
        return real(predictor, ids, sentences, tick)

    monkeypatch.setattr(MaskedLMPredictor, "predict", timed)
    options = RunOptions(model=models["bert"], limit=2, toxicity="none")
    frame = pd.DataFrame({"id": [f"s{i}" for i in range(154)], "masked_sentence": ["The person is a [MASK]."] * 154})
    out = tmp_path / "run"
    out.mkdir()
    chunks, _, predicted = run_predict.predict_chunks(
        frame, options, out, lambda d, t: None, log=lambda _: None, clock=clock
    )
    sizes = [len(ids) for ids in calls.ids]
    assert predicted == sum(sizes) == 154 and chunks["id"].tolist() == frame["id"].tolist()
    assert sizes[0] == 1 and max(sizes) == largest
    assert all(n * per_sentence <= SAVE_SECONDS for n in sizes) and all(n <= SAVE_EVERY for n in sizes)
    names = sorted(p.name for p in (out / ".chunks").glob("chunk-*.parquet"))
    assert names[:2] == ["chunk-000000-000001.parquet", f"chunk-000001-{1 + sizes[1]:06d}.parquet"]


def test_the_part_plan():
    plan = PartPlan()
    assert plan.size() == 1  # no pace yet
    plan.record(1, 0.5)  # 2 sentences a second: 15 s hold 30
    assert plan.size() == 30
    plan.record(30, 600)  # 20 s a sentence: one at a time
    assert plan.size() == 1
    plan.record(64, 0.0)
    assert plan.size() == SAVE_EVERY


def test_a_saved_part_of_other_sentences_is_refused(tmp_path: Path):
    chunk_dir = tmp_path / ".chunks"
    chunk_dir.mkdir()
    ids = [f"s{i}" for i in range(6)]
    pd.DataFrame({"id": ["s0", "s1"]}).to_parquet(chunk_dir / "chunk-000000-000002.parquet")
    pd.DataFrame({"id": ["s3", "x9"]}).to_parquet(chunk_dir / "chunk-000002-000004.parquet")  # not this run's
    with pytest.raises(ValueError, match=re.escape("do not match this run's sentences (chunk-000002-000004")):
        run_predict.saved_parts(chunk_dir, ids)
    pd.DataFrame({"id": ["s1", "s2"]}).to_parquet(chunk_dir / "chunk-000002-000004.parquet")  # overlaps the first
    with pytest.raises(ValueError, match="overlap; delete that folder and rerun"):
        run_predict.saved_parts(chunk_dir, ids)
    (chunk_dir / "chunk-000002-000004.parquet").unlink()
    # streamed rows are saved in the order they complete, each with its sentence: any order, gaps between and
    # within files, is fine
    sentences = [f"sentence {i}" for i in range(6)]
    streamed = chunk_dir / "chunk-000003-000006.parquet"
    pd.DataFrame({"id": ["s5", "s3"], "sentence": ["sentence 5", "sentence 3"]}).to_parquet(streamed)
    assert [rows for rows, _ in run_predict.saved_parts(chunk_dir, ids, sentences)] == [[0, 1], [5, 3]]
    assert run_predict._todo(run_predict.saved_parts(chunk_dir, ids, sentences), 6) == [2, 4]
    assert json.dumps(run_predict._todo([], 3)) == "[0, 1, 2]"
    # a streamed part whose id holds another sentence than this run's (the templates changed) is refused
    pd.DataFrame({"id": ["s5", "s3"], "sentence": ["sentence 5", "another"]}).to_parquet(streamed)
    with pytest.raises(ValueError, match=re.escape("do not match this run's sentences (chunk-000003-000006")):
        run_predict.saved_parts(chunk_dir, ids, sentences)
    # a part of an earlier version (no sentences) must hold a run of ids in order
    pd.DataFrame({"id": ["s5", "s3"]}).to_parquet(streamed)
    with pytest.raises(ValueError, match="do not match this run's sentences"):
        run_predict.saved_parts(chunk_dir, ids, sentences)


def test_a_saved_part_that_lost_a_column_is_named(tmp_path: Path):
    """A part without a column the others have would leave holes in predictions.parquet: one line naming it."""
    chunk_dir = tmp_path / ".chunks"
    chunk_dir.mkdir()
    pd.DataFrame({"id": ["s0"], "tokens": [["a"]], "probs": [[0.5]]}).to_parquet(
        chunk_dir / "chunk-000000-000001.parquet"
    )
    pd.DataFrame({"id": ["s1"], "tokens": [["b"]]}).to_parquet(chunk_dir / "chunk-000001-000002.parquet")
    parts = run_predict.saved_parts(chunk_dir, ["s0", "s1", "s2"])
    with pytest.raises(ValueError) as info:
        run_predict._check_columns(parts, chunk_dir)
    assert str(info.value).startswith(f"{chunk_dir / 'chunk-000001-000002.parquet'} lacks the column(s) probs that")
    pd.DataFrame({"id": ["s1"], "probs": [[0.4]]}).to_parquet(chunk_dir / "chunk-000001-000002.parquet")
    with pytest.raises(ValueError, match=re.escape("lacks the column(s) tokens")):
        run_predict._check_columns(run_predict.saved_parts(chunk_dir, ["s0", "s1", "s2"]), chunk_dir)


def test_an_endpoint_run_counts_each_sentence_as_its_replies_arrive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """One part of 77 sentences, 2 replies each: the run's progress moves by one sentence at a time within the part
    (as soon as its replies are in), not once per part."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    fix_part_size(monkeypatch, 77)
    seen: list[tuple[int, int, int]] = []  # (done, total, calls the server had answered by then)
    with BlankServer({"[MASK]": ["doctor"]}) as server:
        options = RunOptions(
            model="served",
            endpoint=server.url,
            limit=1,
            top_k=2,
            toxicity="none",
            n_bootstrap=20,
            n_permutations=20,
            requests_per_minute=100_000,  # a local fake server: no need for the default 10 requests/s
        )
        progress = lambda d, t: seen.append((d, t, server.calls))  # noqa: E731
        run_benchmark(options, tmp_path / "run", log=lambda _: None, progress=progress)
    assert len(list((tmp_path / "run/.chunks").glob("*.parquet"))) == 0  # finished: the one part was assembled
    assert seen[-1][:2] == (77, 77) and all(b[0] > a[0] for a, b in itertools.pairwise(seen))
    halfway = next(calls for done, _, calls in seen if done >= 38)
    assert halfway < 2 * 77  # half the sentences were counted while the other replies were still being asked
    assert len(seen) >= 50  # about one step per sentence, not one per part
