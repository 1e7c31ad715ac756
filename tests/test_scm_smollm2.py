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
    print(
        json.dumps(
            {
                "parse_rate": res["parse_rate"],
                "refusals": {k: res["refusals"][k]["by_prompt_type"] for k in ("survey", "story")},
                "expected_rating": scores[["id", "expected_rating"]].to_dict("records"),
                "responses": frame[["id", "response"]].to_dict("records"),
            },
            indent=1,
        )
    )
