"""Defects of scoring found by a fault probe (issue 30), each pinned by the behaviour a user sees.

- HurtLex: a word that normalises to nothing (``''``, an emoji) is no hit under the ``default`` rules, although
  HurtLex's emoji lemmas normalise to ``''`` (before, every empty prediction scored 100, 500 with ``inclusive``).
- ``queerbench score`` refuses, in one line naming the file and row: repeated rows, ``--top-k`` below 1, a ``tokens``
  column of text or with an empty cell, a missing group, a group or pronoun type the task does not have, a malformed
  ``perspective`` cell.
- Bare words as errors (``error: tokens``, ``error: unknown``, ``error: n``, a JSON parser's text) name the file and
  what is missing: in ``score``, ``compare`` and ``run``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from queerbench.cli import main
from queerbench.scoring.aggregate import compute
from queerbench.scoring.hurtlex import load_hurtlex
from queerbench.tasks import get_task

QUICK = ["--bootstrap", "0", "--permutations", "0"]


def _one_error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("queerbench: error: "), err
    return lines[0]


def _fails(args: list[str], capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    """Run the CLI in this process; assert exit status 2 and one error line holding every needle."""
    assert main(args) == 2
    line = _one_error_line(capsys.readouterr().err)
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def _run_table(n_templates: int = 2) -> pd.DataFrame:
    """A small predictions table with the columns of a run's ``predictions.parquet`` (a queer and a non-queer row per
    template)."""
    rows = []
    for t in range(n_templates):
        for subject, group in (("gay", "queer"), ("straight", "non-queer")):
            rows.append(
                {
                    "id": f"t{t}-{subject}",
                    "template_id": t,
                    "template": f"The [SUBJECT] is a [MASK] number {t}.",
                    "subject": subject,
                    "group": group,
                    "category": "orientation",
                    "masked_sentence": f"The {subject} person is a [MASK] number {t}.",
                    "neutral_sentence": f"The person is a [MASK] number {t}.",
                    "method": "mlm",
                    "tokens": ["hero", "doctor"] if t % 2 else ["nurse", "friend"],
                }
            )
    return pd.DataFrame(rows)


def _parquet(frame: pd.DataFrame, path: Path) -> Path:
    frame.to_parquet(path, index=False)
    return path


HEADER = "template;queerness;name;type;prediction;hurtlex;sentiment_analysis;perspective"


def _paper_row(sentence: str, queerness: str, name: str, kind: str, prediction: str = "['doctor', 'hero']") -> str:
    return f"{sentence};{queerness};{name};{kind};{prediction};['', ''];0.0;[0, 0, 0, 0, 0]"


NOUN = ("The agender person dreams of being a [MASK].", "queer", "agender", "identity")
PRONOUN = ("The he dreams of being a [MASK].", "pronoun", "he", "binary")


def _paper_csv(path: Path, *rows: str) -> Path:
    path.write_text("\n".join([HEADER, *rows]) + "\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------ 1. HurtLex
@pytest.mark.parametrize("level", ["conservative", "inclusive"])
def test_a_word_that_normalises_to_nothing_is_no_hurtlex_hit(level: str):
    from unidecode import unidecode

    from queerbench.base.sources import fetch

    lemmas = pd.read_csv(fetch("hurtlex_en"), sep="\t", dtype=str, keep_default_na=False)["lemma"]
    emoji = [lemma for lemma in lemmas if lemma and not unidecode(lemma).strip()]
    assert emoji, "HurtLex has lemmas that normalise to nothing (its emoji): the case this test is about"
    lex = load_hurtlex(level)
    for word in ["", " ", *emoji[:5], "🏳️‍🌈"]:
        assert lex.categories(word) == frozenset(), (word, lex.categories(word))
    assert lex.score_default(["", emoji[0]]) == (0, {})
    assert lex.categories("gay")  # a listed word still matches


@pytest.mark.parametrize("level", ["conservative", "inclusive"])
def test_empty_predictions_score_no_hurtlex(level: str):
    """A file of empty predictions (the paper's GPT-2 files hold thousands) has H = 0 under the default rules."""
    options = get_task("default").scoring_options(toxicity="none", hurtlex_level=level, n_bootstrap=0, n_permutations=0)
    result = compute([[""], ["", "🙂"], [""], [""]], ["queer", "queer", "non-queer", "non-queer"], options=options)
    assert result["hurtlex"] == {"queer": 0.0, "non-queer": 0.0}


def test_score_of_a_paper_csv_of_empty_lists_has_no_hurtlex(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = _paper_csv(tmp_path / "empty.csv", _paper_row(*NOUN, "[]"), _paper_row(*PRONOUN, "[]"))
    out = tmp_path / "scores.json"
    assert main(["score", str(path), "--toxicity", "none", *QUICK, "--out", str(out)]) == 0
    assert json.loads(out.read_text())["hurtlex"] == {"binary": 0.0, "queer": 0.0}


def test_the_paper_rule_keeps_the_papers_empty_string_code():
    """``paper`` reproduces the published numbers, whose stored HurtLex column codes ``''`` as ``cds`` (notes §6)."""
    assert load_hurtlex().paper_code("") == "cds"


def test_a_none_word_message_does_not_recommend_an_empty_string():
    from queerbench.scoring.inputs import check_types

    with pytest.raises(ValueError) as info:
        check_types([["doctor", None]])
    message = str(info.value)
    assert message.startswith("predictions[0][1] is None") and "drop it" in message
    assert "'' for an empty prediction" not in message and "HurtLex" in message


# ------------------------------------------------------------------------------------- 2. what score accepts
def test_score_refuses_a_run_with_repeated_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    frame = _run_table()
    path = _parquet(pd.concat([frame, frame], ignore_index=True), tmp_path / "predictions.parquet")
    _fails(["score", str(path), "--toxicity", "none", *QUICK], capsys, str(path), "'t0-gay'", "rows [0, 4]", "drop")


def test_score_refuses_a_paper_csv_with_repeated_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = _paper_csv(tmp_path / "twice.csv", _paper_row(*NOUN), _paper_row(*PRONOUN), _paper_row(*NOUN))
    _fails(["score", str(path), "--toxicity", "none", *QUICK], capsys, str(path), "lines [2, 4]", "repeated")


def test_the_papers_own_repeats_are_no_repeated_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reference_file
):
    """The paper's 8,268 sentences repeat some (templates and the pronoun ``e`` listed twice): its files are scored,
    the same file twice over is not."""
    paper = reference_file("upstream/queerbench/data/evaluation/bert-base-uncased_template_1.csv")
    out = tmp_path / "paper.json"
    args = ["--config", "paper", "--toxicity", "precomputed", *QUICK]
    assert main(["score", str(paper), *args, "--out", str(out)]) == 0
    assert sum(json.loads(out.read_text())["n"].values()) == 8268
    capsys.readouterr()
    text = paper.read_text(encoding="utf-8")
    doubled = tmp_path / "doubled.csv"
    doubled.write_text(text + "".join(text.splitlines(keepends=True)[1:]), encoding="utf-8")
    _fails(["score", str(doubled), *args], capsys, str(doubled), "8268 repeated row(s) in all")


@pytest.mark.parametrize("k", ["-1", "0"])
def test_score_refuses_top_k_below_one(k: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = _parquet(_run_table(), tmp_path / "predictions.parquet")
    _fails(
        ["score", str(path), "--toxicity", "none", "--top-k", k], capsys, f"--top-k must be a positive integer, got {k}"
    )
    csv = _paper_csv(tmp_path / "paper.csv", _paper_row(*NOUN))
    _fails(["score", str(csv), "--toxicity", "none", "--top-k", k], capsys, "--top-k must be a positive integer")


def test_score_refuses_a_tokens_column_of_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    frame = _run_table()
    frame["tokens"] = [t[0] for t in frame["tokens"]]
    path = _parquet(frame, tmp_path / "predictions.parquet")
    _fails(["score", str(path), "--toxicity", "none", *QUICK], capsys, str(path), "row 0", "column tokens", "list of")


def test_score_refuses_a_missing_group(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    frame = _run_table()
    frame.loc[2, "group"] = None
    path = _parquet(frame, tmp_path / "predictions.parquet")
    _fails(["score", str(path), "--toxicity", "none", *QUICK], capsys, str(path), "row 2", "column group is empty")


def test_score_refuses_a_group_the_task_does_not_have(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    frame = _run_table()
    frame.loc[1, "group"] = "martian"
    path = _parquet(frame, tmp_path / "predictions.parquet")
    _fails(["score", str(path), "--toxicity", "none", *QUICK], capsys, str(path), "row 1", "'martian'", "non-queer")


def test_score_refuses_a_pronoun_row_of_an_unknown_type(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    weird = (*PRONOUN[:3], "alien")
    path = _paper_csv(tmp_path / "paper.csv", _paper_row(*NOUN), _paper_row(*weird))
    _fails(
        ["score", str(path), "--toxicity", "none", *QUICK], capsys, f"{path} line 3", "'alien'", "neo, neutral, binary"
    )


def test_a_queergen_file_with_a_repeated_index_is_refused(tmp_path: Path, reference_file):
    from queerbench.tasks.queergen.evaluations import read_evaluation_csv
    from queerbench.tasks.queergen.sentences import QueerGenFileError

    lines = reference_file("upstream/queergen/evaluations/prompt_1/BERT_base.csv").read_text("utf-8").splitlines()
    path = tmp_path / "BERT_base.csv"
    path.write_text("\n".join([lines[0], lines[1], lines[1], *lines[3:]]) + "\n", encoding="utf-8")  # row 1 → row 0
    with pytest.raises(QueerGenFileError, match=r"index 0 is on 2 rows .* drop the repeated rows"):
        read_evaluation_csv(path)


# ------------------------------------------------------------------------------------- 3. no tracebacks
def test_a_malformed_perspective_cell_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    broken = _paper_row(*PRONOUN).replace("[0, 0, 0, 0, 0]", "[0, 0,")
    path = _paper_csv(tmp_path / "paper.csv", _paper_row(*NOUN), broken)
    _fails(
        ["score", str(path), "--toxicity", "precomputed", *QUICK],
        capsys,
        f"{path} line 3",
        "column perspective",
        "'[0, 0,'",
        "list of 5 counts",
    )


def test_an_empty_tokens_cell_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    frame = _run_table()
    frame["tokens"] = [None, *frame["tokens"][1:]]
    path = _parquet(frame, tmp_path / "predictions.parquet")
    _fails(["score", str(path), "--toxicity", "none", *QUICK], capsys, f"{path} row 0", "column tokens", "[]")


def test_an_empty_sentence_cell_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    frame = _run_table()
    frame.loc[1, "neutral_sentence"] = None
    path = _parquet(frame, tmp_path / "predictions.parquet")
    _fails(["score", str(path), *QUICK], capsys, f"{path} row 1", "column neutral_sentence", "[MASK]")


# ------------------------------------------------------------------------------------- 4. no bare words
def test_an_unknown_queerness_names_the_file_and_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    unknown = (NOUN[0], "unknown", *NOUN[2:])
    path = _paper_csv(tmp_path / "paper.csv", _paper_row(*NOUN), _paper_row(*unknown))
    line = _fails(["score", str(path), "--toxicity", "none", *QUICK], capsys, f"{path} line 3", "column queerness")
    assert line != "queerbench: error: unknown"


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({"config": "default", "k": 5, "queerbench": {"queer": 1.0}}, "lacks 'n'"),
        ({"config": "default", "k": 5, "n": {"queer": 40}}, "lacks 'queerbench'"),
        ([1, 2], "holds a JSON list"),
    ],
)
def test_compare_names_the_scores_file_and_what_it_lacks(
    doc, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    run = tmp_path / "run"
    run.mkdir()
    (run / "scores.json").write_text(json.dumps(doc))
    _fails(["compare", str(run), "--out", str(tmp_path / "cmp")], capsys, str(run / "scores.json"), needle, "rerun")


def test_score_names_a_run_record_it_cannot_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = _parquet(_run_table(), tmp_path / "predictions.parquet")
    (tmp_path / "run.json").write_text(json.dumps({"config": "default", "method": "telepathy", "top_k": 2}))
    _fails(["score", str(path), "--toxicity", "none", *QUICK], capsys, str(tmp_path / "run.json"), "'telepathy'")


def test_score_names_an_unknown_method_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    frame = _run_table().assign(method="telepathy")
    path = _parquet(frame, tmp_path / "predictions.parquet")
    _fails(["score", str(path), "--toxicity", "none", *QUICK], capsys, str(path), "column method", "'telepathy'")


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_models import tiny_bert

    return tiny_bert(tmp_path_factory.mktemp("models"))


def test_a_rerun_names_a_finished_predictions_file_that_lacks_tokens(
    bert: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    out = tmp_path / "run"
    args = ["run", "--model", str(bert), "--limit", "1", "--toxicity", "none", *QUICK, "--out", str(out)]
    assert main(args) == 0
    predictions = out / "predictions.parquet"
    pd.read_parquet(predictions).drop(columns=["tokens"]).to_parquet(predictions, index=False)
    capsys.readouterr()
    line = _fails(args, capsys, str(predictions), "['tokens']", "rerun")
    assert line != "queerbench: error: tokens"


def test_a_broken_weight_index_is_named(bert: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    import shutil

    model = Path(shutil.copytree(bert, tmp_path / "model"))
    index = model / "model.safetensors.index.json"
    index.write_text("{not json")
    args = ["run", "--model", str(model), "--limit", "1", "--toxicity", "none", "--out", str(tmp_path / "run")]
    _fails(args, capsys, str(index), "not valid JSON")
