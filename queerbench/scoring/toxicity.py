"""Toxicity scorers for the QueerBench ``P`` component, built by name (the registry).

The paper scored completed sentences with Google's Perspective API. That API is sunset after 2026 and cannot be
reached offline, so three interchangeable scorers implement :class:`~queerbench.scoring.toxicity_base.ToxicityScorer`:

- ``embedded`` (default; :mod:`queerbench.scoring.toxicity_embedded`): the Jigsaw BiLSTM shipped in the PyPI wheel
  ``toxic-comment-classifier`` 0.3.0, run in torch; fully offline.
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
]

SCORER_CHOICES: tuple[str, ...] = ("embedded", "hf:<model id or path>", "perspective")
_LEAD_HANDLED = ("precomputed", "none")


def get_toxicity_scorer(
    spec: str, *, cache_dir: str | Path | None = None, held_out_model: str | None = None, **kwargs: Any
) -> ToxicityScorer:
    """Build the scorer named by ``spec``: ``embedded`` | ``hf:<model id or path>`` | ``perspective``.

    ``kwargs`` go to the scorer's constructor (e.g. ``label_map``/``device``/``batch_size`` for hf, ``qps``/
    ``max_retries`` for perspective). ``held_out_model`` names a published model (as its reference rows name it) whose
    outputs a scorer fitted on the papers' files must not have seen (its reference rows then carry a new model's
    error); scorers fitted on nothing ignore it. ``precomputed`` and ``none`` are not scorers: the metric's
    aggregation handles them, so they raise ``ValueError`` here, as does any unknown spec.
    """
    del held_out_model  # no scorer below is fitted on the published files
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
    if spec == "perspective":
        from queerbench.scoring.perspective import PerspectiveScorer

        return PerspectiveScorer(cache_dir=cache_dir, **kwargs)
    if spec.startswith("hf:") and spec[3:].strip():
        return HFToxicityScorer(spec[3:].strip(), cache_dir=cache_dir, **kwargs)
    raise ValueError(f"unknown toxicity scorer {spec!r}; choose one of: {', '.join(SCORER_CHOICES)}")
