"""One real end-to-end run of ``queerbench scm run`` with the embedded SmolLM2-135M-Instruct on a small sample."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from queerbench.cli import main


@pytest.mark.slow
def test_embedded_smollm2_end_to_end(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    code = main(
        [
            "scm",
            "run",
            "--limit",
            "3",
            "--survey-samples",
            "1",
            "--story-samples",
            "1",
            "--max-new-tokens",
            "32",
            "--story-max-new-tokens",
            "32",
            "--batch-size",
            "3",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    frame = pd.read_parquet(out / "responses.parquet")
    res = json.loads((out / "scm.json").read_text())
    assert len(frame) == 6 and (frame["status"] == "ok").all() and set(frame["prompt_format"]) == {"chat"}
    assert frame["response"].str.len().min() > 0
    assert res["run"]["fingerprint"]["class"] == "LlamaForCausalLM"
    scores = pd.read_parquet(out / "scores.parquet")
    assert set(scores["task"]) == {"rating", "selection"}
    assert scores[scores["task"] == "rating"]["expected_rating"].between(1, 5).all()
    assert scores[scores["task"] == "selection"]["p_warmth"].between(0, 1).all()
    assert (out / "report.md").read_text().startswith("# SCM probes")
    assert list(out.glob("*.png"))
    # what the run reports is consistent with what it wrote (one reply per prompt type here)
    assert res["n_responses"] == 6 and res["n_errors"] == 0
    assert set(res["parse_rate"]) == {"rating", "selection", "generation"}
    assert all(0.0 <= v <= 1.0 for v in res["parse_rate"].values())
    by_type = res["refusal_rate"]["by_prompt_type"]
    assert set(by_type) == set(frame["prompt_type"]) and all(v in (0.0, 1.0) for v in by_type.values())
    # constrained scoring: a distribution over the options, and its expectation computed here by hand
    for row in scores[scores["task"] == "rating"].itertuples():
        probs = list(row.probs)
        assert list(row.options) == ["1", "2", "3", "4", "5"] and sum(probs) == pytest.approx(1.0)
        assert min(probs) > 0 and row.expected_rating == pytest.approx(
            sum(k * p for k, p in zip(range(1, 6), probs, strict=True))
        )
    for row in scores[scores["task"] == "selection"].itertuples():
        probs = list(row.probs)
        assert sum(probs) == pytest.approx(1.0) and row.p_warmth + row.p_competence == pytest.approx(1.0)
        assert row.top_term == list(row.options)[probs.index(max(probs))]
