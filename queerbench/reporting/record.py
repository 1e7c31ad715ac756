"""The typed, versioned result record of a run (``scores.json``), written by one writer.

In the spirit of inspect_ai's ``EvalLog``: what produced the result (task, benchmark, method, request type, model
and its fingerprint, the settings that change what is predicted, the signature), the declared metrics' per-group
results with their CIs and counts (:mod:`queerbench.scoring.metrics`), how many items were scored, the timings and
the version. :meth:`RunRecord.from_json` reads a record back and refuses, in one line, one of another version or
shape. Per-item samples stay in ``predictions.parquet`` (a probes run: its stored replies) next to it.

Every kind of run writes it: a run on the request runner (``kind`` ``requests``), a fill-in-the-blank run
(``kind`` ``blanks``), whose ``scores.json`` also keeps, at its top level, the blocks its readers have always read
(the per-group QueerBench score and components, ``n``, ``ci``, ``comparisons``, ``top1``, ``scorers``, ``run``, ...):
the record carries them as ``extra``; and a run on the probe runner (``kind`` ``probes``), whose task keeps its own
analysis in its own record beside it (the SCM probes' ``scm.json``).
"""

from __future__ import annotations

from copy import deepcopy
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from queerbench import __version__
from queerbench.base.files import read_json_object, write_json
from queerbench.reporting.rows import ResultRow
from queerbench.scoring.metric_results import NO_GROUPS, REWRITE, MetricResult, MetricSpec, ResultGroups, short_name

__all__ = [
    "RECORD_FILE",
    "RECORD_KINDS",
    "RECORD_VERSION",
    "RunRecord",
    "is_probes_record",
    "is_record",
    "metric_direction",
    "read_record",
    "record_rows",
    "write_record",
]

RECORD_FILE = "scores.json"
"""The record's file in a run folder."""
RECORD_VERSION = 1
"""The record's schema version (``record_version`` in ``scores.json``); a reader refuses others in one line."""
RECORD_KINDS = ("requests", "blanks", "probes")
"""The runs that write a record (``kind``): the request runner's, a fill-in-the-blank run's and the probe runner's
(whose task keeps its own analysis in its own record beside it)."""


