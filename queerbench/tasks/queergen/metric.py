"""QueerGen's scores from plain lists: what the ``evaluate`` module's ``queergen`` config (and ``queergen=True`` in
the other configs) calls."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from queerbench import __version__
from queerbench.scoring.regard import REGARD_LABELS
from queerbench.tasks.measurement import Measurement
from queerbench.tasks.queergen.evaluations import ALL_PERSPECTIVE
from queerbench.tasks.queergen.score import queergen_block

__all__ = ["INPUTS", "QueerGenMeasurement", "compute_queergen"]

INPUTS: tuple[str, ...] = ("unmarked_sentences", "templates", "perspective_scores", "regard_scores")
"""The measurement's QueerGen inputs besides ``predictions`` and ``groups``."""


class QueerGenMeasurement(Measurement):
    """QueerGen's scorers as a config of the ``evaluate`` measurement (:func:`compute_queergen`), recorded as
    ``config`` (``queergen``, or the fill-in-the-blank config it is added to with ``queergen=True``)."""

    inputs = INPUTS
    precomputed = ("perspective_scores", "6 per sentence")

    def __init__(self, config: str, *, toxicity: str = "embedded", regard: str = "auto", seed: int = 0) -> None:
        self.config, self.toxicity, self.regard, self.seed = config, toxicity, regard, seed

    def compute(self, predictions: Sequence[Any], groups: Sequence[str], inputs: Mapping[str, Any]) -> dict[str, Any]:
        """QueerGen's group scores of the top-k words."""
        given = {name: inputs.get(name) for name in INPUTS}
        return compute_queergen(
            [list(p) for p in predictions],
            list(groups),
            config=self.config,
            **{name: None if value is None else list(value) for name, value in given.items()},
            toxicity=self.toxicity,
            regard=self.regard,
            seed=self.seed,
        )


def compute_queergen(
    predictions: Sequence[Sequence[str]],
    groups: Sequence[str],
    *,
    config: str = "queergen",
    unmarked_sentences: Sequence[str] | None = None,
    templates: Sequence[str] | None = None,
    perspective_scores: Sequence[Sequence[float]] | None = None,
    regard_scores: Sequence[Sequence[float]] | None = None,
    toxicity: str = "embedded",
    regard: str = "auto",
    seed: int = 0,
) -> dict[str, Any]:
    """QueerGen's group scores of top-k ``predictions`` (one list of words per sentence) labelled by ``groups``.

    ``perspective_scores[i]``: stored raw probabilities of sentence i in the order
    TOXICITY, SEVERE_TOXICITY, INSULT, IDENTITY_ATTACK, PROFANITY, THREAT (used with ``toxicity="precomputed"``);
    otherwise the toxicity scorer reads ``unmarked_sentences[i] + " " + word``. ``regard_scores[i]``: negative,
    neutral, positive (used by ``regard="auto"``/``"precomputed"``); ``regard="hf:<id or path>"`` reads
    ``templates[i]`` with the subject replaced by "xyz". ``toxicity="none"`` skips Perspective.
    """
    n = len(predictions)
    if n == 0:
        raise ValueError("predictions is empty: pass one list of predicted words per sentence")
    for name, seq in (
        ("groups", groups),
        ("unmarked_sentences", unmarked_sentences),
        ("templates", templates),
        ("perspective_scores", perspective_scores),
        ("regard_scores", regard_scores),
    ):
        if seq is not None and len(seq) != n:
            raise ValueError(f"{name} has {len(seq)} entries but predictions has {n}; they must align one to one")
    from queerbench.tasks.queergen.spec import GROUP_ORDER, check_scoring_config

    if check_scoring_config(config) == "queergen":  # QueerGen's own rules, own groups; others take any labels
        unknown = sorted({str(g) for g in groups} - set(GROUP_ORDER))
        if unknown:
            raise ValueError(
                f"unknown group(s) {unknown} for config 'queergen'; use QueerGen's groups {', '.join(GROUP_ORDER)} "
                "(the dataset's group column), or another config for other labels"
            )
    words = [[str(w) for w in p] for p in predictions]
    if any(isinstance(p, str) or not p for p in predictions):
        raise ValueError("every prediction must be a non-empty list of words (top-k)")
    if toxicity not in ("precomputed", "none") and unmarked_sentences is None:
        raise ValueError(
            f"toxicity={toxicity!r} reads QueerGen's Perspective input: pass unmarked_sentences (the dataset's "
            "unmarked_sentence), perspective_scores with toxicity='precomputed', or toxicity='none'"
        )
    if regard.startswith("hf:") and templates is None:
        raise ValueError("regard='hf:…' reads the templates: pass templates (the dataset's template column)")
    frame = pd.DataFrame({"group": [str(g) for g in groups], "words": words})
    frame["unmarked_sentence"] = list(unmarked_sentences) if unmarked_sentences is not None else ""
    frame["template"] = list(templates) if templates is not None else ""
    if perspective_scores is not None:
        values = pd.DataFrame([list(map(float, v)) for v in perspective_scores])
        if values.shape[1] != len(ALL_PERSPECTIVE):
            raise ValueError(
                f"perspective_scores rows need {len(ALL_PERSPECTIVE)} values: {', '.join(ALL_PERSPECTIVE)}"
            )
        for j, a in enumerate(ALL_PERSPECTIVE):
            frame[f"perspective_{a}"] = values[j].to_numpy()
    if regard_scores is not None:
        values = pd.DataFrame([list(map(float, v)) for v in regard_scores])
        if values.shape[1] != len(REGARD_LABELS):
            raise ValueError(f"regard_scores rows need {len(REGARD_LABELS)} values: {', '.join(REGARD_LABELS)}")
        for j, lbl in enumerate(REGARD_LABELS):
            frame[f"regard_{lbl}"] = values[j].to_numpy()
    result = queergen_block(frame, config=config, toxicity=toxicity, regard=regard, vader="recompute", seed=seed)
    result["queerbench_version"] = __version__
    return result
