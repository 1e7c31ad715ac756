"""The Space's "Evaluate" tab on ``requests`` tasks: MISGENDERED on a tiny causal and a tiny masked LM through the
tab's own function and :func:`evaluate_model`, and a toy task with two declared metrics of its own; the score table's
rows and columns come from the task's declarations and its numbers are the result record's."""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from queerbench.hub.space import (
    ModelCache,
    ModelCheck,
    SpaceError,
    SpaceSettings,
    build_demo,
    check_model,
    evaluate_model,
)
from queerbench.hub.space.evaluate import _request_method, items_view, space_configs
from queerbench.hub.space.viewer import ViewPart
from queerbench.reporting.record import RunRecord, read_record
from queerbench.scoring.aggregate import GROUP_ORDER
from queerbench.tasks import Task, get_task, task_names
from tests.test_space_defects import _ui_event
from tests.tiny_models import tiny_bert, tiny_llama

QUICK = SpaceSettings(allow_local=True, quick_templates=2)
_CELL = re.compile(r"^(-?\d+\.\d+)(?: \[(-?\d+\.\d+), (-?\d+\.\d+)\])?$")
TWO_METRICS = '''
"""A toy requests task with two declared metrics and a group column of its own (for the Space's tests)."""
from dataclasses import replace

from queerbench.tasks.spec import GroupSpec, MetricSpec
from tests.data.request_task.toy_requests import SPEC, ToyTask


class TwoMetrics(ToyTask):
    def items(self):
        frame = super().items()
        frame["team"] = frame["group"]
        return frame

    def score_item(self, item, results, method):
        row = super().score_item(item, results, method)
        return {**row, "wrong": 1 - row["correct"]}


TASKS = [
    TwoMetrics(
        replace(
            SPEC,
            name="toy-two-metrics",
            metrics=(
                MetricSpec("accuracy", "correct", "Accuracy", True, 3),
                MetricSpec("error", "wrong", "Error rate", False, 2),
            ),
            groups=GroupSpec("team", ("b", "a"), "template_id", ()),
            extra={"headline_gap": ["a", "b"]},
        )
    )
]
'''


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("space-request-models")
    # 256 positions: the tiny GPT-2's 64 are fewer than a MISGENDERED sentence's tokens
    return {"llama": tiny_llama(root), "bert": tiny_bert(root)}


def _cell(text: str) -> tuple[float, list[float] | None]:
    found = _CELL.match(text)
    assert found, text
    value, lo, hi = found.groups()
    return float(value), None if lo is None else [float(lo), float(hi)]


def _assert_table_is_the_records(table: pd.DataFrame, record: RunRecord, task: Task) -> None:
    """Rows: the declared groups in order; columns: the group column, n, templates, one per declared metric (its
    title); each cell the record's value and CI at the metric's decimals."""
    spec = task.spec
    assert spec.groups is not None
    titles = [m.title for m in spec.metrics]
    assert list(table.columns) == [spec.groups.column, "n", "templates", *titles]
    assert [m.title for m in record.declared_metrics] == titles
    assert table[spec.groups.column].tolist() == list(spec.groups.order)
    for _, row in table.iterrows():
        group = row[spec.groups.column]
        for metric in spec.metrics:
            stat = record.results[metric.name].groups[group]
            assert int(row["n"]) == stat.n and int(row["templates"]) == stat.n_clusters
            value, ci = _cell(row[metric.title])
            assert stat.value is not None
            assert row[metric.title].split(" ")[0] == f"{stat.value:.{metric.decimals}f}"
            assert value == pytest.approx(stat.value, abs=10**-metric.decimals)
            if stat.ci is None:
                assert ci is None
            else:
                assert ci == pytest.approx(stat.ci, abs=10**-metric.decimals)


def test_the_space_offers_the_request_tasks_of_the_suite_after_the_blanks_tasks() -> None:
    configs = space_configs()
    blanks = task_names(runs_blanks=True)
    assert configs[: len(blanks)] == blanks  # the fill-in-the-blank tasks as before, in their order
    assert "misgendered" in configs[len(blanks) :]
    assert "misgendered-full" not in configs  # 3.5 million instances: outside the default suite, not for a demo


