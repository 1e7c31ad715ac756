"""The request runner: any ``requests`` task, any backend, one folder, resumable, one result record.

A ``requests`` task (:mod:`queerbench.tasks.spec`) turns each item into requests of the type its method names
(:mod:`queerbench.models.requests`) and scores each item from their results; this module does everything else, the
same way for every such task: it resolves the run once (:class:`RequestRun`: the task, method, request type and
model as objects, every check before anything loads), holds the output folder (one writer, ``run.json`` with the
run's key and the model's fingerprint), asks the backend (:mod:`queerbench.models.backends`) for the results of the
items not yet saved, in parts written atomically under ``OUT/.chunks`` (a killed run resumes where it stopped),
writes ``predictions.parquet`` (the items with their per-item columns) and ``model.json``, computes the task's
declared metrics per group with CIs over clusters (:mod:`queerbench.scoring.metrics`) and writes the typed result
record ``scores.json`` (:mod:`queerbench.reporting.record`), ``report.md`` and a figure
(:mod:`queerbench.reporting.metrics_report`). A rerun of a finished run reuses its predictions and does no inference.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

import pandas as pd

from queerbench.base.progress import progress_bar
from queerbench.base.redact import redact_url
from queerbench.base.signature import format_signature
from queerbench.methods.base import Rows
from queerbench.methods.registry import get_method, resolve_method
from queerbench.models.backends import StreamingBackend, check_request_type, open_backend
from queerbench.models.generation.cache import ResponseCache
from queerbench.models.generation.settings import DEFAULT_REQUESTS_PER_MINUTE
from queerbench.models.registry import ModelRef, model_ref
from queerbench.models.requests import GENERATE, Backend, Generate, Request, Result
from queerbench.models.spec import ModelSpec
from queerbench.reporting.metrics_report import write_metrics_report
from queerbench.reporting.record import RunRecord, write_record
from queerbench.run.folder import (
    check_same_model,
    claim_out_dir,
    inspect_out_dir,
    literal_meaning,
)
from queerbench.run.parts import PartSaver, read_parts
from queerbench.run.runner import held_folder, predictions_in
from queerbench.scoring.metric_results import ResultGroups
from queerbench.scoring.metrics import group_metrics
from queerbench.tasks import Task, get_task

__all__ = ["PART_ITEMS", "RequestRun", "RequestRunResult", "resolve_request_run", "run_requests"]

PART_ITEMS = 32
"""Items per saved part: an interrupted run loses at most this many items' requests."""


@dataclass(frozen=True)
class RequestRun:
    """One run, resolved once: the task, the method and the request type it turns items into, the model, and the
    settings of the model (device, dtype, batch size, concurrency, timeout) and of the statistics."""

    task: Task
    method: str
    request_type: str
    model: ModelRef
    limit: int | None = None
    model_spec: ModelSpec = field(default_factory=ModelSpec)
    """How the model runs (device, dtype, batch size, concurrency, timeout)."""
    n_resamples: int = 1000
    n_permutations: int = 1000
    seed: int = 0

    def key(self) -> dict[str, Any]:
        """What must match for saved predictions to be reused (``run.json``): task, method, request type, model,
        revision, endpoint (without credentials), templates, dtype."""
        return {
            "config": self.task.name,
            "method": self.method,
            "request_type": self.request_type,
            "model": self.model.name,
            "revision": self.model.revision,
            "endpoint": redact_url(self.model.endpoint) if self.model.endpoint else None,
            "limit": self.limit,
            "dtype": self.model_spec.dtype,
        }

    def folder_name(self) -> str:
        """``<model>-<task>-<method>`` plus ``-limit<N>``, ``-rev<revision>`` and ``-<dtype>`` when set."""
        name = f"{_slug(self.model.name)}-{self.task.name}-{self.method}"
        if self.limit is not None:
            name += f"-limit{self.limit}"
        if self.model.revision:
            name += f"-rev{_slug(self.model.revision)}"
        if self.model_spec.dtype != "float32":
            name += f"-{self.model_spec.dtype}"
        return name

    def signature(self, fingerprint: dict[str, Any] | None = None) -> str:
        """What produced the result, as one line: task, method, request type, model (and fingerprint), templates,
        dtype, the metrics and the version."""
        from queerbench.run.signature import fingerprint_label

        fp = fingerprint_label(fingerprint)
        pairs: list[tuple[str, Any]] = [
            ("task", self.task.name),
            ("method", self.method),
            ("request", self.request_type),
            ("model", self.model.name),
            *([("rev", self.model.revision)] if self.model.revision else []),
            *([("endpoint", redact_url(self.model.endpoint))] if self.model.endpoint else []),
            *([("fp", fp)] if fp else []),
            ("limit", "all" if self.limit is None else self.limit),
            ("dtype", self.model_spec.dtype),
            ("metrics", "+".join(m.name for m in self.task.spec.metrics)),
            ("ci", f"bootstrap{self.n_resamples}/signflip{self.n_permutations}/seed{self.seed}"),
            ("qb", _version()),
        ]
        return format_signature(pairs)


