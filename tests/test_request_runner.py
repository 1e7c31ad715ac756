"""The request runner (queerbench.run.requests) on a toy task and a fake backend: what it writes, its record, its
statistics, resume after an interruption, reuse, and the refusals made before any work."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from queerbench.models.registry import ModelRef
from queerbench.models.requests import (
    FillMaskResult,
    GenerateResult,
    LoglikelihoodResult,
    UnsupportedRequestError,
)
from queerbench.reporting.record import RECORD_VERSION, read_record

TOY = Path(__file__).parent / "data" / "request_task"


def _prefers_yes(text: str) -> bool:
    """The fake model: right for group a (it reads the template and item number), always 'no' for group b."""
    t, group, i = re.search(r"Template (\d) of ([ab])(\d)", text).groups()  # type: ignore[union-attr]
    return group == "a" and (t == "1" or (t == "2" and i == "0"))


class FakeBackend:
    name = "fake"

    def __init__(self, types: frozenset[str], fail_after: int | None = None) -> None:
        self.request_types = types
        self.calls: list[int] = []
        self.fail_after = fail_after

    def _called(self, n: int) -> None:
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise KeyboardInterrupt
        self.calls.append(n)

    def fingerprint(self) -> dict[str, Any]:
        return {"kind": "fake"}

    def metadata(self) -> dict[str, Any]:
        return {"backend": "fake"}

    def fill_mask(self, requests, tick=None):
        self._called(len(requests))
        return [FillMaskResult((0.0, 1.0) if _prefers_yes(r.text) else (1.0, 0.0)) for r in requests]

    def loglikelihood(self, requests, tick=None):
        self._called(len(requests))
        out = []
        for r in requests:
            yes = r.continuation.endswith("says yes.")
            good = yes == _prefers_yes(r.continuation)
            out.append(LoglikelihoodResult(logprob=-1.0 if good else -5.0, n_tokens=2))
        return out

    def generate(self, requests, tick=None):
        self._called(len(requests))
        return [GenerateResult("yes, idiot" if _prefers_yes(r.prompt) else "no") for r in requests]

    def close(self) -> None:
        pass


@pytest.fixture
def toy(fresh_registry: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The toy task registered, a fake backend in place of the real ones, every model a causal LM."""
    import queerbench.run.requests as runner

    fresh_registry.setenv("QUEERBENCH_TASK_PATH", str(TOY))
    state: dict[str, Any] = {"backends": [], "fail_after": None}

    def open_backend(ref: ModelRef, request_type: str, spec: Any = None, **_: Any) -> FakeBackend:
        backend = FakeBackend(frozenset({request_type}), state["fail_after"])
        state["backends"].append(backend)
        return backend

    fresh_registry.setattr(runner, "open_backend", open_backend)
    fresh_registry.setattr(runner, "check_request_type", lambda ref, t: None)
    fresh_registry.setattr(runner, "resolve_method", lambda m, *a, **k: "scored" if m == "auto" else m)
    fresh_registry.setattr(ModelRef, "fingerprint", lambda self, **_: {"kind": "fake", "model": self.name})
    yield state


def _run(out: Path, method: str = "scored", **kwargs: Any):
    from queerbench.run.requests import resolve_request_run, run_requests

    run = resolve_request_run("toy-requests", model="embedded:smollm2-135m-instruct", method=method, **kwargs)
    return run_requests(run, out, log=lambda _: None)


