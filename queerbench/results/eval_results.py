"""An eval's results where the Hub shows them: ``.eval_results/<name>.yaml`` in the model's repo, and the task ids of
the benchmark's ``eval.yaml`` they rank under.

The Hub reads a model's scores from YAML files in its repo's ``.eval_results/`` folder (huggingface_hub's
:class:`~huggingface_hub.EvalResultEntry`; ``model-index`` in the card is the legacy form) and ranks them on the
leaderboards of the benchmark dataset they name, one leaderboard per task id of that dataset's ``eval.yaml``.

``queerbench eval`` writes, next to its ``model-index.yaml``, one file per result row (a task, method and metric under
one ``k``, toxicity scorer and coverage: the variants the Hub wants in separate files) holding one entry per group
with a score: the released dataset (``hub_configs/release.json``), the task id, the value, the dataset revision (the
release tag of this version), a source and notes naming the metric, method, ``k``, toxicity scorer and, for a
``--limit`` pass, that it covers only the first templates. It records what it wrote, with each file's SHA-256, in
``eval_results.json``: ``queerbench results push DIR --pull-request`` uploads exactly those files.

A task id is ``<dataset config>_<metric id>_<group>`` (``default_score_queer``, ``scm_warmth_free_gay_men``): the
metric ids are each task's :meth:`~queerbench.tasks.Task.leaderboard_metrics` and the groups are the ``group``
values of its dataset splits, so that ``dataset build`` derives the ``eval.yaml`` tasks from the same data
(:func:`benchmark_tasks`). Only tasks whose config the release publishes get entries (QueerGen's sentences are not
redistributed): the others are listed in ``eval_results.json`` under ``left_out`` with the reason. ``k``, the
toxicity scorer and the coverage are not part of the id (any ``--top-k`` is possible), so a Hub leaderboard may hold
rows that ``queerbench leaderboard show`` would not rank together; the notes say which is which.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from queerbench import __version__
from queerbench.base.files import read_json_object, write_json, write_text
from queerbench.base.release_config import load_release_config
from queerbench.reporting.rows import ResultRow
from queerbench.tasks import Task, all_tasks

if TYPE_CHECKING:
    import pandas as pd
    from huggingface_hub import EvalResultEntry

__all__ = [
    "BENCHMARK_FILE",
    "EVAL_RESULTS_DIR",
    "EVAL_RESULTS_MANIFEST",
    "benchmark_problem",
    "benchmark_tasks",
    "eval_result_files",
    "read_eval_results_manifest",
    "row_task_id",
    "task_id",
    "write_eval_results",
]

EVAL_RESULTS_DIR = ".eval_results"
EVAL_RESULTS_MANIFEST = "eval_results.json"
BENCHMARK_FILE = "eval.yaml"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def _slug(text: str) -> str:
    return _UNSAFE.sub("_", text).strip("_.") or "x"


def task_id(config: str, metric_id: str, group: str) -> str:
    """The Hub task id of one group's score under one metric of one dataset config (``default_score_non-queer``)."""
    return _slug(f"{config}_{metric_id}_{group}")


def _task_of_config(config: str) -> Task | None:
    return next((t for t in all_tasks().values() if t.spec.dataset_config == config), None)


def benchmark_tasks(splits: Mapping[str, Mapping[str, pd.DataFrame]]) -> list[dict[str, str]]:
    """The ``tasks`` of the benchmark's ``eval.yaml`` for the dataset configs in ``splits`` (``{config: {split:
    frame}}``, as ``dataset build`` made them): per metric of the config's task and per ``group`` value of its
    splits, in the order they appear, the task id with the config and the first split that holds the group. A task
    id that two (config, metric, group) share is a one-line ``ValueError``."""
    tasks: list[dict[str, str]] = []
    seen: dict[str, tuple[str, str, str]] = {}
    for config, frames in splits.items():
        task = _task_of_config(config)
        if task is None:
            raise ValueError(f"no task has the dataset config {config!r}")
        where: dict[str, str] = {}
        for split, frame in frames.items():
            if "group" in frame.columns:
                for group in dict.fromkeys(str(g) for g in frame["group"].dropna()):
                    where.setdefault(group, split)
        for metric_id in task.leaderboard_metrics().values():
            for group, split in where.items():
                tid = task_id(config, metric_id, group)
                if tid in seen and seen[tid] != (config, metric_id, group):
                    raise ValueError(f"the Hub task id {tid!r} names both {seen[tid]} and {(config, metric_id, group)}")
                seen[tid] = (config, metric_id, group)
                tasks.append({"id": tid, "config": config, "split": split})
    return tasks


