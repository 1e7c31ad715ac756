"""What the generative methods share: the loading checks of a local causal LM made before the run claims its folder,
and :class:`GenerativeMethod`, the facts and report section of a run whose words come from a generative model."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from queerbench.base.redact import redact_url
from queerbench.methods.base import Method
from queerbench.models.generation.settings import DEFAULT_MODEL

if TYPE_CHECKING:
    from queerbench.methods.base import RunSettings

__all__ = ["GenerativeMethod", "preflight_local"]


def preflight_local(options: RunSettings) -> None:
    """A local causal LM's checks before the run claims its folder (config only: kind, device, memory)."""
    if options.endpoint:
        return
    from queerbench.models.generation.loading import check_causal_lm_loads

    check_causal_lm_loads(
        None if options.model == DEFAULT_MODEL else options.model,
        device=options.model_spec.device,
        dtype=options.model_spec.dtype,
        revision=options.revision,
        device_map=options.model_spec.device_map,
    )


class GenerativeMethod(Method):
    """A method whose words come from a generative model: its run records the endpoint, the fingerprint the
    predictor wrote, the decoding and the prompt, and its report opens with how the words were obtained."""

    def run_facts(self, options: RunSettings, meta: dict[str, Any]) -> dict[str, Any]:
        """Endpoint, fingerprint, decoding, prompt and its format (from the predictor's metadata)."""
        return {
            "endpoint": redact_url(options.endpoint) if options.endpoint else None,
            "fingerprint": meta.get("fingerprint"),
            "decoding": meta.get("decoding"),
            "prompt": meta.get("prompt"),
            "prompt_format": meta.get("prompt_format") or (meta.get("decoding") or {}).get("prompt_format"),
        }

    def how(self, meta: dict[str, Any]) -> list[str]:
        """The report's lines on how the words were obtained (a method says its own)."""
        return []

    def report_section(self, meta: dict[str, Any], summary: dict[str, Any] | None) -> str | None:
        """``## Generative method``: the fingerprint, how the words were obtained and, when the replies were parsed,
        the parse and refusal rates per group with their n (group scores use the ``ok`` answers only)."""
        lines = [f"## Generative method: `{meta.get('method')}`", ""]
        fp = meta.get("fingerprint") or {}
        lines.append(f"- model fingerprint: `{json.dumps(fp, sort_keys=True)[:300]}`")
        lines += self.how(meta)
        lines.append("")
        if summary:
            labels = summary["labels"]
            lines += [
                "Parse and refusal rates per group (share of replies; n = replies). Scores below use the `ok` answers "
                "only (n scored = sentences with at least one).",
                "",
                "| group | n | n scored | " + " | ".join(labels) + " | distinct words / sentence |",
                "|---|" + "---|" * (len(labels) + 3),
            ]
            for group, g in [*summary["groups"].items(), ("all", summary["overall"])]:
                rates = " | ".join(
                    "—" if g["rates"][lab] is None else f"{100 * g['rates'][lab]:.1f}%" for lab in labels
                )
                distinct = "—" if g["mean_distinct"] is None else f"{g['mean_distinct']:.2f}"
                lines.append(f"| {group} | {g['n']} | {g['n_scored']} | {rates} | {distinct} |")
            lines.append("")
        return "\n".join(lines)