@dataclass(frozen=True)
class RunRecord:
    """One run's result: provenance, declared metrics and their per-group results."""

    task: str
    benchmark: str
    method: str
    request_type: str
    """The request type the run's items were predicted by (a probes run: its replies')."""
    model: str
    """The model's name (an endpoint's URL is in ``settings`` without credentials)."""
    model_fingerprint: dict[str, Any]
    signature: str
    settings: dict[str, Any]
    """What changes what is predicted or how it is summarised: limit, dtype, endpoint, n_resamples, seed, ..."""
    declared_metrics: list[MetricSpec]
    """The task's metric declarations (name, column, title, higher_is_better, decimals)."""
    groups: ResultGroups
    """The groups the results are given for: the task's group declaration (column, order, cluster, breakdowns), its
    headline pair, and what the intervals are."""
    results: dict[str, MetricResult]
    """Per declared metric (by name): its results overall, per group, per breakdown value, and the headline gap
    (:func:`~queerbench.scoring.metrics.group_metrics`)."""
    n_items: int
    backend: dict[str, Any] = field(default_factory=dict)
    """The backend's metadata (kind, device, dtype, batch size)."""
    request_types: list[str] = field(default_factory=list)
    """The request types the record's results were read from, ``request_type`` first, each once (a probes run whose
    local model also rated by ``loglikelihood`` lists both; each metric's block says which it was read from where it
    is not ``request_type``). Empty (or null) when made, or in a record written before the field:
    ``[request_type]``."""
    timings_s: dict[str, float] = field(default_factory=dict)
    reused_predictions: bool = False
    parse_rate: float | None = None
    """The share of generated replies read as an answer (the items' ``parsed`` column; ``generate`` requests only)."""
    queerbench_version: str = __version__
    record_version: int = RECORD_VERSION
    finished: str = ""
    kind: str = RECORD_KINDS[0]
    """Which run wrote it (:data:`RECORD_KINDS`); a record written before the field is a request run's."""
    extra: dict[str, Any] = field(default_factory=dict)
    """A ``blanks`` run's own blocks, kept at the top level of ``scores.json`` where its readers find them."""

    def __post_init__(self) -> None:
        asked = dict.fromkeys([self.request_type, *(self.request_types or [])])
        object.__setattr__(self, "request_types", list(asked))

    def to_json(self) -> dict[str, Any]:
        """The record as the JSON object ``scores.json`` holds: its fields, then ``extra``'s blocks beside them."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        data["declared_metrics"] = [asdict(m) for m in self.declared_metrics]
        data["results"] = {name: block.to_json() for name, block in self.results.items()}
        data["groups"] = self.groups.to_json()
        data = {k: v if k in ("declared_metrics", "results", "groups") else deepcopy(v) for k, v in data.items()}
        return {**data, **{k: deepcopy(v) for k, v in self.extra.items() if k not in data}}

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = "scores.json") -> RunRecord:
        """A record read back; a one-line ``ValueError`` for another version or a missing field."""
        version = data.get("record_version")
        if version != RECORD_VERSION:
            raise ValueError(
                f"{where} holds a result record of version {version!r}, this queerbench reads version "
                f"{RECORD_VERSION}; rerun the same command to score it again"
            )
        names = {f.name for f in fields(cls)}
        required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
        missing = sorted(name for name in required if name not in data)
        if missing:
            raise ValueError(f"{where}: the result record lacks {missing}; rerun the same command to rewrite it")
        kind = data.get("kind", RECORD_KINDS[0])
        if kind not in RECORD_KINDS:
            raise ValueError(f"{where}: a result record of kind {kind!r}, not one of {', '.join(RECORD_KINDS)}")
        extra = {k: v for k, v in data.items() if k not in names}
        values = {k: v for k, v in data.items() if k in names and k != "extra"}
        declared, results, groups = values.pop("declared_metrics"), values.pop("results"), values.pop("groups")
        if not isinstance(declared, list) or not isinstance(results, dict):
            raise ValueError(
                f"{where}: the result record's declared_metrics must be a list and its results an object; {REWRITE}"
            )
        record = cls(
            **values,
            declared_metrics=[MetricSpec.from_json(m, where) for m in declared],
            groups=ResultGroups.from_json(groups, where),
            results={str(name): MetricResult.from_json(block, where, str(name)) for name, block in results.items()},
            extra=extra,
        )
        unreported = [m.name for m in record.declared_metrics if m.name not in record.results]
        if unreported or (record.declared_metrics and record.groups == NO_GROUPS):
            what = f"no results for the declared metric {short_name(unreported[0])}" if unreported else "no groups"
            raise ValueError(f"{where}: the result record has {what}; {REWRITE}")
        return record


def metric_direction(higher_is_better: bool | None) -> str:
    """A declared metric's direction in words: ``higher is better``, ``lower is better``, or, for a measurement
    with no better direction (None), that neither is."""
    if higher_is_better is None:
        return "neither direction is better"
    return "higher is better" if higher_is_better else "lower is better"


def write_record(out: Path, record: RunRecord) -> Path:
    """Write ``scores.json`` atomically: the only place a run's result record is written (each runner builds its
    record; this writes it)."""
    return write_json(out / RECORD_FILE, record.to_json())


def read_record(path: Path) -> RunRecord:
    """The record a ``scores.json`` holds (one line when it is unreadable or of another version)."""
    return RunRecord.from_json(read_json_object(path, fix="rerun the same command"), where=str(path))


def record_rows(record: RunRecord, source: str = "") -> list[ResultRow]:
    """The result rows of a record, one per declared metric (what the card, ``compare``, the leaderboard and the
    Space show): its per-group values with CIs and counts, the headline gap, what produced it."""
    rows = []
    for metric in record.declared_metrics:
        block = record.results[metric.name]
        head = block.headline
        gap = {}
        if head:
            gap = {"groups": " - ".join(head.groups), "diff": head.gap, "ci": head.ci, "p_value": head.p_value}
        rows.append(
            ResultRow(
                task=record.task,
                benchmark=record.benchmark,
                model=record.model,
                method=record.method,
                k=record.settings.get("k"),
                toxicity=str(record.settings.get("toxicity_label") or "none"),
                scores={g: s.value for g, s in block.groups.items()},
                ci={g: s.ci for g, s in block.groups.items()},
                n={g: s.n for g, s in block.groups.items()},
                gap=gap,
                parse_rate=record.parse_rate,
                limit=record.settings.get("limit"),
                metric=metric.title,
                extra={
                    "higher_is_better": metric.higher_is_better,
                    "overall": None if block.overall is None else asdict(block.overall),
                    "unit": record.groups.unit,
                },
                signature=record.signature,
                source=source,
            )
        )
    return rows


def is_record(document: Any) -> bool:
    """Whether a ``scores.json`` document is read as a result record (of any version): a request run's or a probes
    run's; a blanks run's (``kind`` ``blanks``, or one written before it held a record) is read by the blocks it has
    always held."""
    return (
        isinstance(document, dict)
        and "record_version" in document
        and document.get("kind", RECORD_KINDS[0]) != RECORD_KINDS[1]
    )


def is_probes_record(document: Any) -> bool:
    """Whether a ``scores.json`` document is a probes run's record, whose folder its task reads (its rows and
    replies are the task's): the folder is that task's run, not a ``queerbench run`` folder."""
    return isinstance(document, dict) and "record_version" in document and document.get("kind") == RECORD_KINDS[2]
