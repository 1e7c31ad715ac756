"""`queerbench toxicity agreement`: each published evaluation file read by its own protocol, each distinct text scored
once, and the agreement figures (κ at > 0.5, AUC, precision, recall) computed as scikit-learn computes them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import cohen_kappa_score, roc_auc_score

from queerbench.base.sources import fetch
from queerbench.cli import main
from queerbench.scoring.agreement import agreement_stats
from queerbench.scoring.published_files import read_evaluation_file
from queerbench.scoring.toxicity import get_toxicity_scorer

ATTRS = ("TOXICITY", "IDENTITY_ATTACK", "INSULT", "PROFANITY", "THREAT")


def test_agreement_stats_match_scikit_learn() -> None:
    rng = np.random.default_rng(3)
    truth = rng.random(400) ** 3
    prob = np.clip(truth + rng.normal(0, 0.25, 400), 0, 1)
    stats = agreement_stats(truth, prob)
    flags, pred = truth > 0.5, prob > 0.5
    assert stats["kappa"] == pytest.approx(cohen_kappa_score(flags, pred))
    assert stats["auc"] == pytest.approx(roc_auc_score(flags, prob))
    assert stats["precision"] == pytest.approx((flags & pred).sum() / pred.sum())
    assert stats["recall"] == pytest.approx((flags & pred).sum() / flags.sum())
    assert (stats["positives"], stats["scorer_positives"], stats["n"]) == (flags.sum(), pred.sum(), 400)


def test_agreement_stats_say_none_where_a_figure_does_not_exist() -> None:
    stats = agreement_stats(np.zeros(5), np.zeros(5))
    assert stats["auc"] is None and stats["precision"] is None and stats["recall"] is None
    assert stats["kappa"] is None  # both sides all negative: chance agreement is total
    assert agreement_stats(np.array([0.9, 0.1]), np.array([0.8, 0.2]))["kappa"] == pytest.approx(1.0)


def _slice(source: str, out: Path, rows: int, sep: str) -> Path:
    frame = pd.read_csv(fetch(source), sep=sep, dtype=str, keep_default_na=False)
    frame.head(rows).to_csv(out, sep=sep, index=False)
    return out


def test_each_file_is_read_by_its_own_protocol(tmp_path: Path) -> None:
    qb = _slice("queerbench_paper_evaluation_bert_base_uncased_template_1", tmp_path / "qb.csv", 30, ";")
    qg = _slice("queergen_eval_gpt_4o_mini", tmp_path / "qg.csv", 31, ",")
    rows, _ = read_evaluation_file(qb)
    raw = pd.read_csv(qb, sep=";")
    word = raw["prediction"].iloc[0].strip("[]'")
    assert rows["text"].iloc[0] == raw["template"].iloc[0].replace("[MASK]", word)  # the subject named
    rows, _ = read_evaluation_file(qg)
    raw = pd.read_csv(qg)
    assert rows["text"].iloc[1] == f"{raw['Unmarked'].iloc[1]} {raw['prediction'].iloc[1]}"  # no marker, no stop
    assert rows["perspective_INSULT"].iloc[1] == pytest.approx(raw["Perspective INSULT"].iloc[1])


def test_agreement_command_writes_the_report_and_one_row_per_distinct_text(tmp_path: Path) -> None:
    qb = _slice("queerbench_paper_evaluation_bert_base_uncased_template_1", tmp_path / "qb.csv", 60, ";")
    qg = _slice("queergen_eval_gpt_4o_mini", tmp_path / "qg.csv", 62, ",")
    out = tmp_path / "agree"
    assert main(["toxicity", "agreement", str(qb), str(qg), "--toxicity", "embedded", "--out", str(out)]) == 0
    texts = pd.read_parquet(out / "texts.parquet")
    for attr in ATTRS:
        assert f"scorer_{attr}" in texts.columns and f"perspective_{attr}" in texts.columns
    assert not texts.duplicated(["file", "text"]).any()
    qg_texts = texts[texts["file"] == str(qg)]
    assert len(qg_texts) == len({t for t in read_evaluation_file(qg)[0]["text"]}) < 62  # markers share a text
    scorer = get_toxicity_scorer("embedded")
    again = scorer.score(texts["text"].tolist())
    assert np.allclose(texts["scorer_TOXICITY"], again["TOXICITY"])
    report = json.loads((out / "agreement.json").read_text())
    assert set(report["files"]) == {str(qb), str(qg)}
    assert report["files"][str(qb)]["protocol"] == "full" and report["files"][str(qg)]["protocol"] == "blind"
    pooled = report["pooled"]["attributes"]["TOXICITY"]
    expected = agreement_stats(texts["perspective_TOXICITY"].to_numpy(), texts["scorer_TOXICITY"].to_numpy())
    assert pooled == pytest.approx(expected, nan_ok=True) or pooled == expected
    assert report["scorer"]["name"] == "embedded" and report["pooled"]["texts"] == len(texts)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("a,b\n1,2\n", "lacks the column(s)"),
        (
            "template;prediction;perspective\nThe [MASK] runs.;['dog', 'cat'];[0, 0, 0, 0, 0]\n",
            "holds several predicted words",
        ),
        ("template;prediction;perspective\nThe [MASK] runs.;['dog'];[0, 0]\n", "must hold 5 numbers"),
    ],
)
def test_a_file_of_another_shape_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, expected: str
) -> None:
    path = tmp_path / "x.csv"
    path.write_text(content)
    assert main(["toxicity", "agreement", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err and str(path) in err
    assert not (tmp_path / "o").exists()  # nothing written


def test_an_unknown_scorer_and_a_file_named_twice_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    qb = _slice("queerbench_paper_evaluation_bert_base_uncased_template_1", tmp_path / "qb.csv", 5, ";")
    assert main(["toxicity", "agreement", str(qb), "--toxicity", "banana", "--out", str(tmp_path / "o")]) == 2
    assert "unknown toxicity scorer 'banana'" in capsys.readouterr().err
    assert main(["toxicity", "agreement", str(qb), str(qb), "--out", str(tmp_path / "o")]) == 2
    assert "named twice" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