@dataclass(frozen=True)
class RequestRunResult:
    """Where a request run wrote its outputs, its record, and whether inference was reused."""

    out: Path
    record: RunRecord
    reused_predictions: bool
    n_predicted: int


def _version() -> str:
    from queerbench import __version__

    return __version__


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text.strip("/")).strip("_") or "x"


def resolve_request_run(
    config: str | Task,
    *,
    model: str | None = None,
    endpoint: str | None = None,
    revision: str | None = None,
    method: str = "auto",
    limit: int | None = None,
    device: str = "auto",
    dtype: str = "float32",
    device_map: str | None = None,
    batch_size: int = 16,
    concurrency: int = 8,
    requests_per_minute: float | None = DEFAULT_REQUESTS_PER_MINUTE,
    request_timeout: float | None = None,
    n_resamples: int = 1000,
    n_permutations: int = 1000,
    seed: int = 0,
) -> RequestRun:
    """Resolve a run of a ``requests`` task once, every check first, in one line each: the task, the method (``auto``
    from the model's configuration), the request type the task needs for it, whether the model's kind answers that
    type (no weights read), the settings. ``config``: the task's name, or the task already looked up."""
    task = config if isinstance(config, Task) else get_task(config)
    if not task.runs_requests:
        raise ValueError(f"--config {task.name} is not run on the request runner ({task.spec.title})")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise ValueError(f"--limit must be at least 1 template (or omitted for all), got {limit}")
    spec = ModelSpec.from_flags(
        endpoint,
        device=device,
        dtype=dtype,
        device_map=device_map,
        batch_size=batch_size,
        concurrency=concurrency,
        requests_per_minute=requests_per_minute,
        request_timeout=request_timeout,
    )
    if not isinstance(n_resamples, int) or n_resamples < 0:
        raise ValueError(f"--bootstrap must be a non-negative integer (resamples for the CIs), got {n_resamples!r}")
    if not isinstance(n_permutations, int) or n_permutations < 0:
        raise ValueError(
            f"--permutations must be a non-negative integer (draws of the gap's test), got {n_permutations!r}"
        )
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"--seed must be a non-negative integer (it seeds the resamples), got {seed!r}")
    if model is None and not endpoint:
        model = get_method(method).default_model
    ref = model_ref(model, endpoint, revision)
    method = resolve_method(method, ref.name, endpoint, revision, ref=ref)
    request_type = task.request_type(method)
    check_request_type(ref, request_type)
    if limit is not None and limit >= task.n_templates():
        limit = None  # a --limit covering every template is no limit, wherever recorded
    return RequestRun(
        task=task,
        method=method,
        request_type=request_type,
        model=ref,
        limit=limit,
        model_spec=spec,
        n_resamples=n_resamples,
        n_permutations=n_permutations,
        seed=seed,
    )


