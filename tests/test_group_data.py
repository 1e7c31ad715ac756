"""Subject groups are data: their order, the gaps tested and the headline gap come from the task data and the shipped
data files (``queerbench/data/subject_groups.json``, ``group_styles.json``, a task's ``extra``), each schema-checked,
so that no generic module writes a group's name (issue 35)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from queerbench.reporting.figures import GROUP_STYLE, check_group_styles, group_style
from queerbench.results.folders import run_row
from queerbench.scoring.aggregate import GROUP_ORDER, SCORE_BLOCKS, ScoringOptions, compute
from queerbench.scoring.groups import check_subject_groups, subject_groups
from queerbench.tasks import all_tasks, get_task
from queerbench.tasks.base import Task, load_specs


def _shipped(name: str) -> dict:
    return json.loads(resources.files("queerbench.data").joinpath(name).read_text(encoding="utf-8"))


def _task_file(tmp_path: Path, extra: dict, **fields: object) -> Path:
    entry: dict[str, object] = {
        "name": "toy",
        "benchmark": "Toy",
        "title": "a toy blanks task",
        "kind": "blanks",
        "methods": ["mlm"],
        "requests": {"mlm": "fill_mask"},
        "metrics": [{"name": "score", "column": "queerbench", "title": "QueerBench score", "higher_is_better": False}],
        "mlm_mode": "raw",
        "toxicity_input": "neutral",
        "dataset": {"config": "toy", "description": "toy"},
        "extra": extra,
        **fields,
    }
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps({"schema_version": 1, "tasks": [entry]}), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------- styles --
def test_figures_draw_each_group_in_the_style_its_data_file_declares() -> None:
    raw = _shipped("group_styles.json")
    assert {g: tuple(v) for g, v in raw["groups"].items()} == GROUP_STYLE
    for group, (colour, hatch) in raw["groups"].items():
        assert group_style(group, 5) == (colour, hatch)
    extra = [tuple(v) for v in raw["extra"]]
    assert [group_style("a group without a style", i) for i in range(len(extra))] == extra


@pytest.mark.parametrize(
    "raw",
    [
        [],
        {"groups": {"g": ["#000000", ""]}, "extra": [["#000000", ""]]},  # no schema_version
        {"schema_version": 1, "groups": {"g": ["#000000"]}, "extra": [["#000000", ""]]},  # no hatch
        {"schema_version": 1, "groups": {"g": ["", "//"]}, "extra": [["#000000", ""]]},  # no colour
        {"schema_version": 1, "groups": {"g": ["#000000", ""]}, "extra": []},  # nothing to cycle through
        {"schema_version": 1, "groups": ["#000000", ""], "extra": [["#000000", ""]]},
    ],
)
def test_a_malformed_style_file_is_refused_in_one_line(raw: object) -> None:
    with pytest.raises(ValueError, match=r"^styles\.json needs schema_version 1") as info:
        check_group_styles(raw, "styles.json")
    assert "\n" not in str(info.value)


# ----------------------------------------------------------------------------------------- subject groups --
def test_the_default_order_and_gaps_are_the_shipped_data() -> None:
    raw = _shipped("subject_groups.json")
    assert GROUP_ORDER == tuple(raw["group_order"]) == ScoringOptions().group_order
    assert ScoringOptions().comparisons == tuple(tuple(p) for p in raw["comparisons"])
    assert subject_groups().nouns == tuple(raw["splits"]["nouns"])


@pytest.mark.parametrize(
    "change",
    [
        {"group_order": "a, b"},
        {"comparisons": [["a", "b", "c"]]},
        {"descriptions": ["a"]},
        {"splits": {"pronouns": ["a"]}},
    ],
)
def test_a_malformed_subject_groups_file_is_refused_in_one_line(change: dict) -> None:
    raw = {**_shipped("subject_groups.json"), **change}
    with pytest.raises(ValueError, match=r"^groups\.json needs 'group_order'") as info:
        check_subject_groups(raw, "groups.json")
    assert "\n" not in str(info.value)


def test_a_task_declaring_its_own_order_and_gaps_changes_the_scores_order(tmp_path: Path) -> None:
    shipped = list(GROUP_ORDER)
    mine = shipped[::-1]
    first, last = mine[0], mine[-1]
    spec = load_specs(_task_file(tmp_path, {"group_order": mine, "comparisons": [[first, last]]}))["toy"]
    predictions = [["doctor"], ["nurse"], ["teacher"], ["friend"], ["cook"]] * 2
    groups = shipped * 2
    plain = compute(predictions, groups, options=ScoringOptions(toxicity="none", n_bootstrap=0, n_permutations=0))
    options = Task(spec).scoring_options(toxicity="none", n_bootstrap=0, n_permutations=0)
    declared = compute(predictions, groups, options=options)
    assert list(plain["n"]) == shipped
    assert list(declared["n"]) == list(declared["queerbench"]) == mine
    assert options.comparisons == ((first, last),)


def test_a_task_without_declared_groups_keeps_the_shipped_ones(tmp_path: Path) -> None:
    options = Task(load_specs(_task_file(tmp_path, {}))["toy"]).scoring_options(toxicity="none")
    assert options.group_order == GROUP_ORDER and options.comparisons == subject_groups().comparisons


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"group_order": "a"}, "extra.group_order"),
        ({"group_order": ["a", 1]}, "extra.group_order"),
        ({"comparisons": [["a"]]}, "extra.comparisons"),
        ({"comparisons": "a - b"}, "extra.comparisons"),
    ],
)
def test_a_malformed_group_declaration_is_refused_in_one_line(tmp_path: Path, extra: dict, field: str) -> None:
    with pytest.raises(ValueError, match=rf"task 'toy'.*'{field}' must be a list") as info:
        load_specs(_task_file(tmp_path, extra))
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------------------------- declared metrics --
def test_each_blanks_task_declares_its_request_types_and_the_blocks_of_its_scores_as_metrics() -> None:
    blanks = [task for task in all_tasks().values() if task.runs_blanks]
    assert {task.name for task in blanks} >= {"default", "paper", "queergen"}
    for task in blanks:
        assert set(task.spec.requests) == set(task.spec.methods), task.name
        assert {m.column for m in task.spec.metrics} <= set(SCORE_BLOCKS), task.name
        # the leaderboard row reports the first declared metric: the QueerBench score, under the id Hub rows use
        assert task.leaderboard_metrics() == {"QueerBench score": "score"}, task.name
        assert task.headline_metric.column == "queerbench" and not task.headline_metric.higher_is_better
    assert get_task("default").request_type("mlm") == "fill_mask"
    assert get_task("default").request_type("scored") == "fill_mask"  # a causal LM's top-k, proposed and ranked
    assert get_task("paper").request_type("instructed") == "generate"


def test_a_blanks_tasks_own_metric_title_is_what_its_row_reports(tmp_path: Path) -> None:
    metrics = [{"name": "h", "column": "hurtlex", "title": "HurtLex share"}]
    task = Task(load_specs(_task_file(tmp_path, {}, metrics=metrics))["toy"])
    assert task.leaderboard_metrics() == {"HurtLex share": "h"} and task.headline_metric.column == "hurtlex"


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"metrics": [{"name": "x", "column": "vader", "title": "X"}]}, "'vader'] is none of queerbench, afinn"),
        ({"groups": {"column": "group", "order": ["a"]}}, "a 'blanks' task's groups are the subject groups"),
        ({"requests": {"scored": "loglikelihood"}}, "'requests' must map each of its methods to a request type"),
        ({"requests": {"mlm": "masked"}}, "'requests' names unknown request types {'mlm': 'masked'}"),
        ({"metrics": []}, "'metrics' must be a non-empty list"),
    ],
)
def test_a_blanks_tasks_bad_requests_or_metrics_are_one_line(tmp_path: Path, fields: dict, says: str) -> None:
    with pytest.raises(ValueError) as info:
        load_specs(_task_file(tmp_path, {}, **fields))
    assert says in str(info.value) and "\n" not in str(info.value)


# ------------------------------------------------------------------------------------------- headline gap --
def test_the_headline_gap_is_what_the_task_declares(tmp_path: Path) -> None:
    bare = Task(load_specs(_task_file(tmp_path, {}))["toy"])
    assert not bare.declares_headline_gap
    with pytest.raises(ValueError, match=r"task toy declares no headline gap"):
        _ = bare.headline_gap
    declared = Task(load_specs(_task_file(tmp_path, {"headline_gap": ["b", "a"]}))["toy"])
    assert declared.declares_headline_gap and declared.headline_gap == ("b", "a")
    for task in all_tasks().values():  # every shipped task that runs blanks names its gap in its data
        if task.runs_blanks:
            assert task.declares_headline_gap, task.name


def test_a_run_of_a_task_it_does_not_know_shows_its_first_gap(tmp_path: Path) -> None:
    order = list(GROUP_ORDER)
    gap = {"diff": 1.5, "ci": [0.5, 2.5], "p_value": 0.25}
    other = {"diff": -1.0, "ci": [-2.0, 0.0], "p_value": 0.5}
    scores = {
        "config": "a task no registry knows",
        "k": 1,
        "queerbench": dict.fromkeys(order, 1.0),
        "afinn": dict.fromkeys(order, 1.0),
        "hurtlex": dict.fromkeys(order, 1.0),
        "toxicity": dict.fromkeys(order, 1.0),
        "n": dict.fromkeys(order, 3),
        "comparisons": {f"{order[1]} - {order[0]}": gap, f"{order[0]} - {order[2]}": other},
        "run": {"model": "m", "method": "mlm"},
    }
    row = run_row(tmp_path, scores)
    assert row.gap == {"groups": f"{order[1]} - {order[0]}", **gap}