@pytest.mark.parametrize("method", ["mlm", "scored", "instructed"])
def test_a_run_writes_items_with_their_scores_and_the_declared_metric_per_group(toy, tmp_path, method):
    result = _run(tmp_path / "run", method, n_resamples=200)
    predictions = pd.read_parquet(tmp_path / "run" / "predictions.parquet")
    assert len(predictions) == 16 and set(predictions["method"]) == {method}
    assert {"masked_sentence", "label", "choice", "correct", "scores"} <= set(predictions.columns)
    by_group = predictions.groupby("group")["correct"].mean()
    assert by_group["a"] == 1.0 and by_group["b"] == 0.625
    record = read_record(tmp_path / "run" / "scores.json")
    assert record == result.record and record.record_version == RECORD_VERSION
    accuracy = record.results["accuracy"]
    assert accuracy.groups["a"].value == 1.0 and accuracy.groups["b"].value == 0.625
    assert accuracy.groups["b"].n == 8 and accuracy.groups["b"].n_clusters == 4
    assert accuracy.groups["b"].ci is not None
    lo, hi = accuracy.groups["b"].ci
    assert lo < 0.625 < hi
    head = accuracy.headline
    assert head is not None and head.gap == 0.375 and head.groups == ["a", "b"]
    # per template a − b is 0, 1/4, 1/8, 0 (of 0.375): half of the 16 sign patterns are as far from 0; 4 templates,
    # fewer than 6: no interval
    assert head.p_value == 0.5 and head.ci is None
    assert set(accuracy.by["label"]) == {"yes", "no"}
    assert record.method == method and record.task == "toy-requests"
    assert record.parse_rate == (1.0 if method == "instructed" else None)  # generated replies only
    assert f"method:{method}" in record.signature and "task:toy-requests" in record.signature
    report = (tmp_path / "run" / "report.md").read_text()
    assert (
        "## Accuracy (higher is better)" in report
        and "a − b: **0.375** — (paired by template), p = 0.500 (sign-flip test over templates)." in report
    )
    assert (tmp_path / "run" / "metrics.png").stat().st_size > 0
    assert not (tmp_path / "run" / ".chunks").exists()


def test_an_interrupted_run_resumes_with_only_the_items_not_saved_and_ends_as_an_uninterrupted_one(toy, tmp_path):
    import queerbench.run.requests as runner

    toy["fail_after"] = 0
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "cut")
    assert not (tmp_path / "cut").exists()  # nothing saved: no folder left behind
    runner_part = runner.PART_ITEMS
    try:
        runner.PART_ITEMS = 5
        toy["fail_after"] = 2
        with pytest.raises(KeyboardInterrupt):
            _run(tmp_path / "cut")
        saved = list((tmp_path / "cut" / ".chunks").glob("chunk-*.parquet"))
        assert len(saved) == 2
        toy["fail_after"] = None
        _run(tmp_path / "cut")
        assert toy["backends"][-1].calls == [2 * 5, 2 * 1]  # 6 items left: parts of 5 and 1, two requests each
    finally:
        runner.PART_ITEMS = runner_part
    _run(tmp_path / "whole")
    cut = pd.read_parquet(tmp_path / "cut" / "predictions.parquet")
    whole = pd.read_parquet(tmp_path / "whole" / "predictions.parquet")
    pd.testing.assert_frame_equal(cut, whole)
    assert (
        read_record(tmp_path / "cut" / "scores.json").results == read_record(tmp_path / "whole" / "scores.json").results
    )


def _cut_run(toy: dict[str, Any], out: Path) -> list[Path]:
    """A run stopped after two parts of 5 items: its saved part files."""
    import queerbench.run.requests as runner

    runner_part = runner.PART_ITEMS
    try:
        runner.PART_ITEMS, toy["fail_after"] = 5, 2
        with pytest.raises(KeyboardInterrupt):
            _run(out)
    finally:
        runner.PART_ITEMS, toy["fail_after"] = runner_part, None
    return sorted((out / ".chunks").glob("chunk-*.parquet"))


def test_saved_parts_are_checked_as_a_fill_in_the_blank_runs_are(toy, tmp_path):
    """The request runner reads its parts with the fill-in-the-blank runner's checks: a row in two files, a row of
    other items and a part that lost a column are each one line naming the fix, never mixed into the results."""
    from queerbench.run.requests import _saved

    damages = {
        "overlap": lambda first, second: pd.concat([pd.read_parquet(second), pd.read_parquet(first).head(1)]),
        "other items": lambda first, second: pd.read_parquet(second).assign(id=lambda f: "other-" + f["id"]),
        "lost column": lambda first, second: pd.read_parquet(second).drop(columns=["choice"]),
    }
    messages = {"overlap": "overlap; delete that folder and rerun", "other items": "do not match this run's items",
                "lost column": "lacks the column(s) choice that the run's other saved parts have"}  # fmt: skip
    for name, damage in damages.items():
        out = tmp_path / name.replace(" ", "-")
        first, second = _cut_run(toy, out)
        damage(first, second).to_parquet(second, index=False)
        calls = len(toy["backends"])
        with pytest.raises(ValueError, match=re.escape(messages[name])) as caught:
            _run(out)
        assert "\n" not in str(caught.value) and len(toy["backends"]) == calls  # before the model opens
    # the parts of an earlier version (7-digit names, items in any order, no row kept to check) still resume
    out = tmp_path / "earlier"
    first, second = _cut_run(toy, out)
    _ids = pd.read_parquet(first)["id"].tolist() + pd.read_parquet(second)["id"].tolist()
    both = pd.concat([pd.read_parquet(first), pd.read_parquet(second)], ignore_index=True).iloc[::-1]
    first.unlink()
    second.unlink()
    both.to_parquet(out / ".chunks" / "chunk-0000000-0000010.parquet", index=False)
    assert sorted(_saved(out / ".chunks", sorted(_ids))["id"]) == sorted(_ids)
    _run(out)
    assert toy["backends"][-1].calls == [2 * 6]  # only the 6 items not saved
    _run(tmp_path / "whole")
    pd.testing.assert_frame_equal(
        pd.read_parquet(out / "predictions.parquet"), pd.read_parquet(tmp_path / "whole" / "predictions.parquet")
    )


