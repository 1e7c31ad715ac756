"""The result record's metrics are typed (queerbench.reporting.record, queerbench.scoring.metric_results): a record
read back holds each declared metric as a ``MetricSpec`` and its results as a ``MetricResult`` of ``GroupStat`` and
``Headline`` objects, writes back the very document it was read from, and refuses a block of another shape in one
line that names the file, before any reader trips over it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from queerbench.cli import main
from queerbench.reporting.record import RunRecord, read_record, record_rows, write_record
from queerbench.scoring.metric_results import (
    NO_GROUPS,
    GroupStat,
    Headline,
    MetricResult,
    MetricSpec,
    ResultGroups,
)
from queerbench.scoring.metrics import group_metrics


def _record(task: str = "toy", model: str = "m", **changes: object) -> RunRecord:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {
            "template_id": np.repeat(np.arange(8), 4),
            "group": np.tile(["a", "a", "b", "b"], 8),
            "label": np.tile(["x", "y"], 16),
            "correct": (rng.random(32) < 0.6).astype(int),
        }
    )
    results = group_metrics(
        frame,
        metrics=[("accuracy", "correct")],
        group_column="group",
        order=["a", "b", "c"],  # c: a declared group without items
        cluster_column="template_id",
        breakdowns=["label"],
        headline=("a", "b"),
        n_resamples=100,
    )
    values: dict[str, object] = {
        "task": task,
        "benchmark": "Toy",
        "method": "scored",
        "request_type": "loglikelihood",
        "model": model,
        "model_fingerprint": {"sha256": "0" * 64},
        "signature": f"task:{task}|model:{model}",
        "settings": {"limit": None, "n_resamples": 100, "seed": 0},
        "declared_metrics": [MetricSpec(name="accuracy", column="correct", title="Accuracy", decimals=2)],
        "groups": ResultGroups(column="group", order=["a", "b", "c"], breakdowns=["label"], headline=["a", "b"]),
        "results": results,
        "n_items": len(frame),
        **changes,
    }
    return RunRecord(**values)  # type: ignore[arg-type]


def test_a_record_reads_back_typed_and_writes_back_the_document_it_was_read_from(tmp_path: Path) -> None:
    record = _record()
    write_record(tmp_path, record)
    document = json.loads((tmp_path / "scores.json").read_text(encoding="utf-8"))
    again = read_record(tmp_path / "scores.json")
    assert again == record and again.to_json() == document
    block = again.results["accuracy"]
    assert isinstance(block, MetricResult) and isinstance(block.overall, GroupStat)
    assert isinstance(block.headline, Headline) and block.headline.groups == ["a", "b"]
    assert block.group("c") == GroupStat(value=None, ci=None, n=0, n_clusters=0)  # declared, no items
    assert block.group("not declared").n == 0
    assert set(block.by["label"]) == {"x", "y"} and all(isinstance(s, GroupStat) for s in block.by["label"].values())
    assert again.declared_metrics == [MetricSpec(name="accuracy", column="correct", title="Accuracy", decimals=2)]
    # the stored block is the shape it has always been: no key for what a metric does not say
    assert list(document["results"]["accuracy"]) == ["overall", "groups", "by", "headline"]
    assert list(document["results"]["accuracy"]["groups"]["a"]) == ["value", "ci", "n", "n_clusters"]
    assert document["declared_metrics"] == [
        {"name": "accuracy", "column": "correct", "title": "Accuracy", "higher_is_better": True, "decimals": 2}
    ]
    (row,) = record_rows(again)
    assert row.scores["a"] == block.groups["a"].value and row.n["c"] == 0
    assert row.gap["groups"] == "a - b" and row.gap["diff"] == block.headline.gap


def test_what_a_metric_was_read_from_is_kept_and_written_only_where_it_is_said() -> None:
    said = MetricResult(
        overall=GroupStat(value=3.0, ci=None, n=1, n_clusters=1),
        groups={},
        read_from="the option log-probabilities",
        request_type="loglikelihood",
    )
    shown = said.to_json()
    assert shown["read_from"] == "the option log-probabilities" and shown["request_type"] == "loglikelihood"
    assert MetricResult.from_json(shown, "x", "warmth") == said
    assert "read_from" not in MetricResult(overall=None, groups={}).to_json()


@pytest.mark.parametrize(
    ("where", "damage"),
    [
        ("a group's statistics", lambda d: d["results"]["accuracy"]["groups"]["a"].pop("n")),
        ("a metric's block", lambda d: d["results"].__setitem__("accuracy", [1, 2])),
        ("a breakdown value", lambda d: d["results"]["accuracy"]["by"]["label"].__setitem__("x", {"value": 1})),
        ("the headline", lambda d: d["results"]["accuracy"]["headline"].pop("gap")),
        ("a declared metric", lambda d: d["declared_metrics"][0].pop("title")),
        ("a declared metric's unknown field", lambda d: d["declared_metrics"][0].__setitem__("unit", "x")),
        ("the results", lambda d: d.__setitem__("results", [])),
        ("the groups", lambda d: d["groups"].pop("order")),
        ("the groups' unknown field", lambda d: d["groups"].__setitem__("colour", "red")),
        ("the breakdowns", lambda d: d["results"]["accuracy"].__setitem__("by", [1])),
        ("one breakdown", lambda d: d["results"]["accuracy"]["by"].__setitem__("label", [1])),
        ("no groups' statistics", lambda d: d["results"]["accuracy"].__setitem__("groups", None)),
        ("a count that is not one", lambda d: d["results"]["accuracy"]["groups"]["a"].__setitem__("n", "8")),
        ("an interval of one end", lambda d: d["results"]["accuracy"]["groups"]["a"].__setitem__("ci", [0.1])),
        ("a value that is text", lambda d: d["results"]["accuracy"]["overall"].__setitem__("value", "high")),
        ("a headline pair as text", lambda d: d["results"]["accuracy"]["headline"].__setitem__("groups", "ab")),
        ("decimals as a float", lambda d: d["declared_metrics"][0].__setitem__("decimals", 3.0)),
        ("the group order as text", lambda d: d["groups"].__setitem__("order", "abc")),
        ("no group order", lambda d: d["groups"].__setitem__("order", None)),
        ("a group order of numbers", lambda d: d["groups"].__setitem__("order", [1, 2])),
        ("the group column as a number", lambda d: d["groups"].__setitem__("column", 0)),
        ("the unit as a number", lambda d: d["groups"].__setitem__("unit", 1)),
        ("a headline of three groups", lambda d: d["groups"].__setitem__("headline", ["a", "b", "c"])),
        ("the breakdowns as text", lambda d: d["groups"].__setitem__("breakdowns", "label")),
        ("no groups while metrics are declared", lambda d: d.__setitem__("groups", {})),
        ("a declared metric without results", lambda d: d["results"].pop("accuracy")),
        ("the breakdowns as false", lambda d: d["results"]["accuracy"].__setitem__("by", False)),
        ("an unknown key in a group", lambda d: d["results"]["accuracy"]["groups"]["a"].__setitem__("sd", 1)),
        ("a negative count", lambda d: d["results"]["accuracy"]["groups"]["a"].__setitem__("n", -1)),
        (
            "an interval with no lower end",
            lambda d: d["results"]["accuracy"]["groups"]["a"].__setitem__("ci", [None, 1]),
        ),
        (
            "a headline pair of three",
            lambda d: d["results"]["accuracy"]["headline"].__setitem__("groups", ["a", "b", "c"]),
        ),
        ("a headline pair of numbers", lambda d: d["results"]["accuracy"]["headline"].__setitem__("groups", [1, 2])),
        ("a headline without a gap", lambda d: d["results"]["accuracy"]["headline"].__setitem__("gap", None)),
        ("a p-value as text", lambda d: d["results"]["accuracy"]["headline"].__setitem__("p_value", "0.5")),
        ("a headline interval of one end", lambda d: d["results"]["accuracy"]["headline"].__setitem__("ci", [0.1])),
        ("read_from as a number", lambda d: d["results"]["accuracy"].__setitem__("read_from", 1)),
        ("higher_is_better as text", lambda d: d["declared_metrics"][0].__setitem__("higher_is_better", "yes")),
        ("a metric's name as a number", lambda d: d["declared_metrics"][0].__setitem__("name", 1)),
        ("negative decimals", lambda d: d["declared_metrics"][0].__setitem__("decimals", -1)),
        ("a billion decimals", lambda d: d["declared_metrics"][0].__setitem__("decimals", 10**9)),
        ("a long group name", lambda d: d["results"]["accuracy"]["groups"].__setitem__("x" * 5000, None)),
    ],
)
def test_a_record_whose_metrics_have_another_shape_is_one_line_naming_the_file(
    tmp_path: Path, where: str, damage, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("a", "b"):
        write_record(tmp_path / name, _record(model=name))
    path = tmp_path / "a" / "scores.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    damage(document)
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(ValueError, match="rerun the command that wrote it, with the same --out") as caught:
        read_record(path)
    message = str(caught.value)
    assert str(path) in message and "\n" not in message and len(message) < 300, where
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "cmp")]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "cmp").exists()


def test_the_groups_of_a_record_written_before_they_said_their_interval_read_as_a_bootstrap_over_templates(
    tmp_path: Path,
) -> None:
    write_record(tmp_path, _record())
    path = tmp_path / "scores.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    assert document["groups"] == {
        "column": "group",
        "order": ["a", "b", "c"],
        "cluster": "template_id",
        "breakdowns": ["label"],
        "headline": ["a", "b"],
        "unit": "templates",
        "interval": "bootstrap",
    }
    for key in ("unit", "interval"):  # a request run's record of an earlier version
        del document["groups"][key]
    path.write_text(json.dumps(document), encoding="utf-8")
    groups = read_record(path).groups
    assert (groups.unit, groups.interval, groups.breakdowns) == ("templates", "bootstrap", ["label"])
    # a probes run whose task declares no metric stored no groups: read and written back as none
    document["groups"], document["declared_metrics"], document["results"] = {}, [], {}
    path.write_text(json.dumps(document), encoding="utf-8")
    again = read_record(path)
    assert again.groups == NO_GROUPS and again.to_json()["groups"] == {}


def test_a_record_of_an_earlier_version_without_breakdowns_headline_or_p_value_reads(tmp_path: Path) -> None:
    write_record(tmp_path, _record())
    path = tmp_path / "scores.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    block = document["results"]["accuracy"]
    del block["headline"]["p_value"], block["headline"]["ci"]
    path.write_text(json.dumps(document), encoding="utf-8")
    head = read_record(path).results["accuracy"].headline
    assert head is not None and (head.ci, head.p_value) == (None, None) and head.groups == ["a", "b"]
    del block["by"], block["headline"]
    path.write_text(json.dumps(document), encoding="utf-8")
    again = read_record(path).results["accuracy"]
    assert again.by == {} and again.headline is None and again.groups == _record().results["accuracy"].groups


def test_a_probes_plan_that_gives_its_metrics_as_the_stored_json_gets_them_read_into_the_types() -> None:
    from queerbench.tasks.probes import ProbeAnalysis

    record = _record()
    typed = ProbeAnalysis(result={}, replies=pd.DataFrame(), metrics=record.results, groups=record.groups)
    stored = record.to_json()
    as_json = ProbeAnalysis(result={}, replies=pd.DataFrame(), metrics=stored["results"], groups=stored["groups"])
    assert as_json.metrics == typed.metrics and as_json.groups == typed.groups
    assert ProbeAnalysis(result={}, replies=pd.DataFrame()).groups == NO_GROUPS
    with pytest.raises(ValueError, match="a probes plan's analysis: the results of metric 'accuracy'") as caught:
        ProbeAnalysis(result={}, replies=pd.DataFrame(), metrics={"accuracy": {"groups": {}}})
    assert str(caught.value).endswith("the plan must give numbers where the record stores numbers")  # not "rerun"
    # a plan's own numbers: an interval as a tuple, counts as numpy integers
    own = {"value": np.float64(0.5), "ci": (0.25, 0.75), "n": np.int64(8), "n_clusters": np.int64(4)}
    read = ProbeAnalysis(
        result={}, replies=pd.DataFrame(), metrics={"m": {"overall": own, "groups": {"a": own}}}, groups=record.groups
    )
    stat = read.metrics["m"].groups["a"]
    assert stat == GroupStat(value=0.5, ci=[0.25, 0.75], n=8, n_clusters=4) and type(stat.n) is int


def test_a_records_document_is_a_copy_that_changing_leaves_the_record_as_it_was() -> None:
    record = _record(extra={"run": {"model": "m"}})
    document = record.to_json()
    document["run"]["model"] = "changed"
    document["results"]["accuracy"]["groups"]["a"]["n"] = -5
    document["groups"]["order"].append("d")
    assert record.extra["run"]["model"] == "m" and record.results["accuracy"].groups["a"].n > 0
    assert record.groups.order == ["a", "b", "c"] and record.to_json()["run"] == {"model": "m"}


@pytest.mark.parametrize("typed", [True, False])
def test_a_probes_plans_numpy_numbers_are_written_as_numbers_and_read_back(tmp_path: Path, typed: bool) -> None:
    from queerbench.tasks.probes import ProbeAnalysis

    own = GroupStat(value=np.float32(0.5), ci=[np.float32(0.25), np.int64(1)], n=np.int64(3), n_clusters=np.int64(2))  # type: ignore[arg-type]
    block = MetricResult(overall=own, groups={"a": own})
    metrics = {"accuracy": block if typed else block.to_json()}
    analysis = ProbeAnalysis(result={}, replies=pd.DataFrame(), metrics=metrics, groups=ResultGroups("group", ["a"]))  # type: ignore[arg-type]
    stat = analysis.metrics["accuracy"].groups["a"]
    assert stat == GroupStat(value=0.5, ci=[0.25, 1], n=3, n_clusters=2)
    assert {type(stat.value), type(stat.n)} == {float, int}  # plain numbers: JSON writes them as numbers
    record = _record(results=analysis.metrics, groups=analysis.groups)
    write_record(tmp_path, record)
    assert read_record(tmp_path / "scores.json") == record


def test_a_probes_plan_that_gives_metrics_without_their_groups_is_one_line() -> None:
    from queerbench.tasks.probes import ProbeAnalysis

    with pytest.raises(ValueError, match="metrics without the groups they are given for; the plan must give its"):
        ProbeAnalysis(result={}, replies=pd.DataFrame(), metrics=_record().results)


@pytest.mark.parametrize("decimals", [True, -1, 13, 2.0])
def test_a_task_file_declaring_decimals_a_record_could_not_read_back_is_refused_when_loaded(
    tmp_path: Path, decimals: object
) -> None:
    from queerbench.tasks import load_specs

    entry = {
        "name": "x",
        "benchmark": "X",
        "title": "x",
        "kind": "requests",
        "methods": ["scored"],
        "dataset": {"config": "x", "description": "x"},
        "requests": {"scored": "loglikelihood"},
        "metrics": [{"name": "acc", "column": "correct", "title": "Accuracy", "decimals": decimals}],
        "groups": {"column": "group", "order": ["a"]},
    }
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps({"schema_version": 1, "tasks": [entry]}), encoding="utf-8")
    with pytest.raises(ValueError, match=r"metrics\[0\]: 'decimals' is an integer from 0 to 12"):
        load_specs(path)
