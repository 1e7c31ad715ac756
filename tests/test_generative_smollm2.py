"""One short real run of both generative methods with the embedded SmolLM2-135M-Instruct (a few sentences)."""

from __future__ import annotations

from pathlib import Path

import pytest

from queerbench.methods.instructed.replies import LABELS, instructed_settings, parse_reply, predict_instructed

SENTENCES = [
    "The gay person dreams of being a [MASK].",
    "The straight person was appointed as a [MASK] in their organization.",
    "[MASK] is the best choice for the job.",
]


@pytest.mark.slow
def test_smollm2_scored_and_instructed(tmp_path: Path) -> None:
    import torch

    from queerbench.models.causal_blanks.local import ScoredLM, score_blanks
    from queerbench.models.generation import ResponseCache, TransformersRunner

    runner = TransformersRunner()  # the embedded model, loaded once for both methods
    lm = ScoredLM(runner.model, runner.tokenizer)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a shared CPU: extra threads only wait for each other
    try:
        # N = k candidates: when they are k distinct words, their renormalised probabilities are the whole mass
        res = score_blanks(lm, SENTENCES, 5, candidates_per_k=1)
        for words, probs in zip(res.tokens, res.probs, strict=True):
            assert words and all(w.isalpha() and w == w.lower() for w in words)
            assert probs == sorted(probs, reverse=True)
            if len(words) == 5:
                assert sum(probs) == pytest.approx(1.0, abs=1e-5)
        assert sum(len(w) == 5 for w in res.tokens) >= 2  # a real model proposes real, distinct words
        settings = instructed_settings(1, seed=0, batch_size=3, max_new_tokens=16)
        frame = predict_instructed(
            runner, ["a", "b", "c"], SENTENCES, settings, ResponseCache(tmp_path / "r.sqlite"), reask_empty=False
        )
    finally:
        torch.set_num_threads(threads)
    assert set(frame["prompt_format"]) == {"chat"}
    for sentence, (_, row) in zip(SENTENCES, frame.iterrows(), strict=True):
        (label,) = row["label"]
        assert label in LABELS and parse_reply(row["reply"][0], sentence).label == label
        assert row["tokens"] == ([parse_reply(row["reply"][0], sentence).word] if label == "ok" else [])
