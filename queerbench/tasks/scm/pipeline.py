"""The SCM run's settings: the paper's decoding per model family (:func:`resolve_settings`), overridable, and the
axis mapper (:func:`make_mapper`). A run itself is the shared probe runner's (:mod:`queerbench.run.probes`) with the
task's plan (:mod:`queerbench.tasks.scm.plan`); constrained scoring (:mod:`queerbench.tasks.scm.constrained`)
compares the answer options of rating and selection prompts for local models.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from queerbench.models.generation import GenerationSettings
from queerbench.tasks.scm.constrained import RATING_PREFIX, SCORING_METHODS, SELECTION_PREFIX, constrained_scores
from queerbench.tasks.scm.data import load_embedder_thresholds, load_paper_defaults, paper_decoding

__all__ = [
    "RATING_PREFIX",
    "SCORING_METHODS",
    "SELECTION_PREFIX",
    "constrained_scores",
    "make_mapper",
    "resolve_settings",
    "truncated",
]


def resolve_settings(
    model_name: str | None,
    *,
    temperature: float | None = None,
    top_p: float | str | None = "paper",
    survey_samples: int | None = None,
    story_samples: int | None = None,
    max_new_tokens: int | None = None,
    story_max_new_tokens: int | None = None,
    seed: int = 0,
    batch_size: int = 8,
) -> tuple[GenerationSettings, GenerationSettings, dict[str, Any]]:
    """Survey and story settings: the paper's defaults for ``model_name``'s family, each overridable.

    ``None`` takes the paper default (for ``top_p``: ``"paper"``; ``"unset"`` or ``None`` mean "not sent").
    Returns (survey settings, story settings, provenance: each value and whether it
    is the paper's default or an override).
    """
    fam = paper_decoding(model_name)
    d = load_paper_defaults()
    chosen_top_p = fam["top_p"] if top_p == "paper" else (None if top_p == "unset" else top_p)
    values: dict[str, tuple[Any, bool]] = {  # each value, and whether it is the paper's default
        "temperature": (fam["temperature"] if temperature is None else temperature, temperature is None),
        "top_p": (chosen_top_p, top_p == "paper"),
        "survey_samples": (d["survey_samples"] if survey_samples is None else survey_samples, survey_samples is None),
        "story_samples": (d["story_samples"] if story_samples is None else story_samples, story_samples is None),
        "survey_max_new_tokens": (
            d["survey_max_new_tokens"] if max_new_tokens is None else max_new_tokens,
            max_new_tokens is None,
        ),
        "story_max_new_tokens": (
            d["story_max_new_tokens"] if story_max_new_tokens is None else story_max_new_tokens,
            story_max_new_tokens is None,
        ),
    }
    common = {"temperature": values["temperature"][0], "top_p": values["top_p"][0], "seed": seed}
    survey = GenerationSettings(
        **common,
        max_new_tokens=values["survey_max_new_tokens"][0],
        samples=values["survey_samples"][0],
        batch_size=batch_size,
    )
    story = GenerationSettings(
        **common,
        max_new_tokens=values["story_max_new_tokens"][0],
        samples=values["story_samples"][0],
        batch_size=batch_size,
    )
    provenance = {
        "family": fam["family"],
        "family_note": fam["note"],
        "values": {
            k: {"value": v, "source": "paper default" if is_default else "override"}
            for k, (v, is_default) in values.items()
        },
        "top_p_sent": survey.top_p,
    }
    return survey, story, provenance


def make_mapper(
    embedder: str = "minilm", threshold: float | None = None, *, api_key_env: str = "OPENAI_API_KEY"
) -> Callable[[], Any]:
    """A factory for the axis mapper: SADCAT, then ``embedder`` (``minilm`` or ``URL#MODEL``) above ``threshold``.

    ``threshold=None`` takes the embedder's calibrated value from ``data/embedders.json`` or, for an embedder not
    listed there, calibrates it against SADCAT when first needed (:func:`~queerbench.tasks.scm.axes.calibrate_threshold`).
    The chosen value and how it was chosen are in the mapper's :meth:`describe` (and so in ``scm.json``). Both are
    checked here, before any reply is collected (a one-line ``ValueError``): the mapper itself is built after.
    """
    from queerbench.tasks.scm.axes import check_embedder

    check_embedder(embedder)
    if threshold is not None and not 0.0 <= threshold <= 1.0:
        raise ValueError(f"--threshold {threshold:g}: a cosine similarity threshold lies between 0 and 1")

    def factory() -> Any:
        from queerbench.tasks.scm.axes import AxisMapper, calibrate_threshold, make_embedder

        embed, name = make_embedder(embedder, api_key_env=api_key_env)
        short = name.rsplit("#", 1)[-1]
        if threshold is not None:
            return AxisMapper(embedder=embed, threshold=threshold, embedder_name=name, calibration={"source": "user"})
        if short in load_embedder_thresholds():  # the one calibrated default, shared with the evaluate metric
            return AxisMapper(embedder=embed, embedder_name=name)
        cal = calibrate_threshold(embed, embedder_name=name)
        return AxisMapper(
            embedder=embed,
            threshold=float(cal["threshold"]),
            embedder_name=name,
            calibration={"source": "calibrated at run time"} | cal,
        )

    return factory


def truncated(meta: str, max_new_tokens: int) -> bool | None:
    """Whether a reply hit its token limit: the runner's flag, ``finish_reason == "length"``, or a local reply
    with ``new_tokens`` at the limit."""
    try:
        m = json.loads(meta) if isinstance(meta, str) else dict(meta or {})
    except ValueError:
        return None
    if m.get("truncated") is not None:
        return bool(m["truncated"])
    if m.get("finish_reason") is not None:
        return m["finish_reason"] == "length"
    if m.get("new_tokens") is not None:
        return int(m["new_tokens"]) >= max_new_tokens
    return None
