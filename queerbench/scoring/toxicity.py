"""Toxicity scorers for the QueerBench ``P`` component, built by name (the registry).

The paper scored completed sentences with Google's Perspective API. That API is sunset after 2026 and cannot be
reached offline, so four interchangeable scorers implement :class:`~queerbench.scoring.toxicity_base.ToxicityScorer`:

- ``embedded`` (default; :mod:`queerbench.scoring.toxicity_embedded`): the Jigsaw BiLSTM shipped in the PyPI wheel
  ``toxic-comment-classifier`` 0.3.0, run in torch; fully offline.
- ``surrogate`` (:mod:`queerbench.scoring.toxicity_surrogate`): Perspective's attributes predicted by a head fitted on
  the papers' published files on first use (offline features); reads each text with its word.
- ``hf:<model id or path>`` (:mod:`queerbench.scoring.toxicity_hf`): any transformers multi-label sequence classifier.
- ``perspective`` (:mod:`queerbench.scoring.perspective`): the REST API, rate-limited and retried.

The interface, cache and label maps are in :mod:`queerbench.scoring.toxicity_base` (re-exported here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from queerbench.scoring.toxicity_base import (
    ALL_ATTRIBUTES,
    ATTRIBUTES,
    SEVERE,
    ScoreCache,
    ToxicityScorer,
    _validate_label_file,
    label_maps,
)
from queerbench.scoring.toxicity_hf import HFToxicityScorer

__all__ = [
    "ALL_ATTRIBUTES",
    "ATTRIBUTES",
    "SCORER_CHOICES",
    "SEVERE",
    "HFToxicityScorer",
    "ScoreCache",
    "ToxicityScorer",
    "_validate_label_file",
    "get_toxicity_scorer",
    "label_maps",
    "unavailable_reason",
]

SCORER_CHOICES: tuple[str, ...] = ("embedded", "surrogate", "hf:<model id or path>", "perspective")
_LEAD_HANDLED = ("precomputed", "none")


def get_toxicity_scorer(
    spec: str,
    *,
    cache_dir: str | Path | None = None,
    held_out_model: str | None = None,
    text_form: str | None = None,
    **kwargs: Any,
) -> ToxicityScorer:
    """Build the scorer named by ``spec``: ``embedded`` | ``surrogate`` | ``hf:<model id or path>`` | ``perspective``.

    ``kwargs`` go to the scorer's constructor (e.g. ``label_map``/``device``/``batch_size`` for hf, ``qps``/
    ``max_retries`` for perspective). ``held_out_model`` names a published model (as its reference rows name it) whose
    outputs a scorer fitted on the papers' files must not have seen (its reference rows then carry a new model's
    error); scorers fitted on nothing ignore it. ``text_form`` is the form of the texts it will score (a task's
    ``toxicity_input``: ``full``, ``neutral`` or ``frame``), which chooses the surrogate's fit; the others ignore it.
    ``precomputed`` and ``none`` are not scorers: the metric's
    aggregation handles them, so they raise ``ValueError`` here, as does any unknown spec.
    """
    if not isinstance(spec, str):
        raise TypeError(f"toxicity scorer spec must be a string, got {type(spec).__name__}")
    if spec in _LEAD_HANDLED:
        raise ValueError(
            f"toxicity={spec!r} is not a scorer: it is handled by the metric's aggregation (pass toxicity_counts for "
            f"'precomputed'; 'none' skips toxicity). Scorer choices: {', '.join(SCORER_CHOICES)}"
        )
    if spec == "embedded":
        from queerbench.scoring.toxicity_embedded import EmbeddedToxicityScorer

        return EmbeddedToxicityScorer(cache_dir=cache_dir, **kwargs)
    if spec == "surrogate":
        from queerbench.scoring.toxicity_surrogate import SurrogateToxicityScorer

        return SurrogateToxicityScorer(
            cache_dir=cache_dir, held_out_model=held_out_model, text_form=text_form, **kwargs
        )
    if spec == "perspective":
        from queerbench.scoring.perspective import PerspectiveScorer

        return PerspectiveScorer(cache_dir=cache_dir, **kwargs)
    if spec.startswith("hf:") and spec[3:].strip():
        return HFToxicityScorer(spec[3:].strip(), cache_dir=cache_dir, **kwargs)
    raise ValueError(f"unknown toxicity scorer {spec!r}; choose one of: {', '.join(SCORER_CHOICES)}")


def unavailable_reason(spec: str) -> str | None:
    """Why the scorer named by ``spec`` cannot run on this install (a library of an extra is missing), in one line;
    ``None`` when nothing is known to be missing (a download or an API key may still fail when it is built)."""
    if spec == "surrogate":
        from queerbench.scoring.toxicity_surrogate import missing_libraries

        return missing_libraries()
    return None
