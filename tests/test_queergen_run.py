"""`queerbench run --config queergen` on a tiny masked LM: QueerGen's sentences "{marked} [MASK].", top-k at the
mask, the QueerBench score per QueerGen group and QueerGen's own scores in scores.json; scoring the run again."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from queerbench.cli import main
from tests.tiny_models import tiny_bert


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    bert = tiny_bert(tmp_path_factory.mktemp("models"))
    out = tmp_path_factory.mktemp("runs") / "qg"
    code = main(
        ["run", "--model", str(bert), "--config", "queergen", "--top-k", "3", "--limit", "2", "--toxicity",
         "embedded", "--bootstrap", "0", "--permutations", "0", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    return out


def test_run_predicts_queergen_sentences_and_scores_both_ways(run_dir: Path) -> None:
    pred = pd.read_parquet(run_dir / "predictions.parquet")
    assert len(pred) == 2 * 310  # two templates × 10 subjects × (unmarked + 30 markers)
    assert pred["masked_sentence"].str.endswith(" [MASK].").all()
    assert set(pred["group"]) == {"unmarked", "non-queer", "queer"}
    assert all(len(t) == 3 and all(w for w in t) for t in pred["tokens"])
    scores = json.loads((run_dir / "scores.json").read_text())
    assert scores["config"] == "queergen" and set(scores["queerbench"]) == {"unmarked", "non-queer", "queer"}
    qg = scores["queergen"]
    assert qg["k"] == 3 and qg["n"] == {"unmarked": 20, "non-queer": 200, "queer": 400}
    assert qg["perspective_attributes"] == [
        "TOXICITY",
        "SEVERE_TOXICITY",
        "INSULT",
        "IDENTITY_ATTACK",
        "PROFANITY",
        "THREAT",
    ]
    assert qg["scorers"]["perspective"]["input"] == "{unmarked} {word}" and qg["scorers"]["regard"] == {"name": "none"}
    assert qg["diversity"]["queer"]["n_batches"] == 4 and 0 < qg["diversity"]["queer"]["mean"] <= 100
    assert -1 <= qg["vader"]["queer"]["mean"] <= 1 and 0 <= qg["perspective"]["queer"]["mean"] <= 1


def test_score_a_queergen_run_again(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "again.json"
    args = ["score", str(run_dir / "predictions.parquet"), "--config", "queergen", "--toxicity", "none"]
    assert main([*args, "--top-k", "1", "--bootstrap", "0", "--permutations", "0", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["queergen"]["k"] == 1 and "perspective" not in result["queergen"]
    assert main([*args, "--regard", "precomputed"]) == 2  # a run has no stored regard values