# ------------------------------------------------------------------------------------------------ the folder --
def _saved(chunks: Path, ids: list[str]) -> pd.DataFrame:
    """The rows every saved part holds, in the order of ``ids`` (the run's items), checked as a fill-in-the-blank
    run's are (:func:`~queerbench.run.parts.read_parts`: every id one of the run's, none in two files, every part
    with the columns of the others); empty when none."""
    if not chunks.is_dir():
        return pd.DataFrame({"id": pd.Series([], dtype=object)})
    return read_parts(chunks, ids, noun="items", in_order=False, required=("id",))


# ------------------------------------------------------------------------------------------------ the work --
def _ask(backend: Backend, request_type: str, requests: list[Request], tick: Callable[[int], None]) -> list[Result]:
    """The backend's results for ``requests`` (all of ``request_type``), one per request, in order."""
    call = getattr(backend, request_type)
    results = list(call(requests, tick))
    if len(results) != len(requests):
        raise RuntimeError(f"{backend.name} answered {len(results)} of {len(requests)} {request_type} requests")
    return results


def _rows(items: list[dict[str, Any]], scored: list[dict[str, Any]], *, checkpoint: bool = False) -> Rows:
    """Scored items as the rows a part saver gathers (``checkpoint``: a part that ends here, saved at once)."""
    names = dict.fromkeys(column for row in scored for column in row)
    columns = {column: [row.get(column) for row in scored] for column in names}
    return Rows([item["id"] for item in items], columns, checkpoint=checkpoint)


def _predict(run: RequestRun, backend: Backend, todo: pd.DataFrame, saver: PartSaver) -> int:
    """Ask for the items of ``todo`` in parts of :data:`PART_ITEMS`, each part saved as it ends (``saver``: the
    run's parts, as a fill-in-the-blank run saves its own); returns how many. A backend that streams ``generate``
    replies (an endpoint: :class:`~queerbench.models.backends.StreamingBackend`) is asked every item's requests in
    one stream instead (:func:`_predict_streamed`)."""
    if run.request_type == GENERATE and isinstance(backend, StreamingBackend):
        return _predict_streamed(run, backend, todo, saver)
    records = cast("list[dict[str, Any]]", todo.to_dict("records"))
    n_requests = sum(len(run.task.requests(item, run.method)) for item in records)
    done = 0
    with progress_bar(n_requests, f"{run.task.name} {run.request_type}", "req") as bar:
        for start in range(0, len(records), PART_ITEMS):
            part = records[start : start + PART_ITEMS]
            asked = [run.task.requests(item, run.method) for item in part]
            flat = [r for reqs in asked for r in reqs]
            results = _ask(backend, run.request_type, flat, bar.update)
            scored, at = [], 0
            for item, reqs in zip(part, asked, strict=True):
                scored.append(run.task.score_item(item, results[at : at + len(reqs)], run.method))
                at += len(reqs)
            saver.add(_rows(part, scored, checkpoint=True))  # the part ends here: one file
            done += len(part)
    return done


