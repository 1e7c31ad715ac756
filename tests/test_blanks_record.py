"""A fill-in-the-blank run writes the typed result record a request run writes (issue 35: one result record).

Its ``scores.json`` is a :class:`~queerbench.reporting.record.RunRecord` of kind ``blanks``: what produced it, and per
declared metric (the QueerBench score and its components, from the task's ``tasks.json``) the per-group value, CI,
count and template count, with the headline gap on the tested block. The blocks readers have always read stay at
its top level, unchanged; readers that route by kind keep reading a blanks run by those blocks.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from queerbench.reporting.record import RunRecord, is_record, read_record, record_rows
from queerbench.results.folders import folder_rows, run_row
from queerbench.run.pipeline import RunOptions, run_benchmark
from queerbench.scoring.metric_results import Headline
from queerbench.tasks import get_task
from tests.tiny_models import tiny_bert

FAST = {"n_bootstrap": 200, "n_permutations": 200}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = tiny_bert(tmp_path_factory.mktemp("models"))
    out = tmp_path_factory.mktemp("runs") / "bert"
    run_benchmark(RunOptions(model=str(model), limit=2, **FAST), out, log=lambda _: None)
    return out


def test_a_blanks_runs_scores_are_its_record_with_the_same_numbers_as_its_blocks(run: Path) -> None:
    document = json.loads((run / "scores.json").read_text(encoding="utf-8"))
    record = read_record(run / "scores.json")
    task = get_task("default")
    assert (record.kind, record.task, record.benchmark, record.method) == ("blanks", "default", "QueerBench", "mlm")
    assert record.request_type == task.request_type("mlm") == "fill_mask"
    assert record.signature == document["signature"] and record.model_fingerprint == document["run"]["fingerprint"]
    assert record.settings["k"] == 5 and record.settings["toxicity_label"] == "embedded"
    assert record.n_items == int(sum(document["n"].values()))
    assert record.declared_metrics == list(task.spec.metrics)
    for metric in task.spec.metrics:  # each declared metric is its block of the scores, group by group
        groups = record.results[metric.name].groups
        assert list(groups) == list(document[metric.column]) == record.groups.order
        for g, stat in groups.items():
            assert stat.value == document[metric.column][g] and stat.n == document["n"][g]
            assert stat.ci == document["ci"][g][metric.column] and 1 <= stat.n_clusters <= 2
    headline = record.results[task.headline_metric.name].headline
    tested = document["comparisons"][" - ".join(task.headline_gap)]
    assert headline == Headline(
        groups=list(task.headline_gap), gap=tested["diff"], ci=tested["ci"], p_value=tested["p_value"]
    )
    assert all(record.results[m.name].headline is None for m in task.spec.metrics[1:])  # only the score's gap
    # the blocks stay where their readers find them, and the record writes them back unchanged
    assert record.extra["queerbench"] == document["queerbench"] and record.extra["run"] == document["run"]
    assert record.to_json() == document


def test_readers_keep_reading_a_blanks_run_by_its_blocks(run: Path) -> None:
    document = json.loads((run / "scores.json").read_text(encoding="utf-8"))
    assert not is_record(document)  # the record readers route by kind: a request run's record only
    [row] = folder_rows(run)
    assert row == run_row(run) and row.metric == "QueerBench score" and row.scores == document["queerbench"]
    # the record's own rows, one per declared metric, agree with the row readers show
    rows = record_rows(read_record(run / "scores.json"), source=str(run))
    assert [r.metric for r in rows] == list(get_task("default").leaderboard_metrics()) + [
        m.title for m in get_task("default").spec.metrics[1:]
    ]
    assert (rows[0].scores, rows[0].ci, rows[0].n, rows[0].k, rows[0].toxicity) == (
        row.scores,
        row.ci,
        row.n,
        row.k,
        row.toxicity,
    )
    assert rows[0].gap["diff"] == row.gap["diff"] and rows[0].signature == row.signature


def test_a_rerun_reuses_the_folder_and_rewrites_the_same_record(run: Path) -> None:
    before = json.loads((run / "scores.json").read_text(encoding="utf-8"))
    model = before["run"]["model"]
    result = run_benchmark(RunOptions(model=model, limit=2, **FAST), run, log=lambda _: None)
    after = read_record(run / "scores.json")
    assert result.reused_predictions and after.reused_predictions
    assert after.results == RunRecord.from_json(before).results and after.signature == before["signature"]


def test_a_scores_file_written_before_the_record_is_still_a_blanks_run_and_not_a_record(
    run: Path, tmp_path: Path
) -> None:
    document = json.loads((run / "scores.json").read_text(encoding="utf-8"))
    legacy = ("signature", "queerbench_version")  # the two keys the blocks and the record share
    old = {k: v for k, v in document.items() if k not in RunRecord.__dataclass_fields__ or k in legacy}
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "scores.json").write_text(json.dumps(old), encoding="utf-8")
    assert not is_record(old) and folder_rows(folder) == [run_row(folder)]
    with pytest.raises(ValueError) as info:
        read_record(folder / "scores.json")
    assert "holds a result record of version None" in str(info.value) and "\n" not in str(info.value)


def test_a_record_of_an_unknown_kind_is_one_line_and_a_request_record_before_kind_reads_as_one(run: Path) -> None:
    document = json.loads((run / "scores.json").read_text(encoding="utf-8"))
    with pytest.raises(ValueError) as info:
        RunRecord.from_json({**document, "kind": "pairs"}, where="x/scores.json")
    assert str(info.value) == "x/scores.json: a result record of kind 'pairs', not one of requests, blanks, probes"
    fields = {k: v for k, v in document.items() if k in RunRecord.__dataclass_fields__ and k not in ("kind", "extra")}
    assert (
        is_record(fields) and RunRecord.from_json(fields).kind == "requests" and not RunRecord.from_json(fields).extra
    )


def test_a_runs_row_reports_its_first_declared_metric_and_the_others_as_components(run: Path, tmp_path: Path) -> None:
    """The row readers show (leaderboard, compare, card) reads the run's declared metrics, not a fixed score key: a
    record declaring another metric first is reported by it, with its own CIs, the rest as its components, and no
    gap (the gaps were tested on the QueerBench score)."""
    document = json.loads((run / "scores.json").read_text(encoding="utf-8"))
    hurtlex = {"name": "h", "column": "hurtlex", "title": "HurtLex share", "higher_is_better": False, "decimals": 1}
    declared = [hurtlex, *(m for m in document["declared_metrics"] if m["column"] != "hurtlex")]
    row = run_row(tmp_path, {**document, "declared_metrics": declared})
    assert row.metric == "HurtLex share" and row.scores == document["hurtlex"] and row.gap == {}
    assert row.ci == {g: document["ci"][g]["hurtlex"] for g in document["hurtlex"]}
    assert list(row.extra) == [m["column"] for m in declared[1:]]
    # the run as written: its first declared metric is the QueerBench score, whose gap the row carries
    plain = run_row(run)
    assert (
        plain.metric == "QueerBench score"
        and plain.scores == document["queerbench"]
        and plain.gap["diff"] == (document["comparisons"][" - ".join(get_task("default").headline_gap)]["diff"])
    )
    assert list(plain.extra) == ["afinn", "hurtlex", "toxicity"]
