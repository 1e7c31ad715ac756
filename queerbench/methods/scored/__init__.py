"""``scored``: candidate words ranked by whole-sentence probability, on a local causal LM or a completions endpoint.

:data:`SCORED` is the method's registry entry: its predictor (:mod:`.predictor`: top-k ``fill_mask`` requests, which a
local causal LM and a completions endpoint that echoes log-probabilities answer) and how its report says what it did.
"""

from __future__ import annotations

from typing import Any

from queerbench.methods.common import GenerativeMethod
from queerbench.models.generation.settings import DEFAULT_MODEL

__all__ = ["SCORED", "ScoredMethod"]


class ScoredMethod(GenerativeMethod):
    """``scored``: the report says how candidates were proposed and ranked."""

    def how(self, meta: dict[str, Any]) -> list[str]:
        """Candidates, ranking and prompt format."""
        dec = meta.get("decoding") or {}
        return [
            f"- candidates: the top {dec.get('candidates')} word-start tokens after the text before the blank, each "
            f"extended greedily to a whole word (at most {dec.get('max_word_tokens')} tokens)",
            "- ranking: log-probability of the whole sentence with the word in place (the text after the blank "
            "counts); top-k = the k best distinct lowercased words, probabilities renormalised over the candidates",
            f"- prompt format: `{meta.get('prompt_format')}` (the plain sentence after a start token)",
        ]


SCORED = ScoredMethod(
    "scored",
    default_model=DEFAULT_MODEL,
    backends={
        "causal_lm": "queerbench.methods.scored.predictor:ScoredPredictor",
        "completions_endpoint": "queerbench.methods.scored.predictor:ScoredPredictor",
    },
    key_fields=("endpoint",),
    generative=True,
    description="candidate words ranked by whole-sentence probability",
    auto_on=("causal_lm",),
)
