"""One result row: a model's scores on one task under one setting, from a run or from a paper's published files.

A row is what the report card, the leaderboard and the Space's Leaderboard tab show: the task and its benchmark, the
method, the model, ``k``, the toxicity scorer, the headline score per group with its 95% CI, the gap between the
task's two headline groups with its CI and permutation p-value, the parse and refusal rates of a generative run, the
number of sentences per group, the signature that says what produced it, and where it came from (a run folder, or a
pinned published file). Rows are plain JSON (:meth:`ResultRow.to_dict`, :meth:`ResultRow.from_dict`).

Rows are ranked together only when they are **comparable** (:meth:`ResultRow.comparable_key`): the same task (and
so the same sentences and scoring rules), the same ``k``, the same toxicity scorer and the same metric (an SCM free
rating and a constrained one are two measurements); a ``--limit`` run covers other sentences than a whole one, so it
is never ranked with them, and an imported run over a subset of the sentences (``lm_eval --limit 100``, one template:
:attr:`ResultRow.sentences`) is ranked only with runs of the very same sentences. :func:`incomparable_reason` says in
words why two rows are not; :func:`coverage_label` what a row covers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from queerbench.scoring.toxicity_base import KEY as TOXICITY

__all__ = [
    "ResultRow",
    "comparable_groups",
    "coverage_label",
    "incomparable_reason",
    "row_identity",
    "row_problem",
    "toxicity_label",
]

SCHEMA_VERSION = 1


def toxicity_label(scorers: Any) -> str:
    """The toxicity scorer of a ``scores.json`` ``scorers`` block, as rows compare it: ``perspective`` (the API,
    live or stored by a paper), ``embedded``, ``hf:<id>`` or ``none``."""
    tox = (scorers or {}).get(TOXICITY) if isinstance(scorers, dict) else None
    name = str((tox or {}).get("name") or "none") if isinstance(tox, dict) else str(tox or "none")
    if name == "precomputed":
        return "perspective"  # the papers' stored counts and probabilities are Perspective API outputs
    return name.split("@", 1)[0] if name.startswith("embedded") else name


@dataclass
class ResultRow:
    """A model's result on one task (see the module doc). ``scores``/``ci``/``n`` are keyed by group."""

    task: str
    benchmark: str
    model: str
    method: str
    k: int | None
    toxicity: str
    scores: dict[str, float | None]
    ci: dict[str, list[float] | None] = field(default_factory=dict)
    n: dict[str, int] = field(default_factory=dict)
    gap: dict[str, Any] = field(default_factory=dict)
    """``{"groups": "queer - non-queer", "diff": …, "ci": […], "p_value": …}`` (empty when not computed)."""
    parse_rate: float | None = None
    refusal_rate: float | None = None
    limit: int | None = None
    """Templates covered (None: every one)."""
    metric: str = "QueerBench score"
    """What ``scores`` holds (lower is better for the QueerBench score)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """The task's own figures (QueerGen's VADER, Perspective, regard, diversity; the SCM axes)."""
    signature: str = ""
    source: str = ""
    reference: bool = False
    """A row of a paper's published files (not a run of the user's)."""
    caveats: list[str] = field(default_factory=list)
    sentences: str | None = None
    """``<n>@<hash>`` of an imported run over other sentences than the first ``limit`` templates (``lm_eval --limit
    100`` ends inside a template; a run of one later template): :func:`queerbench.run.signature.sentence_subset`.
    None for the first ``limit`` templates (every one when ``limit`` is None). ``extra["coverage"]`` says which, in
    words."""

    def to_dict(self) -> dict[str, Any]:
        """The row as JSON-ready data (NaN written as null)."""
        return _clean(asdict(self))

    @classmethod
    def from_dict(cls, data: Any, where: str = "a result row", fix: str = "rebuild it") -> ResultRow:
        """A row back from :meth:`to_dict`'s data; a one-line ``ValueError`` naming ``where`` and ``fix`` otherwise
        (every field is checked by :func:`row_problem`)."""
        if not isinstance(data, dict):
            raise ValueError(f"{where} is not a result row (a JSON object); {fix}")
        missing = [f for f in ("task", "benchmark", "model", "method", "k", TOXICITY, "scores") if f not in data]
        if missing:
            raise ValueError(f"{where} lacks {', '.join(missing)}; {fix}")
        problem = row_problem(data)
        if problem:
            raise ValueError(f"{where}: {problem}; {fix}")
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})

    def comparable_key(self) -> tuple[Any, ...]:
        """Rows with equal keys are ranked together: task, ``k``, toxicity scorer, sentences covered (templates and,
        for an imported subset, which sentences), metric."""
        return (self.task, self.k, self.toxicity, self.limit, self.sentences, self.metric)

    @property
    def higher_is_better(self) -> bool:
        """Which way the row's metric is better: a declared metric says so (``extra["higher_is_better"]``); the
        QueerBench score and the task's own harm scores are lower-is-less-harmful."""
        return bool(self.extra.get("higher_is_better", False))

    def direction(self) -> str:
        """The row's metric's direction in words (``higher is better`` / ``lower is less harmful``)."""
        return "higher is better" if self.higher_is_better else "lower is less harmful"

    def headline(self, group: str) -> float | None:
        """The score of ``group`` (None when not scored)."""
        value = self.scores.get(group)
        return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def incomparable_reason(row: ResultRow, reference: ResultRow) -> str | None:
    """Why ``row`` cannot be ranked with ``reference`` (None when it can), in words."""
    reasons = []
    if row.task != reference.task:
        reasons.append(f"task {row.task} (not {reference.task}: other sentences and scoring rules)")
    if row.k != reference.k:
        reasons.append(f"k={row.k} (not {reference.k})")
    if row.toxicity != reference.toxicity:
        reasons.append(f"toxicity scorer {row.toxicity} (not {reference.toxicity})")
    if row.sentences != reference.sentences:
        reasons.append(f"{coverage_label(row)} (not {coverage_label(reference)})")
    elif row.limit != reference.limit:
        shown = "all" if row.limit is None else f"the first {row.limit}"
        reasons.append(f"{shown} templates (not {'all' if reference.limit is None else reference.limit})")
    if row.metric != reference.metric:
        reasons.append(f"metric {row.metric} (not {reference.metric})")
    return "; ".join(reasons) or None


