"""What a ``probes`` task gives the shared probe runner (:mod:`queerbench.run.probes`): a resolved plan.

A ``probes`` task's items are prompts a generative model answers, several times each, with decoding settings of
the task's own (the SCM probes: survey and story prompts). The runner does everything a run of any such task does —
the output folder (checked, locked, one writer), the model, the reply cache shared by resumed runs, progress,
failed prompts, the signature and the result record — and asks the task's :class:`ProbePlan` only for what is its
own: the ``generate`` requests (rows of prompts with their settings), what the replies mean (:meth:`ProbePlan.analyze`)
and its report. A task makes its plan in :meth:`queerbench.tasks.base.Task.probe_plan`, from the settings the user
gave, checking each one (a one-line ``ValueError``) before any model loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import pandas as pd

from queerbench.scoring.metric_results import NO_GROUPS, MetricResult, ResultGroups

if TYPE_CHECKING:
    from collections.abc import Callable

    from queerbench.models.backends import GenerateBackend
    from queerbench.models.generation import GenerationSettings

__all__ = ["ProbeAnalysis", "ProbeFiles", "ProbePlan"]


@dataclass(frozen=True)
class ProbeFiles:
    """The files a ``probes`` run folder holds (the task's ``outputs`` in its data file): the result record (a JSON
    object with the run's ``signature`` and its ``run`` block), every reply with how it was read (Parquet), and the
    reply cache (SQLite) that a rerun resumes from. A folder is that task's run when it holds the record or the
    cache."""

    record: str
    replies: str
    cache: str
    versions: tuple[str, ...] = ()
    """The packages whose versions the record keeps (the run's ``versions``)."""
    report: str = "report.md"
    """The report the plan writes beside the record (named in the runner's messages)."""


@dataclass
class ProbeAnalysis:
    """What a plan made of the replies: the result (written as the task's own record, with the runner's ``run``
    block and ``signature`` added), the replies as stored (with how each was read), the plan's part of the ``run``
    block (its settings, their provenance, anything else it records), and what the shared result record
    (:class:`~queerbench.reporting.record.RunRecord`, ``scores.json``) holds of it: the task's declared metrics per
    group, the groups, and the share of replies read as an answer."""

    result: dict[str, Any]
    replies: pd.DataFrame
    """The replies as stored: the rows the runner collected (with its ``cached`` and ``status`` columns) and the
    plan's own columns."""
    meta: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, MetricResult] = field(default_factory=dict)
    """Per declared metric (by name) its results: overall, per group, per breakdown value, and what it was read
    from where that is not the replies (:class:`~queerbench.scoring.metric_results.MetricResult`)."""
    groups: ResultGroups = NO_GROUPS
    """The groups the metrics are given for: ``column``, ``order``, ``cluster``, and the CIs' ``unit`` and
    ``interval`` (e.g. ``ratings``, ``Student-t``; a request run's are a bootstrap over templates); none for a plan
    that gives no metric."""
    parse_rate: float | None = None
    """The share of the replies the record's metrics read that were read as an answer (None: not known)."""

    def __post_init__(self) -> None:
        # a plan written for an earlier version gives its metrics and groups in the JSON shape a record stores them in
        # (typed blocks are read back through the same checks, so that what the record writes is what it reads)
        where, fix = "a probes plan's analysis", "the plan must give numbers where the record stores numbers"
        self.metrics = {
            name: MetricResult.from_json(
                block.to_json() if isinstance(block, MetricResult) else block, where, name, fix
            )
            for name, block in self.metrics.items()
        }
        groups = self.groups.to_json() if isinstance(self.groups, ResultGroups) else self.groups
        self.groups = ResultGroups.from_json(groups, where, fix)
        if self.metrics and self.groups == NO_GROUPS:
            raise ValueError(f"{where}: metrics without the groups they are given for; the plan must give its groups")


@runtime_checkable
class ProbePlan(Protocol):
    """A ``probes`` task's run, resolved from the user's settings (every value checked)."""

    def generator_options(self) -> dict[str, Any]:
        """Options of the generator the model is opened as: a ``system_prompt``, an endpoint's ``extra_body``, and
        the ``batch_size`` of requests the plan asks besides its ``generate`` groups (a local model's option
        scores); a value left out or None takes the default of
        :class:`~queerbench.models.spec.ModelSpec` (a batch size of 16)."""
        ...

    def request_groups(self) -> list[tuple[pd.DataFrame, GenerationSettings]]:
        """The ``generate`` requests: groups of prompt rows (``id``, ``prompt``, …), each asked ``samples`` times
        with its group's settings; asked together, answered from the reply cache where it has them."""
        ...

    def describe(self) -> str:
        """One line for the log: what is about to be asked."""
        ...

    def merge_replies(self, replies: list[pd.DataFrame]) -> pd.DataFrame:
        """The replies of each group (in :meth:`request_groups`' order) as one frame of the plan's own shape."""
        ...

    def analyze(
        self, replies: pd.DataFrame, backend: GenerateBackend, out: Path, log: Callable[[str], None]
    ) -> ProbeAnalysis:
        """Read the replies (parse, score, aggregate); ``backend`` is the model the replies came from, for tasks that
        also ask it other requests (e.g. ``loglikelihood`` of answer options); ``out`` the run folder, for files of
        the plan's own that a rerun reuses."""
        ...

    def reanalyze(self, replies: pd.DataFrame, record: dict[str, Any], out: Path) -> ProbeAnalysis:
        """Read the stored replies of a finished run again (no model calls), ``record`` its stored record."""
        ...

    def signature_fields(self, meta: dict[str, Any], result: dict[str, Any]) -> list[tuple[str, Any]]:
        """The plan's fields of the signature (between the model's and the version), from the ``run`` block and the
        result."""
        ...

    def write_report(self, result: dict[str, Any], meta: dict[str, Any], out: Path) -> None:
        """Write the report and figures of a result into ``out``."""
        ...