def test_a_part_asked_at_once_is_saved_as_one_file_however_long_it_took(toy, tmp_path, monkeypatch):
    """A local model answers a part at a time: its items are saved together when the part ends, in one file, even
    when the part took longer than the streamed save interval."""
    import queerbench.run.requests as runner

    class SlowClock(runner.PartSaver):
        def __init__(self, *args, **kwargs):
            ticks = iter(range(0, 10**6, 20))  # 20 s pass between any two readings
            super().__init__(*args, clock=lambda: float(next(ticks)), **kwargs)

    monkeypatch.setattr(runner, "PartSaver", SlowClock)
    monkeypatch.setattr(runner, "PART_ITEMS", 5)
    toy["fail_after"] = 3
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "cut")
    names = sorted(p.name for p in (tmp_path / "cut" / ".chunks").glob("chunk-*.parquet"))
    assert names == ["chunk-000000-000005.parquet", "chunk-000005-000010.parquet", "chunk-000010-000015.parquet"]


def test_ctrl_c_says_truthfully_what_the_run_kept(toy, tmp_path):
    import queerbench.run.requests as runner

    toy["fail_after"] = 0
    with pytest.raises(KeyboardInterrupt, match=r"^interrupted before any item was saved: nothing is kept in "):
        _run(tmp_path / "cut")
    runner_part = runner.PART_ITEMS
    try:
        runner.PART_ITEMS = 5
        toy["fail_after"] = 2
        with pytest.raises(KeyboardInterrupt) as caught:
            _run(tmp_path / "cut")
    finally:
        runner.PART_ITEMS = runner_part
    message = str(caught.value)
    assert message.startswith("interrupted: the results of 10 of 16 items are saved in ")
    assert message.endswith("rerun the same command to resume (it asks the other 6)")


def test_a_full_disk_mid_run_names_the_file_and_what_was_kept_and_the_rerun_resumes(toy, tmp_path, monkeypatch):
    """A write that fails while items are asked (a full disk) is one line, as in a fill-in-the-blank run: the file,
    how many items are kept and what to do; the parts saved before it are kept and a rerun asks only the rest."""
    import queerbench.run.requests as runner

    monkeypatch.setattr(runner, "PART_ITEMS", 5)
    real, writes = pd.DataFrame.to_parquet, []

    def fills_up(frame, path, *args, **kwargs):  # the third part finds the disk full
        writes.append(path)
        if len(writes) == 3:
            raise OSError(28, "No space left on device")
        return real(frame, path, *args, **kwargs)

    out = tmp_path / "run"
    monkeypatch.setattr(pd.DataFrame, "to_parquet", fills_up)
    with pytest.raises(ValueError) as caught:
        _run(out)
    message = str(caught.value)
    assert message.startswith(f"No space left on device: {out / '.chunks'}/chunk-000010-000015.parquet")
    assert message.endswith(
        f"; the results of 10 of 16 items are saved in {out / '.chunks'}; rerun the same command to resume (it asks "
        "the other 6); free some space or fix the folder first"
    )
    monkeypatch.setattr(pd.DataFrame, "to_parquet", real)
    _run(out)
    assert toy["backends"][-1].calls == [2 * 5, 2 * 1]  # only the 6 items not saved, in parts of 5
    _run(tmp_path / "whole")
    pd.testing.assert_frame_equal(
        pd.read_parquet(out / "predictions.parquet"), pd.read_parquet(tmp_path / "whole" / "predictions.parquet")
    )


