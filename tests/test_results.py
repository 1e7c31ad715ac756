"""Results a researcher can read (issue 28): the reference rows from the papers' published files, ``queerbench eval``
with its report card and model-index, ``leaderboard show``, ``results push`` against the mock Hub, and ``view``.

The eval runs real tiny models (``tests/tiny_models.py``); the reference rows are computed from the pinned published
files (``QUEERBENCH_DATA_DIR``) with fewer resamples than the default, which changes the CIs and p-values but not a
single score.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from queerbench.cli import main
from queerbench.reporting.rows import ResultRow
from queerbench.results import eval as eval_module
from queerbench.results.folders import folder_rows
from queerbench.results.leaderboard import leaderboard_markdown, rank_groups, show_leaderboard
from queerbench.results.reference import build_reference_rows, bundled_reference_path, load_reference_rows
from tests.tiny_models import tiny_bert, tiny_llama

FAST = ["--toxicity", "none", "--bootstrap", "20", "--permutations", "20"]


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory) -> list[ResultRow]:
    path = tmp_path_factory.mktemp("reference") / "reference_rows.json"
    build_reference_rows(path, n_resamples=50, seed=0, workers=2, scorers=(), log=lambda _: None)  # stored values
    return load_reference_rows(path)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {"llama": tiny_llama(root), "bert": tiny_bert(root)}


# ------------------------------------------------------------------------------------------- reference rows
def test_reference_rows_reproduce_table4_and_queergen_and_add_cis_and_gap_tests(references: list[ResultRow]):
    paper = [r for r in references if r.task == "paper"]
    queergen = [r for r in references if r.task == "queergen"]
    assert len(paper) == 16 and len(queergen) == 28  # 8 masked LMs × k = 1, 5; 14 models × k = 1, top-5
    assert {r.model for r in paper} == {
        "albert-base-v2", "albert-large-v2", "bert-base-uncased", "bert-large-uncased", "roberta-base",
        "roberta-large", "vinai/bertweet-base", "vinai/bertweet-large",
    }  # fmt: skip
    assert all(r.extra["matches_published"] for r in references)  # every Table 4 cell; QueerGen's VADER/Perspective
    bert5 = next(r for r in paper if r.model == "bert-base-uncased" and r.k == 5)
    assert bert5.scores == bert5.extra["published"] and bert5.scores["queer"] == 12.62  # Table 4, BERTbase[5]
    for row in paper + [r for r in queergen if r.k == 1]:  # what the papers did not report
        assert all(isinstance(row.ci[g], list) and row.ci[g][0] <= row.scores[g] <= row.ci[g][1] for g in row.ci)
        assert row.gap["groups"] == "queer - non-queer" and 0 < row.gap["p_value"] <= 1
    gpt4o = next(r for r in queergen if r.model == "GPT-4o" and r.k == 1)
    assert gpt4o.method == "instructed" and set(gpt4o.scores) == {"unmarked", "non-queer", "queer"}
    assert gpt4o.extra["summary"]["VADER queer"] == pytest.approx(0.031, abs=5e-4)  # QueerGen's VADER_all
    top5 = [r for r in queergen if r.k == 5]
    assert all(not r.scores and r.extra["summary"] for r in top5)  # one stored Perspective value for five words


def test_the_bundled_reference_rows_are_what_leaderboard_build_computes(references: list[ResultRow]):
    bundled = {
        (r.task, r.model, r.k): r for r in load_reference_rows(bundled_reference_path()) if r.toxicity == "perspective"
    }
    fresh = {(r.task, r.model, r.k): r for r in references}
    assert bundled.keys() == fresh.keys()
    for key, row in fresh.items():  # the scores do not depend on the number of resamples; the CIs do
        assert (
            bundled[key].scores == row.scores
            and bundled[key].extra["summary" if not row.scores else "label"]
            == (row.extra["summary" if not row.scores else "label"])
        )


# ------------------------------------------------------------------------------------------------ eval
def test_eval_runs_every_task_with_every_method_and_writes_a_card_huggingface_hub_reads(
    models: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    from huggingface_hub import ModelCard

    out = tmp_path / "eval"
    args = ["eval", "--model", str(models["llama"]), "--limit", "1", "--out", str(out), *FAST, "--toxicity", "embedded"]
    assert main(args) == 0
    document = json.loads((out / "results.json").read_text())
    folders = [p["folder"] for p in document["parts"] if p["status"] == "done"]
    # QueerGen's instructed pass is its published protocol (k = 1, its own prompt); `paper` has no causal rows
    assert folders == [
        "misgendered-scored", "misgendered-instructed",
        "default-scored", "default-instructed", "queergen-scored", "queergen-instructed-k1", "scm",
    ]  # fmt: skip
    assert [p["folder"] for p in document["parts"] if p["status"] != "done"] == ["paper"]
    assert [(r["task"], r["method"]) for r in document["rows"]] == [
        ("misgendered", "scored"), ("misgendered", "instructed"), ("default", "scored"), ("default", "instructed"), ("queergen", "scored"), ("queergen", "instructed"),
        ("scm", "instructed"), ("scm", "scored"),
    ]  # fmt: skip
    free, constrained = document["rows"][-2:]  # a local model's SCM rating options are scored from its probabilities
    assert free["metric"].startswith("SCM free rating") and constrained["metric"].startswith("SCM constrained rating")
    assert any(v is not None for v in constrained["scores"].values()) and constrained["parse_rate"] is None
    card = (out / "card.md").read_text()
    assert "| QueerBench `default` | scored | 5 |" in card and "| SCM `scm` | instructed |" in card
    assert "## Signatures" in card and "task:default|method:scored|" in card and (out / "card.png").is_file()
    loaded = ModelCard.load(out / "card.md").data.eval_results
    scored = next(r for r in document["rows"] if r["task"] == "default" and r["method"] == "scored")
    assert loaded and {r.dataset_config for r in loaded} >= {"default", "queergen"}
    queer = next(r for r in loaded if r.metric_type == "default_scored_queer")
    assert queer.metric_value == pytest.approx(scored["scores"]["queer"], abs=1e-4)
    assert queer.metric_args["signature"] == scored["signature"] and queer.dataset_type == "queerbench/queerbench"
    assert (out / "replies.sqlite").is_file()  # the generative runs share one reply cache, the SCM probes too
    assert not (out / "scm" / "cache.sqlite").exists()
    # `view` opens the eval: every run, and the SCM replies with their parse and refusal kind
    from queerbench.hub.space.viewer import filter_table, load_parts

    parts = {part.name: part for part in load_parts(out)}
    assert set(parts) == {out.name, *folders}
    scm = parts["scm"].table
    assert len(scm) and {"reply", "label", "refusal_kind"} <= set(scm.columns)
    assert set(scm["label"]) <= {"parsed", "not parsed"}
    first = scm["group"].iloc[0]
    assert set(filter_table(parts["scm"], {"group": first}, show_harmful=False)["group"]) == {first}

    # a rerun reuses every part: nothing is predicted or scored again
    def refuse(*args, **kwargs):
        raise AssertionError("a finished part ran again")

    monkeypatch.setattr(eval_module, "run_benchmark", refuse)
    monkeypatch.setattr(eval_module, "run_requests", refuse)
    assert main(args) == 0 and "default-scored: finished earlier, reused" in capsys.readouterr().out
    # another eval in the same folder is refused in one line
    assert main([*args[: -len(FAST) - 2], "--limit", "2", "--out", str(out), *FAST]) == 2
    assert (
        "holds another eval (limit: 1 there, 2 now, toxicity: 'embedded' there, 'none' now)" in capsys.readouterr().err
    )


def test_eval_of_a_masked_lm_skips_what_needs_a_generative_model_and_says_why(
    models: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    out = tmp_path / "eval"
    assert main(["eval", "--model", str(models["bert"]), "--limit", "1", "--out", str(out), *FAST]) == 0
    parts = {p["folder"]: p for p in json.loads((out / "results.json").read_text())["parts"]}
    assert parts["default-mlm"]["status"] == "done" and parts["queergen-mlm"]["status"] == "done"
    assert parts["scm"]["status"] == "skipped" and "scm needs a model for instructed" in parts["scm"]["note"]
    assert "## Not run" in (out / "card.md").read_text()
    capsys.readouterr()
    assert main(["eval", "--model", str(models["bert"]), "--tasks", "scm", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("queerbench: error: no task of the suite applies to") and "scm needs a model for" in err
    assert err.count("\n") == 1 and not (tmp_path / "x").exists()


# ------------------------------------------------------------------------------------------ leaderboard
def _row(model: str, queer: float, **changes) -> ResultRow:
    fields = {
        "task": "paper", "benchmark": "QueerBench", "model": model, "method": "mlm", "k": 5,
        "toxicity": "perspective", "scores": {"queer": queer, "non-queer": queer - 1}, "n": {"queer": 10},
    }  # fmt: skip
    return ResultRow(**{**fields, **changes})


def test_only_comparable_rows_are_ranked_together():
    rows = [_row("a", 12.0, reference=True), _row("b", 9.0, reference=True), _row("mine", 10.0, source="runs/x")]
    rows += [_row("other-k", 1.0, k=1, source="runs/y"), _row("quick", 2.0, limit=2, source="runs/z")]
    rows += [_row("other-metric", 3.0, metric="a constrained rating", source="runs/w")]
    groups = rank_groups(rows)
    assert [[r.model for r in g] for g, _ in groups] == [["b", "mine", "a"], ["other-k"], ["quick"], ["other-metric"]]
    text = leaderboard_markdown(rows)
    assert "| 2 | **mine** (yours) | mlm |" in text
    assert "**other-k** (`runs/y`): not ranked with the reference rows: k=1 (not 5)" in text
    assert "**quick** (`runs/z`): not ranked with the reference rows: the first 2 templates (not all)" in text
    assert "metric a constrained rating (not QueerBench score)" in text


def test_leaderboard_show_places_a_run_and_lists_apart_what_is_not_comparable(
    models: dict[str, Path], references: list[ResultRow], tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    run = tmp_path / "run"
    assert main(["run", "--model", str(models["bert"]), "--limit", "1", "--out", str(run), *FAST[2:]]) == 0
    out = tmp_path / "board"
    rows = show_leaderboard([run], out, references)
    assert len(rows) == 45
    text = (out / "leaderboard.md").read_text()
    assert "## QueerBench `paper`, k=5, toxicity: perspective, all templates" in text
    assert "| 1 | " in text and "## Listed apart" in text
    assert (
        f"(`{run}`): not ranked with the reference rows: no published model has a reference row for task default"
        in text
    )
    frame = pd.read_csv(out / "leaderboard.csv")
    assert set(frame["model"]) >= {"bert-base-uncased", "GPT-4o"} and (out / "leaderboard.png").is_file()
    # the command, on a folder that is not a run: one line naming what a result folder holds
    capsys.readouterr()
    assert main(["leaderboard", "show", str(tmp_path), "--out", str(tmp_path / "b2")]) == 2
    err = capsys.readouterr().err
    assert "is not a result folder: it holds no scores.json" in err and err.count("\n") == 1


# ------------------------------------------------------------------------------------------------ push
def test_results_push_is_a_dry_run_unless_yes_needs_a_token_and_never_writes_into_a_foreign_dataset(
    models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    import huggingface_hub.constants

    from queerbench.hub.results import MARKER, pulled_rows
    from tests.hub_server import HubServer

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # conftest sets it; the mock is local
    run = tmp_path / "run"
    assert main(["run", "--model", str(models["bert"]), "--limit", "1", "--out", str(run), *FAST[2:]]) == 0
    capsys.readouterr()
    with HubServer() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        repo = ("dataset", "queerbench/queerbench-results")
        assert main(["results", "push", str(run)]) == 0  # dry run
        assert "dry run: would upload" in capsys.readouterr().out and repo not in hub.state.repos
        assert main(["results", "push", str(run), "--yes"]) == 2
        assert "HF_TOKEN is not set" in capsys.readouterr().err and repo not in hub.state.repos
        monkeypatch.setenv("HF_TOKEN", "hf_test")
        assert main(["results", "push", str(run), "--yes"]) == 0
        files = hub.state.repos[repo].files
        assert MARKER in files and not any(name.endswith("predictions.parquet") for name in files)
        entry = next(name for name in files if name.endswith("/results.json"))
        assert json.loads(files[entry])["rows"][0]["signature"] == folder_rows(run)[0].signature
        assert main(["results", "push", str(run), "--yes"]) == 2  # the same results twice
        assert "already holds these results" in capsys.readouterr().err
        assert [r.signature for r in pulled_rows()] == [folder_rows(run)[0].signature]
        foreign = hub.state.add_repo("dataset", "someone/else")
        foreign.files["data.csv"] = b"a,b\n"
        assert main(["results", "push", str(run), "--repo", "someone/else", "--yes"]) == 2
        assert "is not a queerbench results dataset" in capsys.readouterr().err
        assert list(foreign.files) == ["data.csv"]


def test_the_leaderboard_tab_reads_pushed_rows_and_falls_back_to_the_bundled_ones(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    import huggingface_hub.constants

    from queerbench.hub.space.leaderboard import leaderboard_rows, leaderboard_table
    from tests.hub_server import HubServer

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # conftest sets it; the mock is local
    monkeypatch.setenv("QUEERBENCH_CACHE", str(tmp_path / "cache"))  # no local build: the bundled rows
    with HubServer() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        repo = hub.state.add_repo("dataset", "queerbench/queerbench-results")
        mine = _row("pushed-model", 1.0, source="runs/p")
        repo.files["results/pushed/abc/results.json"] = json.dumps({"rows": [mine.to_dict()]}).encode()
        bundled = len(load_reference_rows(bundled_reference_path()))  # the 44 published rows under every scorer
        rows, note = leaderboard_rows()
        assert f"{bundled} reference rows and 1 pushed" in note
        tables = leaderboard_table(rows, task="paper", k="5")
        table = tables["QueerBench paper · k=5 · toxicity perspective · all templates"]
        assert table.iloc[0]["model"] == "pushed-model" and table.iloc[0]["rank"] == 1 and len(table) == 9
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # unreachable
    rows, note = leaderboard_rows()
    assert len(rows) == bundled and "could not be reached" in note


# ------------------------------------------------------------------------------------------------ view
def test_view_shows_a_run_filtered_with_harmful_completions_hidden_and_exports_csv(
    models: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    from queerbench.hub.space.ui import HIDDEN
    from queerbench.hub.space.viewer import build_viewer, filter_table, load_parts

    run = tmp_path / "run"
    assert main(["run", "--model", str(models["bert"]), "--limit", "1", "--out", str(run), *FAST[2:]]) == 0
    (part,) = load_parts(run)
    assert len(part.table) == 77 and "QueerBench" in part.report and part.figures
    queer = filter_table(part, {"group": "queer"}, show_harmful=True)
    assert set(queer["group"]) == {"queer"} and len(queer) == len(part.table[part.table["group"] == "queer"])
    part.flags[0] = [True, *part.flags[0][1:]]  # a harmful completion: hidden until asked for
    hidden = filter_table(part, {}, show_harmful=False)
    assert (
        hidden.loc[0, "completions"].startswith(HIDDEN)
        and HIDDEN not in filter_table(part, {}, True).loc[0, "completions"]
    )
    assert build_viewer(run) is not None
    assert main(["view", str(tmp_path / "nowhere")]) == 2
    assert "is not a folder" in capsys.readouterr().err
