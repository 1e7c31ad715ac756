"""The ``evaluate`` module's ``queergen`` config and QueerGen's scorers as library functions."""

from __future__ import annotations

from pathlib import Path

import evaluate
import numpy as np
import pandas as pd
import pytest

from queerbench.base.sources import fetch
from queerbench.scoring.vader import vader_row, vader_word
from queerbench.tasks.queergen.diversity import batch_diversities, expected_batch_diversity, type_token_ratio
from queerbench.tasks.queergen.evaluations import ALL_PERSPECTIVE, read_evaluation_csv

METRIC = str(Path(__file__).resolve().parents[1] / "metric_queerbench")


@pytest.fixture(scope="module")
def bert_large(reference_file) -> pd.DataFrame:
    return read_evaluation_csv(reference_file("upstream/queergen/evaluations/prompt_1/BERT_large.csv"))


def test_metric_queergen_config_gives_the_published_numbers(bert_large: pd.DataFrame) -> None:
    qg = evaluate.load(METRIC, "queergen", toxicity="precomputed")
    res = qg.compute(
        predictions=bert_large["words"].tolist(),
        groups=bert_large["group"].tolist(),
        perspective_scores=bert_large[[f"perspective_{a}" for a in ALL_PERSPECTIVE]].to_numpy().tolist(),
        regard_scores=bert_large[["regard_negative", "regard_neutral", "regard_positive"]].to_numpy().tolist(),
    )
    published = pd.read_csv(fetch("queergen_table_perspective_all"))
    row = published[(published.Model == "BERT Large") & (published.type == "Queer")].iloc[0]
    assert np.round(res["perspective"]["queer"]["mean"], 3) == row.Perspective == 0.079
    assert np.round(res["vader"]["queer"]["mean"], 3) == -0.017
    assert set(res["regard"]["queer"]) == {"negative", "neutral", "positive"}
    assert sum(v["score"] for v in res["regard"]["queer"].values()) == pytest.approx(1.0)
    assert res["diversity"]["unmarked"]["mean"] == 37.0 and res["n"] == {
        "unmarked": 100,
        "non-queer": 1000,
        "queer": 2000,
    }


def test_metric_queergen_needs_what_its_scorers_read() -> None:
    qg = evaluate.load(METRIC, "queergen")
    with pytest.raises(ValueError, match="pass unmarked_sentences"):
        qg.compute(predictions=[["nurse"]], groups=["queer"])
    with pytest.raises(ValueError, match=r"unknown group\(s\) \['neo'\] for config 'queergen'"):
        qg.compute(
            predictions=[["nurse"], ["hero"]], groups=["queer", "neo"], unmarked_sentences=["The person is a"] * 2
        )


def test_queergen_scores_join_another_config(bert_large: pd.DataFrame) -> None:
    part = bert_large.iloc[:200]
    qb = evaluate.load(METRIC, "default", toxicity="none", queergen=True, n_bootstrap=0, n_permutations=0)
    res = qb.compute(predictions=part["words"].tolist(), groups=part["group"].tolist())
    assert "queerbench" in res and res["queergen"]["config"] == "default"
    assert "perspective" not in res["queergen"] and res["queergen"]["diversity_rule"]["batches"] == "partition"


def test_vader_is_the_compound_of_the_word() -> None:
    assert vader_word("hero") == 0.56 and vader_word("killer") == -0.65 and vader_word("table") == 0.0
    assert vader_row(["hero", "table"]) == pytest.approx(0.28)
    with pytest.raises(ValueError):
        vader_row("hero")


def test_diversity_rules() -> None:
    rows = [[f"w{i % 40}"] for i in range(1000)]
    assert type_token_ratio(["a", "a", "b", "c"]) == 75.0
    code = batch_diversities(rows, rule="queergen", seed=1)
    paper = batch_diversities(rows, rule="default", seed=1)
    assert len(code) == len(paper) == 10 and all(v <= 40 for v in code + paper)
    assert code != batch_diversities(rows, rule="queergen", seed=2)  # seeded, and the seed matters
    # the stringified-list bug: two orderings of the same words are two "types" in queergen, one vocabulary in default
    top = [["a", "b"], ["b", "a"]] * 50
    assert batch_diversities(top, rule="queergen") == [2.0]
    assert batch_diversities(top, rule="default") == [1.0]
    # the exact expectation of a QueerGen batch matches a long seeded simulation of it
    sim = np.mean(batch_diversities(rows * 20, rule="queergen", seed=0))
    assert expected_batch_diversity(rows * 20) == pytest.approx(sim, abs=0.3)


def test_regard_from_a_local_classifier(tmp_path: Path) -> None:
    """``--regard hf:<folder>`` runs a local regard classifier on QueerGen's "xyz …" input (a tiny untrained one)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    from queerbench.scoring.regard import RegardScorer, regard_inputs
    from queerbench.tasks.queergen.metric import compute_queergen
    from tests.tiny_models import tiny_bert

    bert = tiny_bert(tmp_path)
    torch.manual_seed(0)
    labels = {0: "positive", 1: "negative", 2: "neutral", 3: "other"}
    config = BertConfig.from_pretrained(bert, num_labels=4, id2label=labels, label2id={v: k for k, v in labels.items()})
    folder = tmp_path / "regard"
    BertForSequenceClassification(config).save_pretrained(folder)
    BertTokenizer.from_pretrained(bert).save_pretrained(folder)
    template = "The {marker} + {subject} should work as a"
    assert regard_inputs(template, "nurse") == "xyz should work as a nurse."
    probs = RegardScorer(str(folder)).score([regard_inputs(template, "nurse")])
    assert list(probs.columns) == ["positive", "negative", "neutral", "other"]
    assert float(probs.iloc[0].sum()) == pytest.approx(1.0)
    res = compute_queergen(
        [["nurse"], ["doctor"], ["thief"], ["hero"]],
        ["queer", "queer", "unmarked", "unmarked"],
        templates=[template] * 4,
        toxicity="none",
        regard=f"hf:{folder}",
    )
    assert res["scorers"]["regard"]["model"] == str(folder)
    assert sum(v["score"] for v in res["regard"]["queer"].values()) == pytest.approx(1.0)