def test_saved_parts_that_cannot_be_read_are_said_kept_not_counted_as_none(toy, tmp_path, monkeypatch):
    """A resume whose saved parts cannot be read (a folder turned unreadable) is one line that says the parts are
    kept, without a count it could not make, and leaves them in place."""
    import queerbench.run.requests as runner

    monkeypatch.setattr(runner, "PART_ITEMS", 5)
    toy["fail_after"] = 2
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        _run(out)
    parts = sorted((out / ".chunks").glob("chunk-*.parquet"))
    assert len(parts) == 2

    def unreadable(chunks, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(parts[0]))

    monkeypatch.setattr(runner, "read_parts", unreadable)
    with pytest.raises(ValueError) as caught:
        _run(out)
    assert str(caught.value) == (
        f"Permission denied: {parts[0]}; the results saved in {out / '.chunks'} are kept (they could not be "
        "counted); rerun the same command to resume (it asks the rest); free some space or fix the folder first"
    )
    assert sorted((out / ".chunks").glob("chunk-*.parquet")) == parts


def test_a_finished_run_is_reused_without_asking_the_model(toy, tmp_path):
    _run(tmp_path / "run")
    n = len(toy["backends"])
    again = _run(tmp_path / "run")
    assert again.reused_predictions and len(toy["backends"]) == n


def test_a_folder_of_another_run_or_of_other_files_is_refused_before_any_request(toy, tmp_path):
    _run(tmp_path / "run", limit=2)
    with pytest.raises(FileExistsError, match=r"holds another run .*limit: 2 there, None now"):
        _run(tmp_path / "run")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    n = len(toy["backends"])
    with pytest.raises(FileExistsError, match="not empty and holds no queerbench run"):
        _run(tmp_path / "other")
    assert len(toy["backends"]) == n and (tmp_path / "other" / "notes.txt").read_text() == "mine"
    # the folder is read by the same rules as a fill-in-the-blank run's (queerbench.run.folder.inspect_out_dir)
    (tmp_path / "run" / "run.json").write_text("{cut", encoding="utf-8")
    with pytest.raises(
        ValueError, match=r"run\.json is unreadable \(.*\); delete the folder .* or choose another --out"
    ):
        _run(tmp_path / "run", limit=2)
    assert len(toy["backends"]) == n


def test_limit_keeps_the_first_templates_and_a_limit_over_all_is_none(toy, tmp_path):
    result = _run(tmp_path / "two", limit=2)
    assert result.record.n_items == 8 and result.record.settings["limit"] == 2
    from queerbench.run.requests import resolve_request_run

    assert resolve_request_run("toy-requests", model="embedded:smollm2-135m-instruct", limit=9).limit is None


