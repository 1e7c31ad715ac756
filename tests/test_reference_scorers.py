"""Reference rows under every offline scorer (issue 34, deliverable 3): ``leaderboard build`` re-scores each published
model's own file with every scorer listed in ``queerbench/data/scorer_caveats.json`` (``reference_scorers``) and any
``--toxicity`` it is given, by the same code path as ``queerbench score FILE --toxicity SCORER``; each scorer is told
which model it scores (``held_out_model``); ``leaderboard show`` ranks a user's row beside the published rows of its
scorer and says how those were made. The published files come from ``QUEERBENCH_DATA_DIR``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pytest

from queerbench.base.sources import fetch
from queerbench.cli import main
from queerbench.reporting.rows import ResultRow
from queerbench.results.leaderboard import leaderboard_markdown, rank_groups
from queerbench.results.reference import (
    build_reference_rows,
    bundled_reference_path,
    load_reference_rows,
    reference_scorer_names,
)
from queerbench.scoring import caveats
from queerbench.tasks import get_task
from queerbench.tasks.queerbench.task import QueerBenchTask
from queerbench.tasks.queergen.task import QueerGenTask

PAPER_FILE = "queerbench_paper_evaluation_albert_base_v2_template_1"
QUEERGEN_FILE = "queergen_eval_bert_base"


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("queerbench: error: ") and err.count("\n") == 1, err
    return err


# ------------------------------------------------------------------------ a user's score = the reference row
def test_a_users_score_of_a_published_file_gives_that_models_embedded_reference_row(tmp_path: Path):
    row = get_task("paper").reference_rows(PAPER_FILE, n_resamples=50, seed=0, scorer="embedded")[0]
    out = tmp_path / "score.json"
    argv = ["score", str(fetch(PAPER_FILE)), "--config", "paper", "--toxicity", "embedded", "--out", str(out)]
    assert main(argv) == 0
    scored = json.loads(out.read_text())
    assert row.model == "albert-base-v2" and row.k == 1 and row.toxicity == "embedded" and row.reference
    assert row.scores == scored["queerbench"] and row.n == scored["n"]
    for part in ("afinn", "hurtlex", "toxicity"):  # the score's components too, every digit
        assert row.extra[part] == scored[part]
    stored = get_task("paper").reference_rows(PAPER_FILE, n_resamples=50, seed=0)[0]
    assert stored.toxicity == "perspective" and stored.scores != row.scores  # another scorer, other P values


def test_a_users_score_of_a_queergen_file_gives_its_embedded_reference_rows_figures(tmp_path: Path):
    row = get_task("queergen").reference_rows(QUEERGEN_FILE, n_resamples=50, seed=0, scorer="embedded")[0]
    out = tmp_path / "score.json"
    argv = ["score", str(fetch(QUEERGEN_FILE)), "--config", "queergen", "--toxicity", "embedded", "--out", str(out)]
    assert main(argv) == 0
    scored = json.loads(out.read_text())
    assert row.model == "BERT Base" and row.k == 1 and row.toxicity == "embedded"
    # the scorer's mean probabilities per group (its cache returns each text's value as first computed; a fresh
    # computation in another batch may differ in the 11th digit, which no flag at 0.5 sees)
    ours, theirs = row.extra["queergen"]["perspective"], scored["perspective"]
    assert ours.keys() == theirs.keys() == {"unmarked", "non-queer", "queer"}
    for group, figures in ours.items():
        assert figures == pytest.approx(theirs[group], rel=1e-9)
    assert row.extra["queergen"]["vader"] == scored["vader"] and row.extra["queergen"]["regard"] == scored["regard"]
    assert {g for g, v in row.scores.items() if v is not None} == {"unmarked", "non-queer", "queer"}


# ------------------------------------------------------------------------ every scorer told its held-out model
class _Recorder:
    """A deterministic stand-in scorer that records the model it was built to hold out."""

    built: ClassVar[list[str | None]] = []

    def __init__(self, held_out_model: str | None) -> None:
        self.held_out_model = held_out_model
        self.name = "hf:recorder"
        _Recorder.built.append(held_out_model)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "scorer": "recorder"}

    def score(self, texts: list[str], *, words: list[str] | None = None, progress: bool = False) -> pd.DataFrame:
        flagged = np.array([float(len(t) % 3 == 0) for t in texts])
        return pd.DataFrame({a: flagged for a in ("TOXICITY", "IDENTITY_ATTACK", "INSULT", "PROFANITY", "THREAT")})


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    from queerbench.scoring import aggregate, toxicity

    def build(spec: str, *, held_out_model: str | None = None, **kwargs: Any) -> Any:
        # the form of text each paper's protocol scores (QueerBench: full sentences; QueerGen: subject-blind)
        assert spec == "hf:recorder" and set(kwargs) <= {"text_form"}
        assert kwargs.get("text_form") in ("full", "neutral")
        return _Recorder(held_out_model)

    _Recorder.built = []
    aggregate._scorer.cache_clear()
    monkeypatch.setattr(toxicity, "get_toxicity_scorer", build)
    # two files of each benchmark: a k = 1 and a top-5 file each
    wanted = {PAPER_FILE, PAPER_FILE[:-1] + "5", QUEERGEN_FILE, "queergen_eval_top5_gpt_4o"}
    for klass in (QueerBenchTask, QueerGenTask):
        every = klass.reference_sources
        monkeypatch.setattr(
            klass, "reference_sources", lambda self, every=every: [s for s in every(self) if s in wanted]
        )
    yield _Recorder.built
    aggregate._scorer.cache_clear()


def test_every_rescored_row_is_scored_with_its_own_model_held_out_and_keeps_the_scorers_name(
    recorder: list[str | None], tmp_path: Path
):
    document = build_reference_rows(
        tmp_path / "rows.json", n_resamples=10, seed=0, workers=1, scorers=["hf:recorder"], log=lambda _: None
    )
    assert document["scorers"] == ["perspective", "hf:recorder"]
    rows = load_reference_rows(tmp_path / "rows.json")
    stored = [r for r in rows if r.toxicity == "perspective"]
    rescored = [r for r in rows if r.toxicity == "hf:recorder"]
    assert len(stored) == len(rescored) == 4
    assert sorted(r.model for r in rescored) == sorted(r.model for r in stored)
    assert sorted(set(recorder)) == sorted({r.model for r in rescored})  # each scored by a scorer holding it out
    assert None not in recorder
    assert all("tox:hf:recorder@" in r.signature and r.reference for r in rescored)
    # the held-out model changes nothing of a row's identity: one comparable group per task and k, both models in it
    keys = {(r.task, r.k): r.comparable_key() for r in rescored}
    assert all(key[2] == "hf:recorder" for key in keys.values())


# ------------------------------------------------------------------------ the scorers are data
def test_the_reference_scorers_are_listed_in_the_data_and_a_listed_one_joins_with_no_code(
    monkeypatch: pytest.MonkeyPatch,
):
    assert caveats.reference_scorers() == ["embedded", "surrogate"]
    assert reference_scorer_names() == ["embedded", "surrogate"]
    assert reference_scorer_names(["hf: my/model", "embedded"]) == ["embedded", "surrogate", "hf:my/model"]
    assert reference_scorer_names(["hf:my/model"], stored_only=True) == ["hf:my/model"]
    document = json.loads(json.dumps(caveats.load_caveats()))
    document["reference_scorers"] = ["embedded", "hf:another/model"]
    document["scorers"]["hf"]["reference_note"] = "rows from leave-one-model-out fits"
    assert caveats.schema_problems(document) == []
    monkeypatch.setattr(caveats, "load_caveats", lambda: document)
    assert reference_scorer_names() == ["embedded", "hf:another/model"]
    assert caveats.reference_note("hf:another/model") == "rows from leave-one-model-out fits"
    for bad in (["embedded", "embedded"], ["none"], ["perspective"], "embedded", [""]):
        problems = caveats.schema_problems({**document, "reference_scorers": bad})
        assert any(p.startswith("reference_scorers must") for p in problems), (bad, problems)


@pytest.mark.parametrize(
    ("scorer", "says"),
    [
        ("nope", "unknown toxicity scorer 'nope'"),
        ("perspective", "the published models' perspective rows come from the values stored in their files"),
        ("none", "name an offline scorer"),
        ("hf:", "--toxicity hf: needs a model id or path"),
    ],
)
def test_build_refuses_a_scorer_it_cannot_rescore_with_in_one_line(
    scorer: str, says: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
):
    out = tmp_path / "rows.json"
    err = _one_line_error(capsys, ["leaderboard", "build", "--toxicity", scorer, "--out", str(out)])
    assert says in err and not out.exists()


# ------------------------------------------------------------------------ the bundled rows, and show
@pytest.fixture(scope="module")
def bundled() -> list[ResultRow]:
    return load_reference_rows(bundled_reference_path())


def test_the_bundled_rows_hold_every_listed_scorers_rows_for_every_published_file(bundled: list[ResultRow]):
    document = json.loads(bundled_reference_path().read_text())
    assert document["scorers"] == ["perspective", *caveats.reference_scorers()]
    stored = {(r.task, r.model, r.k) for r in bundled if r.toxicity == "perspective"}
    assert len(stored) == 44
    for scorer in caveats.reference_scorers():
        assert {(r.task, r.model, r.k) for r in bundled if r.toxicity == scorer} == stored, scorer
    embedded = [r for r in bundled if r.toxicity == "embedded"]
    assert all(r.gap.get("p_value") for r in embedded if r.scores)  # CIs and the gap test, as the stored rows
    assert {r.task for r in embedded if r.scores} == {"paper", "queergen"}


def test_show_ranks_a_users_embedded_row_beside_the_published_embedded_rows_and_says_how_they_were_made(
    bundled: list[ResultRow],
):
    mine = ResultRow(
        task="paper", benchmark="QueerBench", model="my-bert", method="mlm", k=5, toxicity="embedded",
        scores={"neo": 1.0, "neutral": 1.0, "binary": 1.0, "queer": 5.0, "non-queer": 4.0}, source="runs/mine",
    )  # fmt: skip
    rows = [*bundled, mine]
    (group,) = [g for g, _ in rank_groups(rows) if mine in g]
    published = [r for r in group if r.reference]
    assert len(published) == 8 and {r.toxicity for r in group} == {"embedded"} and {r.k for r in group} == {5}
    text = leaderboard_markdown(rows)
    assert "Listed apart" not in text
    section = text.split("## QueerBench `paper`, k=5, toxicity: embedded,", 1)[1].split("\n## ", 1)[0]
    assert "**my-bert** (yours)" in section and caveats.reference_note("embedded") in section
    stored = text.split("## QueerBench `paper`, k=5, toxicity: perspective,", 1)[1].split("\n## ", 1)[0]
    assert caveats.reference_note("perspective") in stored and "**my-bert**" not in stored


def test_the_spaces_leaderboard_tab_has_one_comparison_per_scorer_and_says_how_the_rows_were_made(
    bundled: list[ResultRow],
):
    from queerbench.hub.space.leaderboard import leaderboard_table, scorer_notes

    titles = list(leaderboard_table(bundled, "paper", "5"))
    assert any("toxicity perspective" in t for t in titles) and any("toxicity embedded" in t for t in titles)
    notes = scorer_notes(bundled)
    assert caveats.reference_note("perspective") in notes and caveats.reference_note("embedded") in notes


def test_show_says_when_the_built_rows_lack_a_listed_scorer(bundled: list[ResultRow], tmp_path: Path):
    from queerbench.results.reference import reference_rows_for_show

    path = tmp_path / "reference_rows.json"
    stored = [r.to_dict() for r in bundled if r.toxicity == "perspective"]  # a --stored-only build
    path.write_text(json.dumps({"rows": stored}))
    rows, note = reference_rows_for_show(path)
    assert len(rows) == 44 and note and "have none under embedded" in note and "leaderboard build" in note
    assert reference_rows_for_show(bundled_reference_path())[1] is None


def test_build_out_a_folder_writes_reference_rows_json_in_it(tmp_path: Path):
    from queerbench.cli import main

    folder = tmp_path / "rows"
    folder.mkdir()
    args = ["leaderboard", "build", "--stored-only", "--resamples", "10", "--workers", "1", "--out", str(folder)]
    assert main(args) == 0
    written = folder / "reference_rows.json"
    assert {r.toxicity for r in load_reference_rows(written)} == {"perspective"}
