"""What the ``evaluate`` measurement (``metric_queerbench/``) asks of a task: the inputs its config takes, what one
prediction is, how the inputs' types are checked and how they are scored.

Each task the measurement scores gives its own (:meth:`queerbench.tasks.Task.measurement`): a fill-in-the-blank
task its scoring rules (:class:`BlanksMeasurement`, below), QueerGen its scorers, the SCM probes their response
analysis. The module itself only adapts ``evaluate``'s interface, so it never asks which task a config is.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any, Protocol

from queerbench import __version__
from queerbench.scoring.aggregate import ScoringOptions, compute
from queerbench.scoring.inputs import check_types

__all__ = ["BLANKS_INPUTS", "BlanksMeasurement", "Measurement", "ScoredTask", "blanks_options"]

BLANKS_INPUTS: tuple[str, ...] = ("sentences", "toxicity_counts", "template_ids")
"""A fill-in-the-blank task's inputs besides ``predictions`` and ``groups``."""


class ScoredTask(Protocol):
    """What :func:`blanks_options` reads of a task: its scoring options with the given ones set."""

    def scoring_options(self, **settings: Any) -> ScoringOptions: ...


def blanks_options(task: ScoredTask, settings: Mapping[str, Any]) -> ScoringOptions:
    """The scoring options of a fill-in-the-blank ``task`` with those of the measurement's init ``settings`` that
    are scoring options (the toxicity scorer, the uncertainty settings, ...; the others are other configs')."""
    names = {f.name for f in fields(ScoringOptions)}
    return task.scoring_options(**{key: value for key, value in settings.items() if key in names})


class Measurement(ABC):
    """One config of the ``evaluate`` measurement: its ``inputs`` (besides ``predictions`` and ``groups``), whether
    a prediction is one text (``text_predictions``: a response) or a list of top-k words, the type checks and
    :meth:`compute`. Subclasses set ``inputs`` and implement :meth:`compute`."""

    inputs: tuple[str, ...] = ()
    text_predictions: bool = False
    precomputed: tuple[str, str] | None = None
    """The input a ``toxicity="precomputed"`` scorer reads, and what it holds (None: the config has no such input)."""

    def check_types(self, predictions: Any, groups: Any, inputs: Mapping[str, Any]) -> None:
        """One line naming the input and the fix when a type is wrong (top-k words per prediction by default)."""
        check_types(predictions, groups, inputs.get("sentences"), inputs.get("toxicity_counts"))

    def check_batch(self, predictions: Any) -> None:
        """The type check of an ``add_batch``'s predictions."""
        check_types(predictions)

    @abstractmethod
    def compute(self, predictions: Sequence[Any], groups: Sequence[str], inputs: Mapping[str, Any]) -> dict[str, Any]:
        """The scores of ``predictions`` labelled by ``groups``, with ``inputs`` (each of :attr:`inputs`, or None)."""


class BlanksMeasurement(Measurement):
    """A fill-in-the-blank task's scoring rules (:func:`queerbench.scoring.aggregate.compute`) on top-k words, and
    any further measurement of the same predictions (``also``: each one's result under its key, with its own
    inputs)."""

    precomputed = ("toxicity_counts", "5 counts per sentence")

    def __init__(self, options: ScoringOptions, also: Mapping[str, Measurement] | None = None) -> None:
        self.options = options
        self.also = dict(also or {})
        self.inputs = (*BLANKS_INPUTS, *(name for m in self.also.values() for name in m.inputs))

    def compute(self, predictions: Sequence[Any], groups: Sequence[str], inputs: Mapping[str, Any]) -> dict[str, Any]:
        """The task's scores (and each further measurement's under its key)."""
        given = {name: None if inputs.get(name) is None else list(inputs[name]) for name in BLANKS_INPUTS}
        counts = given["toxicity_counts"]
        result = compute(
            [list(p) for p in predictions],
            list(groups),
            sentences=given["sentences"],
            toxicity_counts=None if counts is None else [list(c) for c in counts],
            template_ids=given["template_ids"],
            options=self.options,
        )
        for key, other in self.also.items():
            result[key] = {
                **other.compute(predictions, groups, {name: inputs.get(name) for name in other.inputs}),
                "module_version": __version__,
            }
        return result