def benchmark_problem(data: Any) -> str | None:
    """What makes ``data`` (a parsed ``eval.yaml``) no benchmark file as the Hub specifies it, in words (None when it
    is one): ``name``, ``description`` and ``evaluation_framework`` strings and a non-empty ``tasks`` list whose
    items have a unique string ``id`` and optionally a string ``config`` and ``split`` (the fields of a framework
    other than ``inspect-ai``)."""
    if not isinstance(data, dict):
        return "it is not a YAML mapping"
    for name in ("name", "description", "evaluation_framework"):
        if not isinstance(data.get(name), str) or not data[name].strip():
            return f"{name!r} must be a non-empty string"
    stray = sorted(set(data) - {"name", "description", "evaluation_framework", "tasks"})
    if stray:
        return f"unknown field(s) {stray}"
    tasks = data.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        return "'tasks' must be a non-empty list"
    ids: set[str] = set()
    for i, item in enumerate(tasks):
        if not isinstance(item, dict) or not isinstance(item.get("id"), str) or not item["id"]:
            return f"tasks[{i}] must be a mapping with a string 'id'"
        if item["id"] in ids:
            return f"task id {item['id']!r} appears twice"
        ids.add(item["id"])
        for name in ("config", "split"):
            if name in item and not isinstance(item[name], str):
                return f"tasks[{i}].{name} must be a string"
        stray = sorted(set(item) - {"id", "config", "split"})
        if stray:
            return f"tasks[{i}] has unknown field(s) {stray}"
    return None


def row_task_id(row: ResultRow, released: tuple[str, ...]) -> tuple[tuple[str, str] | None, str]:
    """The dataset config and metric id that name ``row``'s Hub task ids (a group is added per entry:
    :func:`task_id`) and, when it has none, why: an unknown task, a metric its task names no id for, or a dataset
    config the release does not publish (``released``)."""
    task = all_tasks().get(row.task)
    if task is None:
        return None, f"task {row.task} is not registered here"
    metric_id = task.leaderboard_metrics().get(row.metric)
    if metric_id is None:
        return None, f"its metric {row.metric!r} has no Hub task id"
    config = task.spec.dataset_config
    if config not in released:
        return None, (
            f"its dataset config {config!r} is not in the released dataset (hub_configs/release.json "
            f"dataset_configs: {', '.join(released)}), so no leaderboard of it can rank this row"
        )
    return (config, metric_id), ""


def _notes(row: ResultRow) -> str:
    """What the Hub shows beside the value: the metric (and which way is better), method, ``k``, toxicity scorer and
    what the row covers (a ``--limit`` pass or a subset of the sentences is said so)."""
    if row.sentences:
        coverage = f"a subset of the sentences ({row.sentences}), not comparable with whole runs"
    elif row.limit is not None:
        templates = "template" if row.limit == 1 else "templates"
        coverage = f"--limit {row.limit}: the first {row.limit} {templates} of each task only, a quick pass not comparable with whole runs"
    else:
        coverage = "all templates"
    declared = "higher_is_better" in row.extra  # a metric a task declares says which way is better
    direction = f", {row.direction()}" if declared or row.metric == "QueerBench score" else ""
    k = row.k if row.k is not None else "n/a"
    return f"{row.metric}{direction}; method {row.method}; k={k}; toxicity {row.toxicity}; {coverage}"


def _file_name(row: ResultRow, metric_id: str) -> str:
    k = f"k{row.k}" if row.k is not None else "k-na"
    limit = f"_limit{row.limit}" if row.limit is not None else ""
    subset = f"_subset-{row.sentences}" if row.sentences else ""
    return _slug(f"queerbench_{row.task}_{metric_id}_{row.method}_{k}_{row.toxicity}{limit}{subset}") + ".yaml"


