"""A probes run writes the shared, typed result record (``scores.json``, kind ``probes``) beside its task's own
record: the same numbers as the task's analysis (the SCM ratings' means, Student-t intervals and counts), read back
by the record's reader, compared by ``queerbench compare`` through the declared metrics, and rewritten by a
re-analysis. The folder stays the task's run for every reader (its rows, its replies)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from queerbench.cli import main
from queerbench.reporting.record import RECORD_KINDS, is_probes_record, is_record, read_record
from queerbench.results.folders import folder_kind, folder_rows
from queerbench.scoring.metric_results import GroupStat
from queerbench.tasks import get_task
from queerbench.tasks.base import MetricSpec, load_specs
from queerbench.tasks.scm.pipeline import resolve_settings
from queerbench.tasks.scm.plan import scm_plan
from tests.openai_server import FakeOpenAI
from tests.scm_runs import endpoint_scm, reanalyze, run_scm
from tests.tiny_models import tiny_llama


class _FakeMapper:
    def map_words(self, words):
        from queerbench.tasks.scm.axes import AxisLabel

        return {w: AxisLabel(w.startswith("k"), w.startswith("s"), "test", 1, -1) for w in words}


def _tiny_settings() -> dict:
    survey, story, prov = resolve_settings(
        "embedded", survey_samples=1, story_samples=1, max_new_tokens=3, story_max_new_tokens=2, batch_size=8
    )
    return {"settings": survey, "story_settings": story, "provenance": prov}


def _endpoint_run(server: FakeOpenAI, out: Path, model: str) -> dict:
    return endpoint_scm(server.url, out, model, _FakeMapper, survey_samples=2, limit=14)


def _assert_same_numbers(out: Path) -> None:
    """The record's metrics are the task's own rating blocks, number for number, in its group order."""
    scm = json.loads((out / "scm.json").read_text(encoding="utf-8"))
    record = read_record(out / "scores.json")
    task = get_task("scm")
    assert record.kind == RECORD_KINDS[2] and record.task == "scm" and record.benchmark == task.benchmark
    assert record.signature == scm["signature"] and record.model == scm["run"]["model"]
    assert record.model_fingerprint == scm["run"]["fingerprint"] and record.settings == scm["run"]["settings"]
    assert record.parse_rate == scm["parse_rate"]["rating"]
    assert record.n_items == len(pd.read_parquet(out / "responses.parquet"))
    assert record.groups.order == list(scm["rating_free"])
    assert {record.results[m].read_from for m in ("warmth_free", "warmth_constrained")} == {
        "the replies (the rating each states)",
        "the option log-probabilities of a local model (the expected rating)",
    }
    assert [record.results[m].request_type for m in ("warmth_free", "warmth_constrained")] == [
        "generate",
        "loglikelihood",
    ]
    assert record.declared_metrics == list(task.spec.metrics)
    for metric in task.spec.metrics:
        block, axis = metric.column.split(".")
        for group, stat in record.results[metric.name].groups.items():
            if block not in scm:  # an endpoint's run: no option scores, so no constrained rating
                assert stat == GroupStat(value=None, ci=None, n=0, n_clusters=0)
                continue
            theirs = scm[block][group][axis]
            assert stat.value == theirs["mean"] and stat.n == theirs["n"]
            assert stat.ci == ([theirs["lo"], theirs["hi"]] if theirs["lo"] is not None else None)
        overall = record.results[metric.name].overall
        assert overall is not None
        assert overall.n == sum(s.n for s in record.results[metric.name].groups.values())


def test_a_local_scm_run_writes_the_result_record_with_its_own_numbers(tmp_path: Path) -> None:
    model = str(tiny_llama(tmp_path / "chat"))
    out = tmp_path / "scm"
    run_scm(out, model=model, limit=14, mapper_factory=_FakeMapper, log=lambda m: None, **_tiny_settings())
    _assert_same_numbers(out)
    record = read_record(out / "scores.json")
    constrained = record.results["warmth_constrained"].groups
    assert sum(s.n for s in constrained.values()) > 0  # a local model's option scores are in the record
    # the replies are generated, the options scored: the record names both, the items' type first
    assert record.request_type == "generate" and record.request_types == ["generate", "loglikelihood"]
    assert not record.reused_predictions and set(record.timings_s) == {"generate_s", "analyze_s"}
    # the folder is still the SCM run's for every reader: its rows are the task's
    assert folder_kind(out) == "scm" and folder_rows(out) == get_task("scm").folder_rows(out)
    before = json.loads((out / "scores.json").read_text(encoding="utf-8"))
    run_scm(out, model=model, limit=14, mapper_factory=_FakeMapper, log=lambda m: None, **_tiny_settings())
    again = read_record(out / "scores.json")
    assert again.reused_predictions and again.to_json()["results"] == before["results"]  # a rerun: every reply cached


def test_an_endpoint_run_records_no_constrained_rating_and_compare_reads_the_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with FakeOpenAI() as server:
        _endpoint_run(server, tmp_path / "a", "served-a")
        _endpoint_run(server, tmp_path / "b", "served-b")
    for out in (tmp_path / "a", tmp_path / "b"):
        _assert_same_numbers(out)
    document = json.loads((tmp_path / "a" / "scores.json").read_text(encoding="utf-8"))
    assert is_probes_record(document) and is_record(document)
    assert document["request_types"] == ["generate"]  # an endpoint scores no options: no loglikelihood asked
    warmth = read_record(tmp_path / "a" / "scores.json").results["warmth_free"].groups
    assert {s.value for s in warmth.values() if s.n} == {4.0}  # the fake server rates everything 4
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "cmp")]) == 0
    md = (tmp_path / "cmp" / "compare.md").read_text(encoding="utf-8")
    assert "# SCM comparison" in md and "## Warmth, free rating (1-5) (neither direction is better)" in md
    assert "95% Student-t CI over ratings and n (ratings)" in md and "4.00" in md
    table = pd.read_csv(tmp_path / "cmp" / "compare.csv", header=[0, 1], index_col=0)
    values = table["warmth_free"].to_numpy().ravel()
    assert len(table) == 2 and set(values[~pd.isna(values)]) == {4.0}


def test_a_reanalysis_rewrites_the_record_from_the_new_reading(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with FakeOpenAI() as server:
        _endpoint_run(server, tmp_path / "a", "served-a")
    out = tmp_path / "a"
    frame = pd.read_parquet(out / "responses.parquet")
    i = frame.index[(frame["task"] == "rating") & (frame["axis"] == "Warmth")][0]
    frame.loc[i, "response"] = "Rating: 2."  # one rating read again differently
    frame.to_parquet(out / "responses.parquet", index=False)
    first = read_record(out / "scores.json").results["warmth_free"].overall
    reanalyze(out, mapper_factory=_FakeMapper)
    _assert_same_numbers(out)
    again = read_record(out / "scores.json")
    now = again.results["warmth_free"].overall
    assert first is not None and now is not None and first.value is not None and now.value is not None
    assert now.value < first.value
    assert set(again.timings_s) == {"analyze_s"} and again.reused_predictions  # no model was asked


def test_compare_names_what_differs_refuses_a_repeat_and_a_task_without_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    import shutil

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with FakeOpenAI() as server:
        _endpoint_run(server, tmp_path / "a", "served")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    reanalyze(tmp_path / "b", refusal_rule="patterns", mapper_factory=_FakeMapper)  # one model, another reading
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "cmp")]) == 0
    md = (tmp_path / "cmp" / "compare.md").read_text(encoding="utf-8")
    assert "refusal:appendix_b" in md and "refusal:patterns" in md  # two rows, told apart by what differs
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "a"), "--out", str(tmp_path / "cmp2")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'a'} is given twice" in err and err.count("\n") == 1
    document = json.loads((tmp_path / "b" / "scores.json").read_text(encoding="utf-8"))
    for folder in ("a", "b"):  # as a probes task that declares no metrics writes it
        (tmp_path / folder / "scores.json").write_text(
            json.dumps({**document, "declared_metrics": [], "results": {}, "signature": folder}), encoding="utf-8"
        )
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "cmp3")]) == 2
    assert capsys.readouterr().err == (
        "queerbench: error: task scm declares no metrics, so its runs have nothing to compare\n"
    )


def test_a_record_written_before_request_types_lists_its_request_type(tmp_path: Path) -> None:
    model = str(tiny_llama(tmp_path / "chat"))
    out = tmp_path / "scm"
    run_scm(out, model=model, limit=14, mapper_factory=_FakeMapper, log=lambda m: None, **_tiny_settings())
    document = json.loads((out / "scores.json").read_text(encoding="utf-8"))
    del document["request_types"]
    (out / "scores.json").write_text(json.dumps(document), encoding="utf-8")
    assert read_record(out / "scores.json").request_types == ["generate"]
    document["request_types"] = None
    (out / "scores.json").write_text(json.dumps(document), encoding="utf-8")
    assert read_record(out / "scores.json").request_types == ["generate"]
    document["request_types"] = ["loglikelihood", "generate", "loglikelihood"]  # each once, the items' type first
    (out / "scores.json").write_text(json.dumps(document), encoding="utf-8")
    assert read_record(out / "scores.json").request_types == ["generate", "loglikelihood"]


def test_a_record_whose_task_reads_no_folder_is_one_line_naming_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with FakeOpenAI() as server:
        _endpoint_run(server, tmp_path / "a", "served")
    (tmp_path / "a" / "scm.json").unlink()  # the task's own results are gone; its record is not
    with pytest.raises(ValueError) as info:
        folder_kind(tmp_path / "a")
    assert str(info.value).startswith(f"{tmp_path / 'a'} holds the result record of a scm run, but no installed task")
    assert "rerun `queerbench scm run` with the same --out" in str(info.value)


def test_a_folder_written_before_the_record_still_reads_and_gets_one_on_a_rerun(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with FakeOpenAI() as server:
        _endpoint_run(server, tmp_path / "a", "served-a")
        (tmp_path / "a" / "scores.json").unlink()  # as an earlier version left it: scm.json only
        assert folder_kind(tmp_path / "a") == "scm" and len(folder_rows(tmp_path / "a")) == 1
        calls = server.calls
        _endpoint_run(server, tmp_path / "a", "served-a")
        assert server.calls == calls  # resumed from the cache
    _assert_same_numbers(tmp_path / "a")


def test_a_probes_task_declares_metrics_but_not_groups_and_an_unknown_column_is_one_line(tmp_path: Path) -> None:
    entry = {
        "name": "p",
        "benchmark": "P",
        "title": "P",
        "kind": "probes",
        "methods": ["instructed"],
        "dataset": {"config": "p", "description": "p"},
        "outputs": {"record": "p.json", "replies": "p.parquet", "cache": "p.sqlite"},
        "metrics": [{"name": "m", "column": "rating_free.Warmth", "title": "M"}],
    }
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps({"schema_version": 1, "tasks": [entry]}), encoding="utf-8")
    assert load_specs(path)["p"].metrics == (MetricSpec("m", "rating_free.Warmth", "M"),)
    measurement = {
        **entry,
        "metrics": [{"name": "m", "column": "rating_free.Warmth", "title": "M", "higher_is_better": None}],
    }
    path.write_text(json.dumps({"schema_version": 1, "tasks": [measurement]}), encoding="utf-8")
    assert load_specs(path)["p"].metrics[0].higher_is_better is None  # a measurement: no better direction
    from queerbench.tasks.misgendered import task as misgendered_task

    misgendered = json.loads(Path(misgendered_task.__file__).with_name("tasks.json").read_text(encoding="utf-8"))
    misgendered["tasks"][0]["metrics"][0]["higher_is_better"] = None
    path.write_text(json.dumps(misgendered), encoding="utf-8")
    with pytest.raises(ValueError, match=r"metrics\[0\]: 'higher_is_better' is true or false, got None$"):
        load_specs(path)  # a task whose metric ranks models must say which way is better
    path.write_text(json.dumps({"schema_version": 1, "tasks": [{**entry, "groups": {}}]}), encoding="utf-8")
    with pytest.raises(ValueError, match=r"\['groups'\] belong to a 'requests' or 'blanks' task only"):
        load_specs(path)
    with pytest.raises(ValueError) as info:
        scm_plan("embedded", metrics=(MetricSpec("charm", "rating_free.Charm", "Charm"),))
    assert str(info.value).startswith(
        "the task's metric 'charm' reads 'rating_free.Charm', which an SCM run does not compute; give one of "
        "rating_free.Warmth, rating_free.Competence"
    )