def test_misgendered_runs_in_the_tabs_function_on_a_tiny_causal_lm(models: dict[str, Path]) -> None:
    """The page's Evaluate button on a request task: the request runner with the loglikelihood requests of the
    ``scored`` method, the first 2 templates of a quick run, the table from the declared metrics."""
    demo = build_demo(QUICK)
    run = _ui_event(demo, "evaluate-button")
    outputs = run(
        str(models["llama"]), "misgendered", 5, list(GROUP_ORDER), "quick", "embedded", False, progress=_quiet
    )
    status, table, plot, sentences, csv_file, state = outputs
    assert status.startswith("**Done**"), status
    assert "method `scored` (loglikelihood requests)" in status and "config `misgendered`" in status
    record = read_record(Path(plot).parent / "scores.json")  # the run's own record, next to its figure
    assert (record.task, record.method, record.request_type) == ("misgendered", "scored", "loglikelihood")
    assert record.settings["limit"] == 2 and f"first 2 of {get_task('misgendered').n_templates()}" in status
    assert Path(plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    _assert_table_is_the_records(table, record, get_task("misgendered"))
    overall = record.results["accuracy"].overall
    assert overall is not None and overall.value is not None
    assert f"Accuracy (higher is better): {overall.value:.3f}" in status

    # the quick sample: the task's first 2 templates, every item of them, as `queerbench run --limit 2` takes them
    items = get_task("misgendered").items()
    first = sorted(items["template_id"].unique())[:2]
    assert sorted(sentences["template_id"].unique()) == first
    assert sorted(sentences["id"]) == sorted(items.loc[items["template_id"].isin(first), "id"])
    assert len(sentences) == record.n_items == 22  # 2 templates x 11 declared sets x 1 name
    for group, stat in record.results["accuracy"].groups.items():
        assert sentences.loc[sentences["group"] == group, "correct"].mean() == pytest.approx(stat.value)
    with Path(csv_file).open(encoding="utf-8") as fh:
        assert len(list(csv.DictReader(fh))) == record.n_items
    assert isinstance(state, ViewPart)  # what the "Show harmful" toggle redraws from
    pd.testing.assert_frame_equal(items_view(state, True), sentences)

    again = run(str(models["llama"]), "misgendered", 5, list(GROUP_ORDER), "quick", "none", False, progress=_quiet)
    assert sorted(again[3]["id"]) == sorted(sentences["id"])  # the same sample, the same scores
    pd.testing.assert_frame_equal(again[1], table)


def test_a_full_run_on_a_masked_lm_asks_fill_mask_requests_for_every_item(models: dict[str, Path]) -> None:
    result = evaluate_model(str(models["bert"]), "misgendered", run_size="full", settings=QUICK, cache=ModelCache())
    record = result.record
    assert record is not None and (record.method, record.request_type) == ("mlm", "fill_mask")
    assert record.settings["limit"] is None and record.n_items == len(get_task("misgendered").items()) == 550
    assert "all templates" in result.status and "method `mlm` (fill_mask requests)" in result.status
    assert result.scores == record.to_json()
    _assert_table_is_the_records(result.table, record, get_task("misgendered"))


@pytest.fixture
def two_metrics(fresh_registry: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Task]:
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "two_metrics.py").write_text(TWO_METRICS, encoding="utf-8")
    fresh_registry.setenv("QUEERBENCH_TASK_PATH", str(folder))
    yield get_task("toy-two-metrics")


def test_the_table_has_a_column_per_declared_metric_and_a_row_per_declared_group(
    two_metrics: Task, models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import queerbench.models.generation.local as local

    assert "toy-two-metrics" in space_configs()
    cache = ModelCache()
    loaded = cache.get(check_model(str(models["llama"]), QUICK))

    def no_second_load(*_: Any, **__: Any) -> None:
        raise AssertionError("the request run loaded the model again instead of answering from the Space's cache")

    monkeypatch.setattr(local, "load_causal_lm", no_second_load)
    result = evaluate_model(
        str(models["llama"]), "toy-two-metrics", settings=QUICK, cache=cache, out_dir=tmp_path / "out"
    )
    assert cache.get(check_model(str(models["llama"]), QUICK)) is loaded
    record = result.record
    assert record is not None and record.settings["limit"] == 2
    assert list(result.table.columns) == ["team", "n", "templates", "Accuracy", "Error rate"]
    assert result.table["team"].tolist() == ["b", "a"]  # the declared order, not the items'
    _assert_table_is_the_records(result.table, record, two_metrics)
    for _, row in result.table.iterrows():  # each metric at its own decimals: 3 for accuracy, 2 for the error rate
        accuracy, error = row["Accuracy"].split(" ")[0], row["Error rate"].split(" ")[0]
        assert len(accuracy.split(".")[1]) == 3 and len(error.split(".")[1]) == 2
        assert float(error) == pytest.approx(1 - float(accuracy), abs=0.006)
    assert sorted(result.sentences["template_id"].unique()) == [0, 1]
    assert "Error rate (lower is better)" in result.status and "Accuracy (higher is better)" in result.status


def test_a_task_whose_requests_the_model_cannot_answer_is_one_message() -> None:
    from dataclasses import replace

    spec = replace(get_task("misgendered").spec, methods=("instructed",), requests={"instructed": "generate"})
    masked = ModelCheck("some/bert", "hub", None, None, None, kind="masked")
    with pytest.raises(SpaceError, match=r"asks generate requests, which a masked LM cannot answer"):
        _request_method(masked, Task(spec))
    causal = ModelCheck("some/gpt", "hub", None, None, None, kind="causal")
    assert _request_method(causal, Task(spec)) == "instructed"  # the task's method the model's kind answers
    assert _request_method(causal, get_task("misgendered")) == "scored"  # the model's own method when it applies
    assert _request_method(masked, get_task("misgendered")) == "mlm"


def _quiet(*_: Any, **__: Any) -> None:
    return None
