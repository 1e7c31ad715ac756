"""``queerbench check-predictions``: agreement with the paper's prediction CSVs, and what it says when the
config or k differ."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd


# ----------------------------------------------------------------------------------------- prediction check
def test_check_predictions_says_when_config_and_k_differ(tmp_path: Path):
    from queerbench.tasks.queerbench.prediction_check import check_predictions

    run = tmp_path / "run"
    run.mkdir()
    sentences = ["The gay person is a [MASK].", "The person is a [MASK]."]
    pd.DataFrame({"id": ["a", "b"], "masked_sentence": sentences, "tokens": [["x"] * 5, ["y"] * 5]}).to_parquet(
        run / "predictions.parquet"
    )
    (run / "run.json").write_text(json.dumps({"config": "default", "top_k": 5}))
    csv = tmp_path / "bert-base-uncased_template_1.csv"
    pd.DataFrame({"template": sentences, "prediction": ["['z']", "['y']"]}).to_csv(csv, sep=";", index=False)
    report = check_predictions(run / "predictions.parquet", csv)
    assert report["run_config"] == "default" and report["run_top_k"] == 5 and report["k"] == 1
    assert any("config 'default'" in w and "--config paper" in w for w in report["warnings"])
    assert any("top-5" in w and "top-1" in w and "--top-k 1" in w for w in report["warnings"])
    (run / "run.json").write_text(json.dumps({"config": "paper", "top_k": 1}))
    assert check_predictions(run / "predictions.parquet", csv)["warnings"] == []
