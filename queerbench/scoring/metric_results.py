"""The types a task's declared metrics and their results are held in, from the run that computes them to the result
record that stores them (:mod:`queerbench.reporting.record`) and every reader of it.

:class:`MetricSpec` is one metric a task declares; :class:`MetricResult` its results in one run: :class:`GroupStat`
over every item, per group and per breakdown value, and the task's :class:`Headline` comparison;
:class:`ResultGroups` the groups they are given for. Each reads itself back from the JSON a record stores
(``from_json``) and refuses another shape (a key missing or unknown, a value of another type, a negative count,
an interval without two ends) in one line that names the file, the metric and group, and the fix, so that no
reader meets a damaged record halfway through its work.
"""

from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass, field, fields
from typing import Any

__all__ = [
    "MAX_DECIMALS",
    "NO_GROUPS",
    "NO_ITEMS",
    "REWRITE",
    "GroupStat",
    "Headline",
    "MetricResult",
    "MetricSpec",
    "ResultGroups",
    "short_name",
]

REWRITE = "rerun the command that wrote it, with the same --out, to rewrite it"
"""What to do about a stored record of another shape (the fix a refusal names unless its reader gives another)."""
MAX_DECIMALS = 12
"""The most decimals a declared metric may ask reports to print."""


def _require(ok: bool, where: str, what: str, fix: str) -> None:
    """A one-line ``ValueError`` naming where the record is, the part of it that has another shape, and the fix."""
    if not ok:
        raise ValueError(f"{where}: {what}: not of the shape a result record stores; {fix}")


def short_name(value: Any) -> str:
    """A key as a message names it (at most 40 characters of it)."""
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def _number(value: Any, optional: bool = True) -> bool:
    return (value is None and optional) or (isinstance(value, numbers.Real) and not isinstance(value, bool))


def _plain(value: Any) -> Any:
    """A number as JSON writes it: an int or float kept, any other real (a numpy scalar) as a float; None kept."""
    return value if value is None or isinstance(value, int | float) else float(value)