def _predict_streamed(run: RequestRun, backend: StreamingBackend, todo: pd.DataFrame, saver: PartSaver) -> int:
    """:func:`_predict` through one stream of every item's ``generate`` requests, read as the stream goes: each item
    is scored when its last reply arrives, and the items scored are saved in groups of :data:`PART_ITEMS` or every
    15 seconds (and whatever stops the stream: a failed prompt, a dead server, Ctrl-C), so every slot stays busy
    across groups and a slow or retried request holds up nothing but its own item."""
    records = cast("list[dict[str, Any]]", todo.to_dict("records"))
    n_requests = sum(len(run.task.requests(item, run.method)) for item in records)
    owner: dict[int, tuple[int, int]] = {}  # a request asked and not yet answered: its item and place there
    results: dict[int, list[Result | None]] = {}  # the results of the items asked and not yet complete
    done = 0

    def score(k: int, got: list[Result | None]) -> None:
        nonlocal done
        saver.add(_rows([records[k]], [run.task.score_item(records[k], cast("list[Result]", got), run.method)]))
        done += 1

    def requests() -> Iterator[Generate]:
        n = 0
        for k, item in enumerate(records):
            asked = cast("list[Generate]", run.task.requests(item, run.method))
            if not asked:  # an item with no request is scored at once
                score(k, [])
                continue
            results[k] = [None] * len(asked)
            for j, request in enumerate(asked):
                owner[n] = (k, j)
                n += 1
                yield request

    with progress_bar(n_requests, f"{run.task.name} {run.request_type}", "req") as bar:
        try:
            with contextlib.closing(backend.stream_generate(requests(), bar.update)) as stream:
                for i, result in stream:
                    k, j = owner.pop(i)
                    got = results[k]
                    got[j] = result
                    if all(r is not None for r in got):
                        score(k, results.pop(k))
        except BaseException:
            with contextlib.suppress(Exception):  # the error that stopped the stream is the one to report
                saver.save()  # the items scored so far (their replies are in the reply cache either way)
            raise
        saver.save()
    return done


def _kept(out: Path, ids: list[str]) -> str:
    """What a stopped run kept of the items ``ids`` (their results, and replies) and what a rerun does, in one
    clause (:func:`~queerbench.run.runner.predictions_in` says it after Ctrl-C or a failed write)."""
    chunks, n_items = out / ".chunks", len(ids)
    n_saved: int | None
    try:
        n_saved = len(_saved(chunks, ids))
    except (ValueError, OSError):  # a damaged or unreadable part: the rerun names it
        n_saved = None
    cache = chunks / "replies.sqlite"
    n_replies = 0
    if cache.is_file():
        with ResponseCache(cache) as replies:
            n_replies = replies.count()
    also = f", and {n_replies} replies in {cache}" if n_replies else ""
    only = ", only the requests whose replies are not saved" if n_replies else ""
    if n_saved is None:
        return (
            f"the results saved in {chunks}{also} are kept (they could not be counted); rerun the same command to "
            f"resume (it asks the rest{only})"
        )
    return (
        f"the results of {n_saved} of {n_items} items are saved in {chunks}{also}; rerun the same command to "
        f"resume (it asks the other {n_items - n_saved}{only})"
    )


def run_requests(
    run: RequestRun, out: str | Path | None = None, *, log: Callable[[str], None] = print, loaded: Any = None
) -> RequestRunResult:
    """Run ``run`` into ``out`` (default ``runs/<folder name>``), resuming or reusing what is there. ``loaded``: the
    run's model already loaded by :func:`~queerbench.models.registry.load_model` (the Space's cached models), answered
    from instead of loading it again (:func:`~queerbench.models.backends.open_backend`)."""
    chosen = out is not None
    out = Path(out) if out is not None else Path("runs") / run.folder_name()
    with held_folder(out, chosen) as created:  # one writer per folder
        return _run_locked(run, out, chosen, created, log, loaded)