def test_a_request_type_the_model_cannot_answer_is_one_line_before_any_folder(toy, tmp_path, monkeypatch):
    import queerbench.run.requests as runner

    def refuse(ref: ModelRef, request_type: str) -> None:
        raise UnsupportedRequestError(f"{ref.name} cannot answer {request_type} requests")

    monkeypatch.setattr(runner, "check_request_type", refuse)
    with pytest.raises(UnsupportedRequestError, match="cannot answer fill_mask"):
        _run(tmp_path / "run", "mlm")
    assert not (tmp_path / "run").exists() and toy["backends"] == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"limit": 0}, "--limit must be at least 1"),
        ({"batch_size": 0}, "--batch-size must be at least 1"),
        ({"concurrency": 0}, r"--concurrency must be at least 1 \(requests in flight\), got 0"),
        ({"n_resamples": -1}, "--bootstrap must be a non-negative integer"),
        ({"seed": -1}, "--seed must be a non-negative integer"),
        ({"dtype": "int3"}, "--dtype must be one of"),
    ],
)
def test_bad_settings_are_one_line_before_anything(toy, tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        _run(tmp_path / "run", **kwargs)
    assert not (tmp_path / "run").exists()


def test_a_record_of_another_version_is_refused_in_one_line(toy, tmp_path):
    import json

    _run(tmp_path / "run")
    path = tmp_path / "run" / "scores.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "record_version": 99}))
    with pytest.raises(ValueError, match="version 99, this queerbench reads version 1"):
        read_record(path)


def test_eval_runs_a_request_task_per_method_and_lists_its_rows_in_results_and_the_card(toy, tmp_path):
    from queerbench.results.eval import EvalSettings, run_eval
    from queerbench.results.folders import folder_rows

    document = run_eval(
        EvalSettings(model="embedded:smollm2-135m-instruct", tasks=("toy-requests",), n_bootstrap=100),
        tmp_path / "eval",
        log=lambda _: None,
    )
    done = {p["folder"]: p["status"] for p in document["parts"]}
    assert done == {"toy-requests-scored": "done", "toy-requests-instructed": "done"}
    rows = document["rows"]
    assert [(r["task"], r["method"], r["metric"]) for r in rows] == [
        ("toy-requests", "scored", "Accuracy"),
        ("toy-requests", "instructed", "Accuracy"),
    ]
    assert rows[0]["scores"] == {"a": 1.0, "b": 0.625} and rows[0]["gap"]["diff"] == 0.375
    part = folder_rows(tmp_path / "eval" / "toy-requests-scored")
    assert part[0].scores == rows[0]["scores"] and part[0].ci["b"] is not None
    card = (tmp_path / "eval" / "card.md").read_text()
    assert "toy-requests" in card and "Accuracy" in card


def _cli(*argv: str) -> int:
    from queerbench.cli import main

    return main(list(argv))


def test_compare_of_request_runs_tables_each_declared_metric_and_refuses_a_mix_or_a_repeat(toy, tmp_path, capsys):
    _run(tmp_path / "scored", "scored", n_resamples=100)
    _run(tmp_path / "mlm", "mlm", limit=2, n_resamples=100)
    assert _cli("compare", str(tmp_path / "scored"), str(tmp_path / "mlm"), "--out", str(tmp_path / "cmp")) == 0
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "## Accuracy (higher is better)" in md and "| run | a | b |" in md
    assert "1.000 [1.000, 1.000] (n=8)" in md and "· limit2 |" in md
    assert "differ in templates covered (--limit) (2, all)" in md
    table = pd.read_csv(tmp_path / "cmp" / "compare.csv", header=[0, 1], index_col=0)
    assert table[("accuracy", "b")].tolist() == [0.625, 0.5]
    assert (tmp_path / "cmp" / "compare_heatmap.png").stat().st_size > 0
    assert _cli("compare", str(tmp_path / "scored"), str(tmp_path / "scored"), "--out", str(tmp_path / "c2")) == 2
    assert "twice" in capsys.readouterr().err


def test_leaderboard_show_ranks_request_rows_by_their_declared_direction(toy, tmp_path):
    from queerbench.reporting.record import read_record, record_rows
    from queerbench.results.leaderboard import leaderboard_markdown

    _run(tmp_path / "scored", "scored", n_resamples=100)
    good = record_rows(read_record(tmp_path / "scored" / "scores.json"), "good")[0]
    worse = record_rows(read_record(tmp_path / "scored" / "scores.json"), "worse")[0]
    worse.model, worse.scores = "other", {"a": 0.25, "b": 0.625}
    md = leaderboard_markdown([worse, good])
    assert "Ranked by the a score (Accuracy, higher is better)." in md
    assert md.index("| 1 | **embedded:smollm2-135m-instruct**") < md.index("| 2 | **other**")
    assert "## TOY `toy-requests`, all templates, Accuracy" in md and "k=None" not in md


def test_view_of_a_request_run_shows_its_items_and_hides_harmful_words_of_replies(toy, tmp_path):
    from queerbench.hub.space.viewer import filter_table, load_parts

    _run(tmp_path / "run", "instructed", n_resamples=100)
    part = load_parts(tmp_path / "run")[0]
    assert {"group", "masked_sentence", "label", "choice", "correct", "reply", "harmful"} <= set(part.table.columns)
    assert "candidates" not in part.table.columns and "scores" not in part.table.columns
    assert "## Accuracy" in part.report and "metrics.png" in part.images
    assert "idiot" in part.hidden_words
    shown = filter_table(part, {}, show_harmful=False)
    assert not shown["reply"].str.contains("idiot").any() and shown["reply"].str.contains("yes").any()
