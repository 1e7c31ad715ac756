"""A task's data part: one entry of a task data file (``tasks.json`` next to a task module), schema-checked.

:func:`load_specs` reads a file ``{"schema_version": 1, "tasks": [...]}`` into :class:`TaskSpec` objects; every
fault is one line naming the file, the task and the field. See :mod:`queerbench.tasks.base` for the hooks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from queerbench.models.requests import FILL_MASK_MODES
from queerbench.scoring.aggregate import SCORE_BLOCKS
from queerbench.scoring.metric_results import MAX_DECIMALS, MetricSpec
from queerbench.scoring.rules import ScoringRules
from queerbench.tasks.probes import ProbeFiles

__all__ = [
    "KINDS",
    "MLM_MODES",
    "TOXICITY_INPUTS",
    "EvalPass",
    "GroupSpec",
    "MetricSpec",
    "TaskSpec",
    "load_specs",
]

KINDS = ("blanks", "probes", "requests")
"""``blanks``: sentences with one ``[MASK]`` that a method fills (``queerbench run``); ``probes``: prompts a generative
model answers several times each, on the probe runner with the task's plan (the SCM probes); ``requests``: items the
task turns into model requests (:mod:`queerbench.models.requests`) and scores one by one, by declared metrics, on the
shared request runner."""
MLM_MODES = FILL_MASK_MODES
"""How a masked LM's top-k is read: whole words only (``whole_word``) or the raw top-k tokens (``raw``, as the papers'
code read them)."""
TOXICITY_INPUTS = ("neutral", "full", "frame")
"""What the toxicity scorer reads: the subject-blind neutral sentence, the full sentence, or 'The person is <word>.'"""


@dataclass(frozen=True)
class EvalPass:
    """One pass ``queerbench eval`` makes over a task for a model that supports its method (an entry of the task's
    ``eval_passes``): the method, its ``k`` (None: the eval's ``--top-k``), the prompt of an ``instructed`` pass
    (None: the default prompt) and a note saying why it is run (the published rows whose settings it matches)."""

    method: str
    k: int | None = None
    prompt: str | None = None
    note: str = ""


@dataclass(frozen=True)
class GroupSpec:
    """How a ``requests`` task's items fall into groups: the item column naming the group, the groups in report
    order, the item column the confidence intervals resample (its clusters: templates), and further item columns
    each metric is also broken down by (e.g. the declared pronoun set)."""

    column: str
    order: tuple[str, ...]
    cluster: str = "template_id"
    breakdowns: tuple[str, ...] = ()


@dataclass(frozen=True)
class TaskSpec:
    """The data part of a task (one entry of a task data file)."""

    name: str
    benchmark: str
    title: str
    kind: str
    methods: tuple[str, ...]
    dataset_config: str
    dataset_description: str
    mlm_mode: str | None = None
    toxicity_input: str | None = None
    rules: ScoringRules = field(default_factory=ScoringRules)
    lmeval_task: str | None = None
    build_by_default: bool = True
    run_by_default: bool = False
    """Whether this is the task run when none is named (``queerbench run`` without ``--config``, the library, the
    Space): one task declares it (:func:`queerbench.tasks.default_task_name`)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Task-specific settings its hooks read (the generic code does not)."""
    eval_passes: tuple[EvalPass, ...] | None = None
    """The passes ``queerbench eval`` makes over the task (None: each of its methods at the eval's ``--top-k``)."""
    requests: dict[str, str] = field(default_factory=dict)
    """The request type each method asks the model (``{"mlm": "fill_mask", "scored": "loglikelihood", ...}``)."""
    metrics: tuple[MetricSpec, ...] = ()
    """The declared metrics (a ``requests`` task's: shared code computes each per group, with CIs; a ``blanks``
    task's: its scoring rules compute them; a ``probes`` task's: its plan computes them per group)."""
    groups: GroupSpec | None = None
    """A ``requests`` task's groups."""
    outputs: ProbeFiles | None = None
    """A ``probes`` task's run files (its record, its stored replies, its reply cache)."""


_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "benchmark": str,
    "title": str,
    "kind": str,
    "methods": list,
    "dataset": dict,
}


def _spec(raw: Any, where: str) -> TaskSpec:
    """One task entry, checked: a one-line ``ValueError`` naming the file, the task and the field."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: each entry of 'tasks' must be an object")
    label = f"{where} (task {raw.get('name')!r})"
    for key, kind in _REQUIRED.items():
        if not isinstance(raw.get(key), kind):
            raise ValueError(f"{label}: {key!r} is required and must be a {getattr(kind, '__name__', kind)}")
    if raw["kind"] not in KINDS:
        raise ValueError(f"{label}: 'kind' must be one of {', '.join(KINDS)}")
    if not raw["methods"] or not all(isinstance(m, str) and m for m in raw["methods"]):
        # which names a method registry knows is the method registry's to check (methods/ sits above tasks/)
        raise ValueError(f"{label}: 'methods' must be a non-empty list of method names, got {raw['methods']}")
    blanks = raw["kind"] == "blanks"
    if blanks and raw.get("mlm_mode") not in MLM_MODES:
        raise ValueError(f"{label}: a blanks task needs 'mlm_mode', one of {', '.join(MLM_MODES)}")
    if blanks and raw.get("toxicity_input") not in TOXICITY_INPUTS:
        raise ValueError(f"{label}: a blanks task needs 'toxicity_input', one of {', '.join(TOXICITY_INPUTS)}")
    dataset = raw["dataset"]
    if not isinstance(dataset.get("config"), str) or not isinstance(dataset.get("description"), str):
        raise ValueError(f"{label}: 'dataset' needs a 'config' name and a 'description'")
    lmeval = raw.get("lmeval")
    if lmeval is not None and not isinstance((lmeval or {}).get("task"), str):
        raise ValueError(f"{label}: 'lmeval' must be null or an object with the task name under 'task'")
    extra = raw.get("extra") or {}
    if not isinstance(extra, dict):
        raise ValueError(f"{label}: 'extra' must be an object")
    if "in_suite" in extra and not isinstance(extra["in_suite"], bool):
        raise ValueError(f"{label}: 'extra.in_suite' must be true or false")
    gap = extra.get("headline_gap")
    if gap is not None and not (isinstance(gap, list) and len(gap) == 2 and all(isinstance(g, str) for g in gap)):
        raise ValueError(f"{label}: 'extra.headline_gap' must be a list of two group names")
    _check_groups(extra, label)
    if not isinstance(raw.get("run_by_default", False), bool):
        raise ValueError(f"{label}: 'run_by_default' must be true (the task run when none is named) or false")
    passes = _eval_passes(raw.get("eval_passes"), label, raw["methods"])
    requests, metrics, groups = _request_parts(raw, label)
    outputs = _probe_files(raw, label)
    known = {
        *_REQUIRED,
        "mlm_mode",
        "toxicity_input",
        "scoring",
        "lmeval",
        "extra",
        "eval_passes",
        "outputs",
        "run_by_default",
        *_REQUEST_PARTS,
    }
    stray = sorted(set(raw) - known)
    if stray:
        raise ValueError(f"{label}: unknown field(s) {stray}")
    return TaskSpec(
        name=raw["name"],
        benchmark=raw["benchmark"],
        title=raw["title"],
        kind=raw["kind"],
        methods=tuple(raw["methods"]),
        dataset_config=dataset["config"],
        dataset_description=dataset["description"],
        mlm_mode=raw.get("mlm_mode"),
        toxicity_input=raw.get("toxicity_input"),
        rules=ScoringRules.from_dict(raw["scoring"], label) if "scoring" in raw else ScoringRules(),
        lmeval_task=(lmeval or {}).get("task"),
        build_by_default=bool(dataset.get("build_by_default", True)),
        run_by_default=raw.get("run_by_default", False),
        extra=dict(raw.get("extra") or {}),
        eval_passes=passes,
        requests=requests,
        metrics=metrics,
        groups=groups,
        outputs=outputs,
    )


_OUTPUT_FILES = ("record", "replies", "cache")


def _probe_files(raw: dict[str, Any], label: str) -> ProbeFiles | None:
    """A ``probes`` task's ``outputs``: ``{"record": "x.json", "replies": "x.parquet", "cache": "x.sqlite",
    "versions": [package, ...]}`` (required for that kind, absent for the others)."""
    outputs = raw.get("outputs")
    if raw["kind"] != "probes":
        if outputs is not None:
            raise ValueError(f"{label}: 'outputs' belongs to a 'probes' task only")
        return None
    fix = '{"record": "NAME.json", "replies": "NAME.parquet", "cache": "NAME.sqlite", "versions": [...]}'
    if not isinstance(outputs, dict) or not all(isinstance(outputs.get(k), str) and outputs[k] for k in _OUTPUT_FILES):
        raise ValueError(f"{label}: a 'probes' task needs 'outputs', {fix}")
    versions = outputs.get("versions", [])
    report = outputs.get("report", "report.md")
    stray = sorted(set(outputs) - {*_OUTPUT_FILES, "versions", "report"})
    if (
        stray
        or not isinstance(versions, list)
        or not all(isinstance(v, str) and v for v in versions)
        or not (isinstance(report, str) and report)
    ):
        raise ValueError(f"{label}: 'outputs' must be {fix} (and optionally 'report': its file name)")
    names = [outputs[k] for k in _OUTPUT_FILES]
    if len(set(names)) != len(names) or any("/" in n or "\\" in n or n.startswith(".") for n in names):
        raise ValueError(f"{label}: 'outputs' names three different files in the run folder, got {names}")
    return ProbeFiles(
        record=outputs["record"],
        replies=outputs["replies"],
        cache=outputs["cache"],
        versions=tuple(versions),
        report=report,
    )


def _check_groups(extra: dict[str, Any], label: str) -> None:
    """A task's own ``extra.group_order`` (group names, the order its scores are reported in) and
    ``extra.comparisons`` (pairs of groups, the gaps tested), where it declares them: one line naming the field."""
    order, pairs = extra.get("group_order"), extra.get("comparisons")
    if order is not None and not (isinstance(order, list) and all(isinstance(g, str) and g for g in order)):
        raise ValueError(f"{label}: 'extra.group_order' must be a list of group names")
    if pairs is not None and not (
        isinstance(pairs, list)
        and all(isinstance(p, list) and len(p) == 2 and all(isinstance(g, str) for g in p) for p in pairs)
    ):
        raise ValueError(f"{label}: 'extra.comparisons' must be a list of [group, group] pairs")


_REQUEST_PARTS = ("requests", "metrics", "groups")
_REQUEST_TYPES = ("fill_mask", "loglikelihood", "generate")


def _request_parts(raw: dict[str, Any], label: str) -> tuple[dict[str, str], tuple[MetricSpec, ...], GroupSpec | None]:
    """A task's ``requests`` (method → request type) and ``metrics``, checked, and a ``requests`` task's ``groups``.

    A ``requests`` task and a ``blanks`` task declare both: a ``blanks`` task's methods turn its sentences into
    requests of those types too, and its metrics name the per-group blocks its scoring rules compute (``column``:
    the block of its scores, e.g. the QueerBench score and its components), which its result record carries. A
    ``blanks`` task's groups are the subject groups (:mod:`queerbench.scoring.groups`). A ``probes`` task asks only
    ``generate`` requests and its plan reads its groups from the replies; it may declare ``metrics``, which its
    plan computes per group for its result record (``column``: what the plan reads, e.g. a rating and its axis)."""
    if raw["kind"] == "probes":
        stray = [k for k in ("requests", "groups") if k in raw]
        if stray:
            raise ValueError(f"{label}: {stray} belong to a 'requests' or 'blanks' task only")
        return {}, (_metrics(raw["metrics"], label, measurements=True) if "metrics" in raw else ()), None
    if raw["kind"] == "blanks" and "groups" in raw:
        raise ValueError(f"{label}: a 'blanks' task's groups are the subject groups; drop 'groups'")
    requests = raw.get("requests")
    if not isinstance(requests, dict) or set(requests) != set(raw["methods"]):
        raise ValueError(f"{label}: 'requests' must map each of its methods to a request type")
    bad = {m: t for m, t in requests.items() if t not in _REQUEST_TYPES}
    if bad:
        raise ValueError(f"{label}: 'requests' names unknown request types {bad}; one of {', '.join(_REQUEST_TYPES)}")
    metrics = _metrics(raw.get("metrics"), label)
    if raw["kind"] == "blanks":
        unknown = sorted({m.column for m in metrics} - set(SCORE_BLOCKS))
        if unknown:
            raise ValueError(
                f"{label}: a 'blanks' task's metrics name blocks of its scores as their 'column'; {unknown} is none "
                f"of {', '.join(SCORE_BLOCKS)}"
            )
        return dict(requests), tuple(metrics), None
    groups = raw.get("groups")
    fields_ok = isinstance(groups, dict) and isinstance(groups.get("column"), str)
    order = groups.get("order") if isinstance(groups, dict) else None
    if not fields_ok or not isinstance(order, list) or not order or not all(isinstance(g, str) for g in order):
        raise ValueError(f"{label}: 'groups' needs 'column' (an item column) and 'order' (the groups, in order)")
    assert isinstance(groups, dict)
    stray = sorted(set(groups) - {"column", "order", "cluster", "breakdowns"})
    breakdowns = groups.get("breakdowns", [])
    if stray or not isinstance(groups.get("cluster", ""), str) or not isinstance(breakdowns, list):
        raise ValueError(f"{label}: 'groups' holds column, order, cluster (a column) and breakdowns (columns)")
    spec = GroupSpec(
        column=groups["column"],
        order=tuple(order),
        cluster=groups.get("cluster", "template_id"),
        breakdowns=tuple(str(b) for b in breakdowns),
    )
    return dict(requests), tuple(metrics), spec


def _metrics(raw: Any, label: str, *, measurements: bool = False) -> tuple[MetricSpec, ...]:
    """A task's ``metrics``, checked: a non-empty list of ``{name, column, title, higher_is_better, decimals}``
    objects with distinct names (``higher_is_better`` null only where ``measurements``: a ``probes`` task's, whose
    metrics may have no better direction); anything else is one line naming the field."""
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{label}: 'metrics' must be a non-empty list of {{name, column, title}} objects")
    metrics = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict) or not all(
            isinstance(m.get(k), str) and m.get(k) for k in ("name", "column", "title")
        ):
            raise ValueError(f"{label}: metrics[{i}] needs 'name', 'column' and 'title' strings")
        stray = sorted(set(m) - {"name", "column", "title", "higher_is_better", "decimals"})
        if stray:
            raise ValueError(f"{label}: metrics[{i}] has unknown field(s) {stray}")
        direction = m.get("higher_is_better", True)
        if not (isinstance(direction, bool) or (measurements and direction is None)):
            allowed = "true, false or null (no better direction)" if measurements else "true or false"
            raise ValueError(f"{label}: metrics[{i}]: 'higher_is_better' is {allowed}, got {direction!r}")
        decimals = m.get("decimals", 3)
        if not isinstance(decimals, int) or isinstance(decimals, bool) or not 0 <= decimals <= MAX_DECIMALS:
            raise ValueError(f"{label}: metrics[{i}]: 'decimals' is an integer from 0 to {MAX_DECIMALS}")
        metrics.append(MetricSpec(**m))
    if len({m.name for m in metrics}) != len(metrics):
        raise ValueError(f"{label}: 'metrics' names one metric twice")
    return tuple(metrics)


_PASS_FIELDS = {"method", "k", "prompt", "note"}


def _eval_passes(raw: Any, label: str, methods: list[str]) -> tuple[EvalPass, ...] | None:
    """A task's ``eval_passes``, checked: absent or null (None: each method at the eval's ``--top-k``), else a
    non-empty list of ``{"method": one of the task's methods, "k": a positive integer (absent: --top-k), "prompt": a
    prompt id (of a method that takes one: checked by the method registry's ``check_task_spec``), "note": why}``, no two
    alike; anything else is one line naming the field."""
    if raw is None:
        return None
    fix = 'e.g. [{"method": "mlm", "k": 1}, {"method": "instructed", "k": 1, "prompt": "queergen-2"}]'
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{label}: 'eval_passes' must be a non-empty list of passes ({fix}) or absent")
    passes = []
    for i, entry in enumerate(raw):
        where = f"{label}: eval_passes[{i}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be an object ({fix})")
        stray = sorted(set(entry) - _PASS_FIELDS)
        if stray:
            raise ValueError(f"{where}: unknown field(s) {stray}; a pass has {', '.join(sorted(_PASS_FIELDS))}")
        method, k, prompt, note = entry.get("method"), entry.get("k"), entry.get("prompt"), entry.get("note", "")
        if method not in methods:
            raise ValueError(
                f"{where}: 'method' must be one of the task's methods ({', '.join(methods)}), got {method!r}"
            )
        if k is not None and not (isinstance(k, int) and not isinstance(k, bool) and k >= 1):
            raise ValueError(f"{where}: 'k' must be a positive integer (or absent: the eval's --top-k), got {k!r}")
        if prompt is not None and (not isinstance(prompt, str) or not prompt):  # its method's: the method registry's
            raise ValueError(f"{where}: 'prompt' names the prompt id of the pass, got {prompt!r} for {method}")
        if not isinstance(note, str):
            raise ValueError(f"{where}: 'note' must be a string, got {note!r}")
        passes.append(EvalPass(method=method, k=k, prompt=prompt, note=note))
    seen = [(p.method, p.k, p.prompt) for p in passes]
    if len(set(seen)) != len(seen):
        raise ValueError(f"{label}: 'eval_passes' names one pass twice (same method, k and prompt)")
    return tuple(passes)


def load_specs(path: str | Path) -> dict[str, TaskSpec]:
    """The task specs of a data file ``{"schema_version": 1, "tasks": [...]}``, by name, checked."""
    path = Path(path)
    where = f"task file {path.name}"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{where} cannot be read ({exc})") from None
    if not isinstance(raw, dict) or raw.get("schema_version") != 1 or not isinstance(raw.get("tasks"), list):
        raise ValueError(f"{where}: expected an object with schema_version 1 and a list 'tasks'")
    specs = [_spec(entry, where) for entry in raw["tasks"]]
    return {s.name: s for s in specs}
