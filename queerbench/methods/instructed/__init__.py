"""``instructed``: a chat model is asked for the word; its replies are parsed and labelled (:mod:`.replies`).

:data:`INSTRUCTED` is the method's registry entry: one predictor for a local chat model and a chat endpoint
(:mod:`.predictor`), and the work that is this method's alone — ``k`` replies per sentence, the parse and refusal
rates of its replies, the ``k`` its scores report, and the report of a run none of whose replies was one word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from queerbench.methods.common import GenerativeMethod
from queerbench.models.generation.settings import DEFAULT_MODEL

if TYPE_CHECKING:
    from queerbench.methods.base import RunSettings

__all__ = ["INSTRUCTED", "InstructedMethod"]


class InstructedMethod(GenerativeMethod):
    """``instructed``: ``k`` replies per sentence, parsed to one word each."""

    def key_settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        """The prompt and reply length by what they mean: left out means the data file's defaults."""
        from queerbench.methods.instructed.replies import load_prompts

        prompts = load_prompts()
        out = super().key_settings(settings)
        out["prompt_id"] = out.get("prompt_id") or prompts["default_prompt"]
        out["max_new_tokens"] = int(out.get("max_new_tokens") or prompts["decoding"]["max_new_tokens"])
        return out

    def check_settings(self, settings: dict[str, Any]) -> None:
        """The prompt must be one of the prompts file's; at least one new token per reply."""
        from queerbench.methods.instructed.replies import load_prompts

        prompt_id, max_new_tokens = settings.get("prompt_id"), settings.get("max_new_tokens")
        if prompt_id is not None and prompt_id not in load_prompts()["prompts"]:
            known = ", ".join(load_prompts()["prompts"])
            raise ValueError(f"unknown prompt id {prompt_id!r} (--prompt); choose one of {known}")
        if max_new_tokens is not None and max_new_tokens < 1:
            raise ValueError(f"--max-new-tokens must be at least 1, got {max_new_tokens}")

    def calls_per_sentence(self, options: RunSettings) -> int:
        """``k`` replies per sentence."""
        return options.top_k

    def summarize(self, predictions: pd.DataFrame) -> dict[str, Any] | None:
        """Parse and refusal rates per group (when the replies were parsed)."""
        from queerbench.methods.instructed.replies import parse_summary

        return parse_summary(predictions) if "label" in predictions.columns else None

    def k_reported(self, predictions: pd.DataFrame, k: int | None, scored_k: int) -> int:
        """The replies asked per sentence (capped by ``k``): the run asked for ``k`` and scores only the one-word
        ones, so it is top-``k``, not top-<most words any sentence got>."""
        if "reply" not in predictions:
            return scored_k
        asked = max(len(r) for r in predictions["reply"])
        return min(k, asked) if k else asked

    def how(self, meta: dict[str, Any]) -> list[str]:
        """The endpoint or local model, the prompt and the decoding."""
        dec = meta.get("decoding") or {}
        prompt = str(meta.get("prompt") or "").replace("|", "\\|")
        return [
            f"- endpoint: `{meta.get('endpoint')}`" if meta.get("endpoint") else "- local chat model",
            f"- prompt (one user turn, no system prompt; format `{meta.get('prompt_format')}`): `{prompt}`",
            f"- decoding: {dec.get('kind')}, temperature {dec.get('temperature')}, top-p {dec.get('top_p')}, "
            f"at most {dec.get('max_new_tokens')} new tokens, seed {dec.get('seed')}; empty replies asked again up "
            f"to {dec.get('empty_reasks')} times",
        ]

    def unscored_report(self, meta: dict[str, Any], summary: dict[str, Any] | None) -> str:
        """``report.md`` of a run in which no reply was parsed to one word: its parse and refusal rates are the
        result (``meta``: the run record's model, config, top_k, n_sentences, limit, signature and settings)."""
        from queerbench import __version__
        from queerbench.reporting.report import CONTENT_NOTE, sentences_note

        return "\n".join(
            [
                f"# QueerBench report: `{meta['model']}`",
                "",
                CONTENT_NOTE,
                "",
                f"- config: `{meta['config']}`, top-k = {meta['top_k']}, sentences = {meta['n_sentences']}"
                + sentences_note(meta),
                *([f"- signature: `{meta['signature']}`"] if meta.get("signature") else []),
                f"- queerbench {__version__}",
                "",
                self.report_section(meta, summary) or "",
                "## Scores",
                "",
                "**No sentence could be scored**: no reply was parsed to one word (see the labels above and the raw "
                "replies in `predictions.parquet`). The parse and refusal rates are this run's result.",
                "",
            ]
        )


INSTRUCTED = InstructedMethod(
    "instructed",
    default_model=DEFAULT_MODEL,
    backends={
        "causal_lm": "queerbench.methods.instructed.predictor:InstructedPredictor",
        "chat_endpoint": "queerbench.methods.instructed.predictor:InstructedPredictor",
    },
    key_fields=("endpoint", "prompt_id", "max_new_tokens", "seed"),  # the seed: it seeds the sampled replies
    settings={"prompt_id": "--prompt", "max_new_tokens": "--max-new-tokens"},
    generative=True,
    description="a chat model is asked for the word",
    auto_on=("chat_endpoint",),
    needs_chat=True,
)
