"""A pure scoring function for the evaluate metric's ``scm`` config: responses in, SCM results out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from queerbench.scoring.inputs import check_types
from queerbench.tasks.measurement import Measurement
from queerbench.tasks.scm.analysis import analyze, parse_frame
from queerbench.tasks.scm.data import TASKS, load_groups, load_prompts, load_terms

__all__ = ["INPUTS", "ScmMeasurement", "score_responses"]

INPUTS: tuple[str, ...] = ("prompt_types", "terms", "prompts")
"""The measurement's SCM inputs besides ``predictions`` (the responses) and ``groups``."""


class ScmMeasurement(Measurement):
    """The SCM probes' response analysis as a config of the ``evaluate`` measurement: one response per prediction,
    mapped onto Warmth and Competence with an :class:`~queerbench.tasks.scm.axes.AxisMapper` unless
    ``axis_mapping`` is off."""

    inputs = INPUTS
    text_predictions = True

    def __init__(self, config: str, *, axis_mapping: bool = True) -> None:
        self.config, self.axis_mapping = config, axis_mapping

    def check_types(self, predictions: Any, groups: Any, inputs: Mapping[str, Any]) -> None:
        """The group labels' types (a response is any text)."""
        check_types(None, groups)

    def check_batch(self, predictions: Any) -> None:
        """Nothing to check in a batch of responses."""

    def compute(self, predictions: Sequence[Any], groups: Sequence[str], inputs: Mapping[str, Any]) -> dict[str, Any]:
        """The analysis of the responses; ``prompt_types`` is required."""
        prompt_types, terms, prompts = (inputs.get(name) for name in INPUTS)
        if prompt_types is None:
            raise ValueError(
                f"config {self.config!r} needs prompt_types: one of rating, selection, elicitation, generation per "
                "response"
            )
        mapper = None
        if self.axis_mapping and any(p.startswith(("elicitation", "gen")) for p in prompt_types):
            from queerbench.tasks.scm.axes import AxisMapper

            mapper = AxisMapper()
        result = score_responses(
            list(predictions),
            list(groups),
            list(prompt_types),
            terms=None if terms is None else list(terms),
            prompts=None if prompts is None else list(prompts),
            mapper=mapper,
        )
        result["config"] = self.config
        return result


def score_responses(
    responses: list[str],
    groups: list[str],
    prompt_types: list[str],
    *,
    terms: Sequence[str] | None = None,
    prompts: Sequence[str] | None = None,
    mapper: Any = None,
    allow_unknown_groups: bool = False,
    alpha: float = 0.5,
    min_count: int = 2,
    refusal_rule: str = "appendix_b",
) -> dict[str, Any]:
    """Score model responses to the SCM prompts; returns the :func:`~queerbench.tasks.scm.analysis.analyze` dict.

    ``prompt_types`` are task names (``rating``, ``selection``, ``elicitation``, ``generation``) or prompt type ids
    (``rating_v1`` …, ``gen1`` …). Rating responses need ``terms`` (the rated attribute, for its axis). ``prompts``
    (optional) enables the prompt-echo refusal rule. ``mapper`` (an ``AxisMapper``) is needed for the elicitation
    and generation axis shares; without it those are left out. Build it as ``AxisMapper()`` to get the threshold the
    CLI uses (the embedder's calibrated value, :func:`~queerbench.tasks.scm.axes.default_threshold`); ``mapper`` in the
    result records the dictionary, embedder and threshold (``None`` without a mapper). ``refusal_rule``:
    ``appendix_b`` (the paper's definition, default) or ``patterns`` (the narrower cue-only rule). Unknown groups or
    prompt types raise ``ValueError``.
    """
    n = len(responses)
    for name, seq in (("groups", groups), ("prompt_types", prompt_types), ("terms", terms), ("prompts", prompts)):
        if seq is not None and len(seq) != n:
            raise ValueError(f"{name} has {len(seq)} items but responses has {n}; give one per response")
    task_of = {p.prompt_type: p.task for p in load_prompts()} | {t: t for t in TASKS}
    bad = sorted({p for p in prompt_types if p not in task_of})
    if bad:
        raise ValueError(f"unknown prompt type(s) {bad}; use one of {sorted(task_of)}")
    known = {g.id for g in load_groups()} | {g.label for g in load_groups()}
    label_to_id = {g.label: g.id for g in load_groups()}
    unknown = sorted({g for g in groups if g not in known})
    if unknown and not allow_unknown_groups:
        raise ValueError(
            f"unknown group(s) {unknown}; use one of {sorted(label_to_id.values())} (or pass allow_unknown_groups=True)"
        )
    axis_of = {t.term: t.axis for t in load_terms()}
    rows = []
    for i, (resp, grp, pt) in enumerate(zip(responses, groups, prompt_types, strict=True)):
        task = task_of[pt]
        term = terms[i] if terms is not None else ""
        if task == "rating" and term not in axis_of:
            raise ValueError(
                f"response {i}: rating responses need terms=[...] with one of the 22 SCM terms, got {term!r}"
            )
        rows.append(
            {
                "id": str(i),
                "task": task,
                "prompt_type": pt,
                "group": label_to_id.get(grp, grp),
                "term": term or "",
                "axis": axis_of.get(term or "", ""),
                "response": resp,
                "status": "ok",
                "prompt": prompts[i] if prompts is not None else "",
            }
        )
    frame = parse_frame(pd.DataFrame(rows), refusal_rule)
    res = analyze(frame, mapper=mapper, alpha=alpha, min_count=min_count, rule=refusal_rule)
    # every result says which word -> axis threshold produced it (None: no axis mapping was asked for)
    res["mapper"] = mapper.describe() if mapper is not None and hasattr(mapper, "describe") else res.get("mapper")
    return res