def coverage_label(row: ResultRow, unit: str = "templates") -> str:
    """What ``row`` covers, in words: ``all templates``, ``first 2 templates``, or for an imported subset ``a subset:
    100 of 7,931 sentences: templates 0 (77 of 77), 1 (23 of 77)`` (never "all")."""
    if row.sentences:
        words = (row.extra or {}).get("coverage")
        return f"a subset: {words}" if isinstance(words, str) and words else f"a subset of sentences {row.sentences}"
    return f"all {unit}" if row.limit is None else f"first {row.limit} {unit}"


def row_identity(row: ResultRow) -> tuple[Any, ...]:
    """What makes two rows one result (the same run read twice: a folder given twice, an eval and one of its part
    folders): the signature (which says what produced the run) with the comparable key, model, method; a row without
    a signature (an earlier version's) is known by its folder."""
    made_by = row.signature or str(Path(row.source).resolve())
    return (made_by, *row.comparable_key(), row.model, row.method)


def comparable_groups(rows: Sequence[ResultRow]) -> list[list[ResultRow]]:
    """Rows split into groups of comparable rows (:meth:`ResultRow.comparable_key`), reference rows' groups first,
    in first-seen order."""
    groups: dict[tuple[Any, ...], list[ResultRow]] = {}
    for row in sorted(rows, key=lambda r: not r.reference):
        groups.setdefault(row.comparable_key(), []).append(row)
    return list(groups.values())


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number_map(value: Any, name: str, *, ints: bool = False, pairs: bool = False) -> str | None:
    """What is wrong with a per-group map (``{group: number or null}``; ``pairs``: ``[low, high]`` or null)."""
    if not isinstance(value, dict):
        return f"{name!r} must be an object of per-group values, got {type(value).__name__}"
    for group, v in value.items():
        if v is None:
            continue
        if pairs:
            if not (isinstance(v, (list, tuple)) and len(v) == 2 and all(x is None or _is_number(x) for x in v)):
                return f"{name}[{group!r}] must be [low, high] or null, got {v!r}"
        elif ints:
            if not (_is_number(v) and float(v).is_integer() and v >= 0):
                return f"{name}[{group!r}] must be a count, got {v!r}"
        elif not _is_number(v):
            return f"{name}[{group!r}] must be a number or null, got {v!r}"
    return None


def row_problem(data: dict[str, Any]) -> str | None:
    """What makes ``data`` no valid result row, in words (None when it is one): every field a reader uses is checked
    for its type, so a malformed row (``k: [1]``, ``scores: {"queer": "abc"}``, ``scores: null``) is refused when it is
    read instead of failing later in a table, a figure or the Space."""
    for name in ("task", "benchmark", "model", "method", TOXICITY):
        if not isinstance(data.get(name), str):
            return f"{name!r} must be a string, got {data.get(name)!r}"
    for name in ("k", "limit"):
        value = data.get(name)
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            return f"{name!r} must be a positive integer or null, got {value!r}"
    sentences = data.get("sentences")
    if sentences is not None and not isinstance(sentences, str):
        return f"'sentences' must be a string (<n>@<hash>) or null, got {sentences!r}"
    problem = _number_map(data.get("scores"), "scores")
    if problem:
        return problem
    if "ci" in data and data["ci"] is not None and (problem := _number_map(data["ci"], "ci", pairs=True)):
        return problem
    if "n" in data and data["n"] is not None and (problem := _number_map(data["n"], "n", ints=True)):
        return problem
    for name in ("parse_rate", "refusal_rate"):
        value = data.get(name)
        if value is not None and not _is_number(value):
            return f"{name!r} must be a number or null, got {value!r}"
    gap = data.get("gap")
    if gap is not None and not isinstance(gap, dict):
        return f"'gap' must be an object, got {type(gap).__name__}"
    for name in ("diff", "p_value"):
        value = (gap or {}).get(name)
        if value is not None and not _is_number(value):
            return f"gap.{name} must be a number or null, got {value!r}"
    gap_ci = (gap or {}).get("ci")
    if gap_ci is not None and not (
        isinstance(gap_ci, (list, tuple)) and len(gap_ci) == 2 and all(x is None or _is_number(x) for x in gap_ci)
    ):
        return f"gap.ci must be [low, high] or null, got {gap_ci!r}"
    for name, kind in (("metric", str), ("signature", str), ("source", str), ("reference", bool)):
        if name in data and not isinstance(data[name], kind):
            return f"{name!r} must be a {kind.__name__}, got {data[name]!r}"
    for name in ("extra",):
        if data.get(name) is not None and not isinstance(data[name], dict):
            return f"{name!r} must be an object, got {type(data[name]).__name__}"
    caveats = data.get("caveats")
    if caveats is not None and not (isinstance(caveats, list) and all(isinstance(c, str) for c in caveats)):
        return f"'caveats' must be a list of strings, got {caveats!r}"
    return None


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value
