"""``queerbench leaderboard show`` and the reading of result rows (issue 38: W6, W7, T5, U15, N6, W11).

Run folders are written here as ``queerbench run`` and ``lm-eval import`` write their ``scores.json`` (the keys their
readers use), an eval folder as ``queerbench eval`` writes its ``results.json`` (the rows of its part folders, read by
:func:`~queerbench.results.folders.run_row`); the reference rows are the bundled ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from matplotlib.colors import to_rgba

from queerbench.base.sources import fetch
from queerbench.cli import main
from queerbench.reporting import figures
from queerbench.reporting.rows import ResultRow
from queerbench.results.folders import folder_rows, run_row
from queerbench.results.leaderboard import leaderboard_markdown, rank_groups, show_leaderboard
from queerbench.results.reference import bundled_reference_path, load_reference_rows


@pytest.fixture(scope="module")
def references() -> list[ResultRow]:
    return load_reference_rows(bundled_reference_path())


def _scores(config: str = "paper", k: int = 5, queer: float = 11.0, **run: Any) -> dict[str, Any]:
    """A ``scores.json`` as ``queerbench run`` writes it (the keys the result rows are read from)."""
    signature = f"task:{config}|method:{run.get('method', 'mlm')}|model:{run.get('model', 'mine')}|k:{k}|" + (
        f"limit:subset|sentences:{run['sentences']}" if run.get("sentences") else f"limit:{run.get('limit') or 'all'}"
    )
    return {
        "config": config,
        "k": k,
        "queerbench": {"queer": queer, "non-queer": queer - 2},
        "ci": {"queer": {"queerbench": [queer - 1, queer + 1]}, "non-queer": {"queerbench": [queer - 3, queer - 1]}},
        "n": {"queer": 80, "non-queer": 80},
        "comparisons": {"queer - non-queer": {"diff": 2.0, "ci": [0.5, 3.5], "p_value": 0.01}},
        "scorers": {"toxicity": {"name": "precomputed"}},
        "signature": signature,
        "run": {"model": "mine", "method": "mlm", "limit": None, "signature": signature, **run},
    }


def _run(folder: Path, scores: dict[str, Any]) -> Path:
    folder.mkdir(parents=True)
    (folder / "scores.json").write_text(json.dumps(scores), encoding="utf-8")
    return folder


def _eval(folder: Path, parts: dict[str, dict[str, Any]]) -> Path:
    """An eval folder: its part folders and the results.json ``queerbench eval`` writes from them."""
    rows = [run_row(_run(folder / name, scores)).to_dict() for name, scores in parts.items()]
    (folder / "results.json").write_text(json.dumps({"schema_version": 1, "rows": rows}), encoding="utf-8")
    return folder


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("queerbench: error: ") and err.count("\n") == 1, err
    return err


# ------------------------------------------------------------------------------------------------ W6: subsets
def test_imported_subsets_are_never_all_templates_and_never_ranked_with_other_subsets(
    references: list[ResultRow], tmp_path: Path
):
    template5 = _run(
        tmp_path / "template5",
        _scores(
            "default", 1, 9.0, method="instructed", model="chat", sentences="77@aaaaaaaaaaaa",
            coverage="77 of 7,931 sentences: template 5 (77 of 77)",
        ),
    )  # fmt: skip
    first100 = _run(
        tmp_path / "first100",
        _scores(
            "default", 1, 12.0, method="instructed", model="chat", sentences="100@bbbbbbbbbbbb",
            coverage="100 of 7,931 sentences: templates 0 (77 of 77), 1 (23 of 77)",
        ),
    )  # fmt: skip
    whole = _run(tmp_path / "whole", _scores("default", 1, 10.0, method="instructed", model="chat"))
    rows = show_leaderboard([template5, first100, whole], tmp_path / "board", references)
    mine = [r for r in rows if not r.reference]
    assert {r.sentences for r in mine} == {"77@aaaaaaaaaaaa", "100@bbbbbbbbbbbb", None}
    groups = [[r.source for r in g] for g, _ in rank_groups(rows) if any(not r.reference for r in g)]
    assert sorted(groups) == sorted([[str(template5)], [str(first100)], [str(whole)]])  # each its own listing
    text = (tmp_path / "board" / "leaderboard.md").read_text()
    headings = [line for line in text.splitlines() if line.startswith("## QueerBench `default`")]
    assert len(headings) == 3
    assert sum("all templates" in h for h in headings) == 1  # the whole run only
    assert any("a subset: 77 of 7,931 sentences: template 5 (77 of 77)" in h for h in headings)
    assert any("a subset: 100 of 7,931 sentences: templates 0 (77 of 77), 1 (23 of 77)" in h for h in headings)
    frame = pd.read_csv(tmp_path / "board" / "leaderboard.csv")
    subset = frame[frame["source"] == str(template5)]
    assert set(subset["sentences"]) == {"77@aaaaaaaaaaaa"} and subset["comparison"].nunique() == 1
    assert frame[frame["source"] == str(first100)]["comparison"].iloc[0] != subset["comparison"].iloc[0]


def test_real_lm_eval_imports_of_one_template_and_of_the_first_100_sentences_are_listed_apart(
    references: list[ResultRow], tmp_path: Path
):
    from tests.test_file_defects import _import, _lm_eval_output, _sentences

    template5, first100 = tmp_path / "template5", tmp_path / "first100"
    _import(_lm_eval_output(tmp_path / "lm-5", _sentences([5])), template5)
    _import(_lm_eval_output(tmp_path / "lm-100", _sentences(first=100)), first100)
    rows = show_leaderboard([template5, first100], tmp_path / "board", references)
    groups = [g for g, _ in rank_groups(rows) if any(not r.reference for r in g)]
    assert sorted(len(g) for g in groups) == [1, 1]  # never ranked 1 and 2 in one table
    text = (tmp_path / "board" / "leaderboard.md").read_text()
    headings = [line for line in text.splitlines() if line.startswith("## QueerBench `default`")]
    assert len(headings) == 2 and not any("all templates" in h for h in headings), headings
    assert any("a subset: 77 of 7,931 sentences: template" in h for h in headings)
    assert any("a subset: 100 of 7,931 sentences: templates" in h for h in headings)


def test_a_subset_of_a_task_with_published_rows_is_listed_apart_with_the_reason(references: list[ResultRow]):
    subset = ResultRow(
        task="paper", benchmark="QueerBench", model="mine", method="mlm", k=5, toxicity="perspective",
        scores={"queer": 1.0, "non-queer": 0.5}, sentences="77@cccccccccccc", source="runs/sub",
        extra={"coverage": "77 of 8,268 sentences: template 5 (77 of 77)"},
    )  # fmt: skip
    groups = rank_groups([*references, subset])
    (alone,) = [g for g, _ in groups if subset in g]
    assert alone == [subset]  # not ranked with the published Table 4 rows of all templates
    text = leaderboard_markdown([*references, subset])
    assert (
        "**mine** (`runs/sub`): not ranked with the reference rows: a subset: 77 of 8,268 sentences: template 5 "
        "(77 of 77) (not all templates)"
    ) in text


# ------------------------------------------------------------------------------------------ W7: one result twice
def test_a_run_given_twice_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    run = _run(tmp_path / "run", _scores())
    err = _one_line_error(capsys, ["leaderboard", "show", str(run), str(run), "--out", str(tmp_path / "b")])
    assert f"{run} is given twice" in err and "pass each run folder once" in err
    assert not (tmp_path / "b").exists()
    # the same folder spelled another way is the same result
    (tmp_path / "x").mkdir()
    again = tmp_path / "x" / ".." / "run"
    err = _one_line_error(capsys, ["leaderboard", "show", str(run), str(again), "--out", str(tmp_path / "b")])
    assert f"{run} and {again} hold the same result" in err and "pass each run folder once" in err


def test_an_eval_and_one_of_its_part_folders_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    evaluation = _eval(tmp_path / "ev", {"paper-mlm": _scores(), "default-mlm": _scores("default")})
    part = evaluation / "default-mlm"
    err = _one_line_error(capsys, ["leaderboard", "show", str(evaluation), str(part), "--out", str(tmp_path / "b")])
    assert f"{evaluation} and {part} hold the same result" in err
    assert "'mine · default · mlm · k=5'" in err and "pass each run folder once" in err
    # two runs of other settings are two results, and compare still refuses its own repeats in one line
    other = _run(tmp_path / "other", _scores("default", k=1))
    assert main(["leaderboard", "show", str(evaluation), str(other), "--out", str(tmp_path / "b")]) == 0
    err = _one_line_error(capsys, ["compare", str(part), str(part), "--out", str(tmp_path / "c")])
    assert "would share the row" in err and "pass each run folder once" in err


# ------------------------------------------------------------------------------------------ T5: malformed rows
@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"k": [5]}, "'k' must be a positive integer or null, got [5]"),
        ({"scores": [1]}, "'scores' must be an object of per-group values, got list"),
        ({"scores": {"queer": "abc"}}, "scores['queer'] must be a number or null, got 'abc'"),
        ({"n": {"queer": "many"}}, "n['queer'] must be a count, got 'many'"),
    ],
)
def test_a_malformed_results_json_row_is_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], said: str
):
    evaluation = _eval(tmp_path / "ev", {"default-mlm": _scores("default")})
    document = json.loads((evaluation / "results.json").read_text())
    document["rows"][0].update(change)
    (evaluation / "results.json").write_text(json.dumps(document))
    err = _one_line_error(capsys, ["leaderboard", "show", str(evaluation), "--out", str(tmp_path / "b")])
    assert f"{evaluation / 'results.json'} row 0: {said}" in err and "rerun `queerbench eval`" in err


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"k": [5]}, "'k' must be a positive integer or null, got [5]"),
        ({"queerbench": {"queer": "abc"}}, "scores['queer'] must be a number or null, got 'abc'"),
        ({"n": {"queer": "many"}}, "n['queer'] must be a count, got 'many'"),
        ({"ci": [1]}, "'ci' must be an object, got list"),
        ({"ci": {"queer": [1, 2]}}, "ci['queer'] must be an object of per-score CIs"),
        ({"run": [1]}, "'run' must be an object, got list"),
        ({"generation": "x"}, "'generation' must be an object, got str"),
        ({"comparisons": {"queer - non-queer": {"diff": "big"}}}, "gap.diff must be a number or null"),
    ],
)
def test_a_malformed_scores_json_is_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], said: str
):
    run = _run(tmp_path / "run", {**_scores(), **change})
    err = _one_line_error(capsys, ["leaderboard", "show", str(run), "--out", str(tmp_path / "b")])
    assert f"{run / 'scores.json'}: {said}" in err and "rerun `queerbench run`" in err


def test_a_task_folder_whose_rows_are_malformed_is_one_line_naming_it(tmp_path: Path):
    folder = tmp_path / "scm"
    folder.mkdir()
    (folder / "scm.json").write_text(json.dumps({"rating_free": {"queer": {"Warmth": {"mean": "warm"}}}}))
    with pytest.raises(ValueError, match=r"scm \(scm row 0\): scores\['queer'\] must be a number or null"):
        folder_rows(folder)
    (folder / "scm.json").write_text(json.dumps({"rating_free": {"queer": {"Warmth": {"n": [3]}}}}))
    with pytest.raises(ValueError, match=r"scm: its scm results are malformed \(TypeError: .*\); rerun"):
        folder_rows(folder)


# ------------------------------------------------------------------------------------------ U15: --out, a foreign file
def test_out_that_is_a_file_is_one_line_saying_what_out_must_be(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    taken = tmp_path / "taken"
    taken.write_text("mine")
    err = _one_line_error(capsys, ["leaderboard", "show", "--out", str(taken)])
    assert f"--out {taken} is a file; --out must be a folder for leaderboard.md" in err
    assert "there is no --overwrite flag" in err and "Errno" not in err
    err = _one_line_error(capsys, ["leaderboard", "show", "--out", str(taken / "inside")])
    assert f"{taken} is a file" in err and "Errno" not in err and taken.read_text() == "mine"


def test_another_tools_results_json_is_named_as_such(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    folder = tmp_path / "lm_eval_out"
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps({"results": {"hellaswag": {"acc": 0.5}}}))
    err = _one_line_error(capsys, ["leaderboard", "show", str(folder), "--out", str(tmp_path / "b")])
    assert "results.json is not a queerbench results file" in err and "same --out" not in err
    (folder / "results.json").write_text("[1, 2]")
    err = _one_line_error(capsys, ["leaderboard", "show", str(folder), "--out", str(tmp_path / "b")])
    assert "results.json is not a queerbench results file" in err
    # beside a run's scores.json, another tool's results.json does not hide the run
    (folder / "scores.json").write_text(json.dumps(_scores()))
    assert [r.source for r in folder_rows(folder)] == [str(folder)]


# ------------------------------------------------------------------------------------------ N6: the figure
def _bars(fig: Any) -> list[tuple[str, tuple[float, ...]]]:
    """(panel title, face colour) of every bar the figure draws."""
    return [(ax.get_title(), patch.get_facecolor()) for ax in fig.axes for patch in ax.patches]


@pytest.mark.parametrize("config", ["paper", "default"])
def test_the_figure_keeps_the_reference_bars_beside_a_users_row(
    references: list[ResultRow], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str
):
    drawn: list[Any] = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, path: drawn.append(fig) or path)
    run = _run(tmp_path / "run", _scores(config, model="my-bert"))
    show_leaderboard([run], tmp_path / "board", references)
    (fig,) = drawn
    bars = _bars(fig)
    published, yours = to_rgba("0.75"), to_rgba("0.35")
    assert sum(colour == yours for _, colour in bars) == 1
    assert sum(colour == published for _, colour in bars) >= 8  # Table 4's eight masked LMs at k = 5
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["published (reference)", "yours"]
    assert "my-bert" in fig.get_suptitle()  # the title names the model; each panel its task and k
    assert any("k=5" in title and config in title for title, colour in bars if colour == yours)


# ------------------------------------------------------------------------------------------ W11: QueerGen's own metrics
def test_queergens_own_metrics_are_in_the_csv_at_full_precision_and_at_the_papers_in_the_markdown(
    references: list[ResultRow], tmp_path: Path
):
    show_leaderboard([], tmp_path, references)  # the published rows alone
    frame = pd.read_csv(tmp_path / "leaderboard.csv")
    bert = next(r for r in references if r.task == "queergen" and r.model == "BERT Base" and r.k == 1)
    summary = bert.extra["summary"]
    line = frame[(frame["task"] == "queergen") & (frame["model"] == "BERT Base") & (frame["k"] == 1)].iloc[0]
    for column, value in summary.items():  # VADER, Perspective and regard per group: every one, every digit
        assert column in frame.columns
        assert (pd.isna(line[column]) and value is None) or line[column] == pytest.approx(value, rel=1e-12)
    assert {"gap_ci_low", "gap_ci_high", "gap_p", "covered"} <= set(frame.columns)
    published = pd.read_csv(fetch("queergen_table_vader_all"), dtype={"VADER": str})  # as the paper prints it
    vader = published[(published["Model"] == "BERT Base") & (published["type"] == "Unmarked")]["VADER"].iloc[0]
    text = (tmp_path / "leaderboard.md").read_text()
    section = text.split("## QueerGen `queergen`, k=1,", 1)[1].split("\n## ", 1)[0]
    (bert_line,) = [ln for ln in section.splitlines() if "| BERT Base | mlm |" in ln]
    cells = [c.strip() for c in bert_line.split("|")]
    assert vader == "0.012" and vader in cells  # the paper's 0.012, not 0.01
    assert f"{summary['Perspective queer']:.3f}" in cells