def eval_result_files(
    document: dict[str, Any], *, dataset_id: str, revision: str, source_url: str
) -> tuple[dict[str, list[EvalResultEntry]], list[dict[str, Any]]]:
    """The ``.eval_results`` files of an eval's results ``document``: ``{file name: entries}`` (one file per row,
    one entry per group with a score), and the rows left out with the reason."""
    from huggingface_hub import EvalResultEntry

    released = tuple(load_release_config().dataset_configs)
    files: dict[str, list[EvalResultEntry]] = {}
    left_out: list[dict[str, Any]] = []
    for data in document["rows"]:
        row = ResultRow.from_dict(data)
        key, why = row_task_id(row, released)
        scored = {g: v for g in row.scores if (v := row.headline(g)) is not None}
        if key is None or not scored:
            reason = why or "no group has a score (a run scored without toxicity, or no reply could be read)"
            left_out.append({"task": row.task, "method": row.method, "metric": row.metric, "reason": reason})
            continue
        config, metric_id = key
        name = _file_name(row, metric_id)
        if name in files:
            digest = hashlib.sha256(row.signature.encode()).hexdigest()[:8]
            name = f"{name[: -len('.yaml')]}_{digest}.yaml"
        files[name] = [
            EvalResultEntry(
                dataset_id=dataset_id,
                task_id=task_id(config, metric_id, group),
                value=round(float(value), 4),
                dataset_revision=revision,
                source_url=source_url,
                source_name=f"queerbench {document.get('queerbench_version') or __version__} (queerbench eval)",
                notes=_notes(row),
            )
            for group, value in scored.items()
        ]
    return files, left_out


def write_eval_results(document: dict[str, Any], out: Path) -> dict[str, Any]:
    """Write the eval's ``.eval_results/*.yaml`` into ``out`` (each atomically; files an earlier write of this eval
    recorded and this one does not are removed, nothing else in the folder is touched) and then the record of what
    was written, ``eval_results.json``; returns that record."""
    import yaml
    from huggingface_hub import eval_result_entries_to_yaml

    out = Path(out)
    cfg = load_release_config()
    dataset_id, revision = cfg.repo_id("dataset"), cfg.tag(__version__)
    source_url = f"https://huggingface.co/spaces/{cfg.repo_id('metric')}/tree/{revision}"
    files, left_out = eval_result_files(document, dataset_id=dataset_id, revision=revision, source_url=source_url)
    earlier = _recorded(out)
    written: dict[str, str] = {}
    for name, entries in files.items():
        text = yaml.safe_dump(eval_result_entries_to_yaml(entries), sort_keys=False, allow_unicode=True)
        rel = f"{EVAL_RESULTS_DIR}/{name}"
        write_text(out / rel, text)
        written[rel] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    for rel in earlier:
        path = out / rel
        if rel not in written and path.is_file() and not path.is_symlink():
            path.unlink()
    record = {
        "schema_version": 1,
        "queerbench_version": __version__,
        "model": document.get("model"),
        "endpoint": document.get("endpoint"),
        "dataset": dataset_id,
        "revision": revision,
        "files": written,
        "left_out": left_out,
    }
    write_json(out / EVAL_RESULTS_MANIFEST, record)
    return record


def _recorded(out: Path) -> list[str]:
    """The files an earlier write recorded in ``out`` (none when there is no readable record)."""
    try:
        record = json.loads((out / EVAL_RESULTS_MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    files = record.get("files") if isinstance(record, dict) else None
    return [f for f in files if _own_path(f)] if isinstance(files, dict) else []


def _own_path(rel: Any) -> bool:
    """Whether ``rel`` is a path the eval writes: ``.eval_results/<one name>.yaml``."""
    return (
        isinstance(rel, str) and re.fullmatch(rf"{re.escape(EVAL_RESULTS_DIR)}/[A-Za-z0-9_.-]+\.yaml", rel) is not None
    )


def read_eval_results_manifest(folder: Path) -> dict[str, Any]:
    """``folder``'s ``eval_results.json``, checked: its ``files`` map ``.eval_results/<name>.yaml`` to a SHA-256.
    A folder without one (not an eval, or an eval written before these files were) or a malformed one is a
    one-line ``ValueError`` naming the fix."""
    folder = Path(folder)
    path = folder / EVAL_RESULTS_MANIFEST
    fix = f"rerun `queerbench eval` with the same settings and --out {folder} (finished parts are reused)"
    if not path.is_file():
        raise ValueError(f"{folder} holds no {EVAL_RESULTS_MANIFEST} (the Hub result entries an eval writes); {fix}")
    record = read_json_object(path, fix=fix)
    files = record.get("files")
    if not isinstance(files, dict) or not all(_own_path(k) and isinstance(v, str) for k, v in files.items()):
        raise ValueError(f"{path}: 'files' must map {EVAL_RESULTS_DIR}/<name>.yaml to its SHA-256; {fix}")
    return record