def _count(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 0


def _interval(value: Any) -> bool:
    return value is None or (
        isinstance(value, list | tuple) and len(value) == 2 and all(_number(v, optional=False) for v in value)
    )


def _strings(value: Any, length: int | None = None) -> bool:
    return (
        isinstance(value, list | tuple)
        and all(isinstance(v, str) for v in value)
        and (length is None or len(value) == length)
    )


def _keys(data: Any, required: set[str], known: set[str]) -> bool:
    return isinstance(data, dict) and required <= set(data) and not set(data) - known


@dataclass(frozen=True)
class MetricSpec:
    """One metric a task declares: for a ``requests`` task the per-item column it averages (``column``, numeric,
    e.g. 0/1 ``correct``), for a ``blanks`` task the per-group block of scores its scoring rules compute; its display
    ``title``, whether higher is better, and how many decimals reports print. The result record keeps each
    declaration beside the metric's results (:class:`MetricResult`)."""

    name: str
    column: str
    title: str
    higher_is_better: bool | None = True
    """Which way is better (a harm score: lower); None for a ``probes`` task's measurement that has no better
    direction (the SCM probes' Warmth and Competence ratings)."""
    decimals: int = 3

    @classmethod
    def from_json(cls, data: Any, where: str, fix: str = REWRITE) -> MetricSpec:
        """A declaration as a result record stores it."""
        ok = _keys(data, {"name", "column", "title"}, {f.name for f in fields(cls)})
        named = isinstance(data, dict) and isinstance(data.get("name"), str)
        what = f"the declared metric {short_name(data['name'])}" if named else "a declared metric"
        _require(ok and all(isinstance(data[k], str) for k in ("name", "column", "title")), where, what, fix)
        better = data.get("higher_is_better", True)
        _require(better is None or isinstance(better, bool), where, f"{what} (higher_is_better)", fix)
        decimals = data.get("decimals", 3)
        _require(_count(decimals) and decimals <= MAX_DECIMALS, where, f"{what} (decimals)", fix)
        return cls(**data)


@dataclass(frozen=True)
class GroupStat:
    """One metric over one group's items: mean, 95% CI over clusters (None when it cannot be had), the number of
    items and of clusters (templates) they come from."""

    value: float | None
    ci: list[float] | None
    n: int
    n_clusters: int

    @classmethod
    def from_json(cls, data: Any, where: str, what: str, fix: str = REWRITE) -> GroupStat:
        """A group's statistics as a result record stores them (``what``: whose, for the message); an interval given
        as a tuple and counts as numpy integers (a plan's own numbers) are read as a list and ints."""
        ok = _keys(data, {"value", "ci", "n", "n_clusters"}, {"value", "ci", "n", "n_clusters"})
        _require(ok and _number(data["value"]) and _interval(data["ci"]), where, what, fix)
        _require(_count(data["n"]) and _count(data["n_clusters"]), where, what, fix)
        ci = None if data["ci"] is None else [_plain(v) for v in data["ci"]]
        return cls(value=_plain(data["value"]), ci=ci, n=int(data["n"]), n_clusters=int(data["n_clusters"]))


NO_ITEMS = GroupStat(value=None, ci=None, n=0, n_clusters=0)
"""The statistics of no items: what a group without a block, or a run without an overall value, reads as."""


@dataclass(frozen=True)
class Headline:
    """A task's headline comparison of one metric: the difference of two groups' means, its 95% interval paired by
    template (None over too few templates holding both) and the sign-flip test's p-value (None: not testable)."""

    groups: list[str]
    """The two groups, the gap read as the first minus the second."""
    gap: float
    ci: list[float] | None = None
    p_value: float | None = None

    @classmethod
    def from_json(cls, data: Any, where: str, what: str, fix: str = REWRITE) -> Headline | None:
        """A headline as a result record stores it (None: the metric has none)."""
        if data is None:
            return None
        ok = _keys(data, {"groups", "gap"}, {f.name for f in fields(cls)}) and _strings(data["groups"], length=2)
        _require(ok and _number(data["gap"], optional=False) and _interval(data.get("ci")), where, what, fix)
        _require(_number(data.get("p_value")), where, what, fix)
        ci = None if data.get("ci") is None else [_plain(v) for v in data["ci"]]
        return cls(groups=list(data["groups"]), gap=_plain(data["gap"]), ci=ci, p_value=_plain(data.get("p_value")))


@dataclass(frozen=True)
class MetricResult:
    """One declared metric's results in a run: over every item (None where a run gives no overall value: a
    fill-in-the-blank run's scores are per group), per group in the task's order, per value of each breakdown
    column, and the task's headline comparison. A metric read from something other than the run's items says what
    (``read_from``, e.g. a local model's option log-probabilities) and by which requests (``request_type``)."""

    overall: GroupStat | None
    groups: dict[str, GroupStat]
    by: dict[str, dict[str, GroupStat]] = field(default_factory=dict)
    headline: Headline | None = None
    read_from: str | None = None
    request_type: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The block a result record stores (``read_from`` and ``request_type`` only where they are said)."""
        out: dict[str, Any] = {
            "overall": None if self.overall is None else asdict(self.overall),
            "groups": {g: asdict(s) for g, s in self.groups.items()},
            "by": {column: {v: asdict(s) for v, s in stats.items()} for column, stats in self.by.items()},
            "headline": None if self.headline is None else asdict(self.headline),
        }
        out.update({k: v for k, v in (("read_from", self.read_from), ("request_type", self.request_type)) if v})
        return out

    @classmethod
    def from_json(cls, data: Any, where: str, name: str, fix: str = REWRITE) -> MetricResult:
        """The block of metric ``name`` as a result record stores it (a record of an earlier version may lack
        ``by`` and ``headline``: none)."""
        what = f"the results of metric {short_name(name)}"
        _require(_keys(data, {"overall", "groups"}, {f.name for f in fields(cls)}), where, what, fix)
        groups, by = data["groups"], {} if data.get("by") is None else data["by"]
        _require(isinstance(groups, dict) and isinstance(by, dict), where, what, fix)
        _require(all(isinstance(stats, dict) for stats in by.values()), where, f"{what} (by breakdown)", fix)
        for key in ("read_from", "request_type"):
            _require(data.get(key) is None or isinstance(data[key], str), where, f"{what} ({key})", fix)

        def stat(value: Any, whose: str) -> GroupStat:
            return GroupStat.from_json(value, where, f"{what} ({whose})", fix)

        return cls(
            overall=None if data["overall"] is None else stat(data["overall"], "overall"),
            groups={str(g): stat(s, f"group {short_name(g)}") for g, s in groups.items()},
            by={
                str(column): {str(v): stat(s, f"{short_name(column)} = {short_name(v)}") for v, s in stats.items()}
                for column, stats in by.items()
            },
            headline=Headline.from_json(data.get("headline"), where, f"{what} (headline)", fix),
            read_from=data.get("read_from"),
            request_type=data.get("request_type"),
        )

    def group(self, name: str) -> GroupStat:
        """The statistics of group ``name`` (a group the run has no block for: no items, no value)."""
        return self.groups.get(name) or NO_ITEMS


@dataclass(frozen=True)
class ResultGroups:
    """The groups a record's results are given for: the item column naming the group, the groups in report order,
    the column whose values are the clusters an interval resamples, the breakdown columns, the headline pair (None:
    the task declares none), and what the intervals are (a bootstrap over templates unless the task computes its
    own, e.g. a Student-t interval over ratings)."""

    column: str
    order: list[str]
    cluster: str = "template_id"
    breakdowns: list[str] = field(default_factory=list)
    headline: list[str] | None = None
    unit: str = "templates"
    """What an interval's clusters are (and, for a bootstrap over templates, what is counted is items)."""
    interval: str = "bootstrap"

    @classmethod
    def from_json(cls, data: Any, where: str, fix: str = REWRITE) -> ResultGroups:
        """The groups as a result record stores them; a record written before ``unit`` and ``interval`` were stored
        has a bootstrap over templates, one without ``breakdowns`` or ``headline`` none; ``{}``: :data:`NO_GROUPS`."""
        if data == {}:
            return NO_GROUPS
        ok = _keys(data, {"column", "order"}, {f.name for f in fields(cls)}) and isinstance(data["column"], str)
        ok = ok and all(data.get(k) is None or isinstance(data[k], str) for k in ("cluster", "unit", "interval"))
        ok = ok and _strings(data["order"]) and (data.get("breakdowns") is None or _strings(data["breakdowns"]))
        _require(
            ok and (data.get("headline") is None or _strings(data["headline"], length=2)), where, "the groups", fix
        )
        values = {k: v for k, v in data.items() if v is not None}
        lists = {k: list(values[k]) for k in ("order", "breakdowns", "headline") if k in values}
        return cls(**{**values, **lists})

    def to_json(self) -> dict[str, Any]:
        """The groups as a result record stores them (``{}``: :data:`NO_GROUPS`)."""
        return {} if self == NO_GROUPS else asdict(self)


NO_GROUPS = ResultGroups(column="", order=[])
"""The groups of a record with no declared metric (a ``probes`` task that declares none): stored as ``{}``."""