def _run_locked(
    run: RequestRun, out: Path, chosen: bool, created: bool, log: Callable[[str], None], loaded: Any = None
) -> RequestRunResult:
    key = run.key()
    state, stored = inspect_out_dir(out, key, chosen=chosen, meaning=literal_meaning)  # writes nothing
    fingerprint = run.model.fingerprint()
    if state in ("resume", "finished"):
        check_same_model(out, run.model.name, stored, fingerprint)
    claim_out_dir(out, {**key, "model_fingerprint": fingerprint, "signature": run.signature(fingerprint)}, state)
    items = run.task.first_templates(run.task.items(), run.limit)
    ids, chunks = items["id"].tolist(), out / ".chunks"

    def predict() -> tuple[pd.DataFrame, dict[str, Any], int]:
        saved = _saved(chunks, ids)
        todo = items[~items["id"].isin(set(saved["id"]))]
        if state == "resume":
            log(f"resuming the run in {out}: {len(saved)} of {len(items)} items saved")
        if not len(todo):
            return saved, {}, 0
        # generate replies, and every call an endpoint makes (its top-k fill_mask's), are kept as they arrive: a run
        # stopped within a part asks only the missing ones
        keep_replies = run.request_type == GENERATE or run.model.endpoint is not None
        replies = ResponseCache(chunks / "replies.sqlite") if keep_replies else None
        try:
            backend = open_backend(
                run.model, run.request_type, run.model_spec, log=log, loaded=loaded, reply_cache=replies
            )
            try:
                meta = {**backend.metadata(), "fingerprint": fingerprint}
                chunks.mkdir(parents=True, exist_ok=True)
                n_predicted = _predict(run, backend, todo, PartSaver(ids, chunks, every=PART_ITEMS))
            finally:
                backend.close()
        finally:
            if replies is not None:
                replies.close()
        return _saved(chunks, ids), meta, n_predicted

    def assemble(saved: pd.DataFrame, meta: dict[str, Any]) -> tuple[pd.DataFrame, dict[str, Any]]:
        predictions = items.drop(columns=["split"], errors="ignore").copy()
        predictions["method"] = run.method
        predictions = predictions.merge(saved, on="id", how="left", validate="one_to_one")
        return predictions, meta or {"fingerprint": fingerprint}

    made = predictions_in(
        out, created=created, predict=predict, assemble=assemble, noun="item", kept=lambda: _kept(out, ids), log=log
    )
    predictions, meta, reused, n_predicted = made.frame, made.meta, made.reused, made.n_predicted
    timings = {"predict_s": made.seconds}
    record = _record(run, predictions, meta, fingerprint, reused, timings)
    write_record(out, record)
    write_metrics_report(out, record, predictions)
    return RequestRunResult(out=out, record=record, reused_predictions=reused, n_predicted=n_predicted)


def _record(
    run: RequestRun,
    predictions: pd.DataFrame,
    meta: dict[str, Any],
    fingerprint: dict[str, Any],
    reused: bool,
    timings: dict[str, float],
) -> RunRecord:
    """The result record: the declared metrics per group with CIs over clusters, and what produced them."""
    spec, groups = run.task.spec, run.task.spec.groups
    assert groups is not None  # a requests task's spec always has them (tasks.spec checks)
    t0 = time.perf_counter()
    headline = run.task.headline_gap if spec.extra.get("headline_gap") else None
    results = group_metrics(
        predictions,
        metrics=[(m.name, m.column) for m in spec.metrics],
        group_column=groups.column,
        order=groups.order,
        cluster_column=groups.cluster,
        breakdowns=groups.breakdowns,
        headline=headline,
        n_resamples=run.n_resamples,
        n_permutations=run.n_permutations,
        seed=run.seed,
    )
    timings = {**timings, "score_s": time.perf_counter() - t0}
    parsed = predictions["parsed"] if "parsed" in predictions and run.request_type == GENERATE else None
    return RunRecord(
        task=run.task.name,
        benchmark=run.task.benchmark,
        method=run.method,
        request_type=run.request_type,
        model=run.model.name,
        model_fingerprint=fingerprint,
        signature=run.signature(fingerprint),
        settings={**run.key(), "n_resamples": run.n_resamples, "n_permutations": run.n_permutations, "seed": run.seed},
        declared_metrics=list(spec.metrics),
        groups=ResultGroups(
            column=groups.column,
            order=list(groups.order),
            cluster=groups.cluster,
            breakdowns=list(groups.breakdowns),
            headline=list(headline) if headline else None,
        ),
        results=results,
        n_items=len(predictions),
        backend={k: v for k, v in meta.items() if k != "fingerprint"},
        timings_s=timings,
        reused_predictions=reused,
        parse_rate=None if parsed is None or not len(parsed) else float(parsed.astype(bool).mean()),
        finished=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
