"""The probe runner: any ``probes`` task, any generative model, one folder, resumable, one result record.

A ``probes`` task (:mod:`queerbench.tasks.probes`) resolves the user's settings into a plan; this module does the
rest, the same way for every such task. :func:`run_probes` checks the output folder (:mod:`.probe_folder`), holds
it (one writer), opens the model as every run opens its model (the backend that answers ``generate`` requests:
:func:`~queerbench.models.backends.open_backend`), claims the folder for it (``run.json``, as every run's folder),
asks it the plan's ``generate`` requests through the reply cache (a killed or failed run resumes with no repeated
calls; failed prompts are named and asked again by a rerun), lets the plan read the replies, and writes the stored
replies, the result record (the plan's result with the ``run`` block — model, fingerprint, the plan's settings,
cached and new calls, failed prompts, package versions — and the signature) and the plan's report.
:func:`reanalyze_probes` reads a finished run's stored replies again (no model).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from queerbench.base.files import atomic_path, read_json_object, read_parquet, write_json
from queerbench.base.lock import folder_lock
from queerbench.base.signature import format_signature, short_hash
from queerbench.models.backends import GenerateBackend
from queerbench.models.generation import ResponseCache
from queerbench.models.generation.collect import collect_groups
from queerbench.models.generation.failures import describe_failures, failed_prompts
from queerbench.models.generation.settings import (
    DEFAULT_CONCURRENCY,
    DEFAULT_REQUESTS_PER_MINUTE,
)
from queerbench.models.requests import GENERATE
from queerbench.models.spec import ModelSpec
from queerbench.reporting.record import RECORD_KINDS, RunRecord, write_record
from queerbench.run.parts import RunInterrupted
from queerbench.run.probe_folder import check_probe_folder, claim_probe_folder, probe_files, unclaim_probe_folder
from queerbench.tasks import Task
from queerbench.tasks.probes import ProbeAnalysis, ProbePlan

__all__ = [
    "check_model_settings",
    "model_label",
    "open_probe_model",
    "probe_record",
    "probe_signature",
    "reanalyze_probes",
    "run_probes",
]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def model_label(model: str | None, endpoint: str | None) -> str:
    """The model as a plan resolves its family from: the name an endpoint serves, a local model's id or path, or
    ``embedded`` (neither given: the embedded SmolLM2-135M-Instruct)."""
    return (model or "") if endpoint else (model or "embedded")


def check_model_settings(
    *,
    model: str | None = None,
    endpoint: str | None = None,
    device: str = "auto",
    dtype: str = "float32",
    device_map: str | None = None,
    requests_per_minute: float | None = DEFAULT_REQUESTS_PER_MINUTE,
    concurrency: int = DEFAULT_CONCURRENCY,
    request_timeout: float | None = None,
    batch_size: int | None = None,
) -> ModelSpec:
    """The model flags checked before anything else (one line each) and how the model runs: an endpoint needs the
    name of the model it serves; the device, dtype, device map, rate, requests in flight, timeout and batch size are
    a :class:`~queerbench.models.spec.ModelSpec`'s (``request_timeout`` None: the default; ``batch_size`` None: the
    spec's)."""
    if endpoint and not model:
        raise ValueError("--endpoint needs --model NAME (the model the endpoint serves)")
    return ModelSpec.from_flags(
        endpoint,
        device=device,
        dtype=dtype,
        device_map=device_map,
        concurrency=concurrency,
        requests_per_minute=requests_per_minute,
        request_timeout=request_timeout,
        **({"batch_size": batch_size} if batch_size is not None else {}),
    )


def open_probe_model(
    plan: ProbePlan,
    *,
    model: str | None = None,
    endpoint: str | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    log: Callable[[str], None] = _stderr,
    **settings: Any,
) -> GenerateBackend:
    """The model a plan's requests go to, as every run opens its model: the backend that answers ``generate``
    requests (:func:`~queerbench.models.backends.open_backend`) of a local model (the embedded
    SmolLM2-135M-Instruct when neither ``model`` nor ``endpoint`` is given) or of an OpenAI-compatible ``endpoint``
    serving ``model``; run as ``settings`` say (:func:`check_model_settings`: device, dtype, device map, requests
    per minute, concurrency, request timeout), with the plan's generator options (its system prompt, an endpoint's
    extra body, and the batch size of the requests the plan asks besides its ``generate`` groups, e.g. a local
    model's option scores). Checked before it loads: the settings, the URL, the API key rule, a missing folder, a
    model that cannot generate (a masked LM given as ``model``). Ctrl-C while it opens is one line
    (:class:`~queerbench.run.parts.RunInterrupted`): nothing was asked."""
    from queerbench.models.backends import open_backend
    from queerbench.models.registry import model_ref

    options = dict(plan.generator_options())
    system_prompt = options.pop("system_prompt", None)  # as given: an empty one is a system turn too
    batch_size = options.pop("batch_size", None)
    spec = check_model_settings(model=model, endpoint=endpoint, batch_size=batch_size, **settings)
    options = {k: v for k, v in options.items() if v is not None and v != {}}  # unset (e.g. --extra-body '{}')
    if endpoint:
        options["api_key_env"] = api_key_env
    ref = model_ref(model, endpoint, check_paths=False)  # the loader says what is missing
    if not endpoint:
        log(f"loading {model or 'the embedded SmolLM2-135M-Instruct'} …")
    try:
        backend = open_backend(
            ref,
            GENERATE,
            spec,
            log=log,
            announce=False,
            system_prompt=system_prompt,
            other_choice=None,  # a probes command has no --method: the fix is another model
            **options,
        )
    except KeyboardInterrupt:  # nothing was asked yet
        raise RunInterrupted(
            "interrupted while the model was opened: nothing was asked; rerun the same command to start"
        ) from None
    if not isinstance(backend, GenerateBackend):  # every model that answers generate does so through a runner
        backend.close()
        raise TypeError(f"{backend.name}: its generate requests are not answered by a generation runner")
    return backend


def run_probes(
    task: Task,
    out: str | Path,
    plan: ProbePlan,
    *,
    backend: GenerateBackend | None = None,
    cache_path: str | Path | None = None,
    log: Callable[[str], None] = _stderr,
    **model: Any,
) -> dict[str, Any]:
    """Run ``plan`` of ``task`` into ``out`` and return its result (the record as written).

    ``backend`` is the model (:func:`open_probe_model`'s; else opened by it with ``model``'s settings once the
    folder is held, and closed when the run ends). The plan's ``generate`` requests go to its runner; the plan reads
    the replies with the backend at hand (:meth:`~queerbench.tasks.probes.ProbePlan.analyze`: a task that also
    scores options asks it ``loglikelihood`` requests). Replies live in the task's reply cache in ``out`` (or
    ``cache_path``: ``queerbench eval`` shares one cache among its runs) as they arrive. The folder is checked
    before anything loads and again once the model is known, so another model's run is never overwritten.
    """
    out = Path(out)
    check_probe_folder(task, out, backend.generator().name if backend is not None else None)
    with folder_lock(out, f"{task.name} run"):  # one writer per folder (a command holding it already enters again)
        if backend is not None:
            return _run_locked(task, out, plan, backend, cache_path, log)
        opened = open_probe_model(plan, log=log, **model)  # Ctrl-C while it opens: one line, nothing asked
        try:
            return _run_locked(task, out, plan, opened, cache_path, log)
        finally:
            opened.close()


def _run_locked(
    task: Task,
    out: Path,
    plan: ProbePlan,
    backend: GenerateBackend,
    cache_path: str | Path | None,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """:func:`run_probes` once the folder is held and the model open."""
    files = probe_files(task)
    runner = backend.generator()
    # the model is known now: another model's run, or a changed local model folder, is refused; else claimed
    fingerprint = runner.fingerprint()
    claimed = claim_probe_folder(task, out, runner.name, _weights(fingerprint), fingerprint.get("base_url"))
    t0 = time.perf_counter()
    replies_path = Path(cache_path) if cache_path is not None else out / files.cache
    before = added = 0
    try:
        cache = ResponseCache(replies_path)
        try:
            before = cache.count()  # an eval's parts share one cache: only the replies added are this run's
            log(plan.describe())
            got = collect_groups(runner, plan.request_groups(), cache, desc=f"{task.name} replies")
        finally:
            added = cache.count() - before
            cache.close()
    except BaseException as exc:
        # a start that saved nothing leaves nothing behind
        removed = unclaim_probe_folder(task, out, claimed, saved=added > 0)
        if isinstance(exc, KeyboardInterrupt):
            raise _interruption(out, replies_path, removed) from None
        raise
    replies = plan.merge_replies(got)
    failures = failed_prompts(replies)
    if failures:  # every other prompt was asked and its reply saved: a rerun asks only these
        log(describe_failures(failures, len(replies)))
    t1 = time.perf_counter()
    try:
        analysis = plan.analyze(replies, backend, out, log)
    except KeyboardInterrupt:  # every reply is saved: a rerun reads them again
        raise _interruption(out, replies_path, removed=False) from None
    timings = {"generate_s": t1 - t0, "analyze_s": time.perf_counter() - t1}
    stored = analysis.replies
    meta = {
        "model": runner.name,
        "fingerprint": fingerprint,
        **analysis.meta,
        "cached": int(stored["cached"].sum()),
        "calls": int((~stored["cached"]).sum()),
        "failed_prompts": [dataclasses.asdict(f) for f in failures],
        "versions": _versions(files.versions),
    }
    return _write(task, plan, out, analysis, meta, timings, reanalysed=False)


def _interruption(out: Path, cache: Path, removed: bool) -> RunInterrupted:
    """What to tell the user after Ctrl-C: how many replies are saved and what a rerun does; ``removed``: nothing
    was saved, so the claim on the output folder was undone."""
    if removed:
        return RunInterrupted(
            f"interrupted before any reply was saved: nothing is kept in {out}; rerun the same command to start"
        )
    with ResponseCache(cache) as replies:
        n = replies.count()
    if not n:
        return RunInterrupted(f"interrupted before any reply was saved in {cache}; rerun the same command to ask them")
    return RunInterrupted(
        f"interrupted: {n} replies are saved in {cache}; rerun the same command to resume (it asks only the prompts "
        "whose replies are not saved)"
    )


def _weights(fingerprint: dict[str, Any]) -> dict[str, Any]:
    """What identifies the weights behind a runner's fingerprint, as every run's ``run.json`` records it: a local
    model's ``weights`` (:func:`~queerbench.models.fingerprint.fingerprint_model`), an endpoint's URL and model
    name (``kind: endpoint``, as a request run's); a runner's other fields (its system prompt, an endpoint's extra
    body) are not the model's."""
    weights = fingerprint.get("weights")
    if isinstance(weights, dict):
        return weights
    if fingerprint.get("base_url") is not None:
        return {"kind": "endpoint", "base_url": fingerprint["base_url"], "model": fingerprint.get("model")}
    return fingerprint


def reanalyze_probes(task: Task, run_dir: str | Path, plan: ProbePlan | Callable[[str], ProbePlan]) -> dict[str, Any]:
    """Read a finished run of ``task`` in ``run_dir`` again with ``plan`` (its reply rules and mapping; no model
    calls) and rewrite its stored replies, record, report and figures. ``plan`` may be a function of the stored
    run's model (its name, as recorded), called once the record is read."""
    run_dir = Path(run_dir)
    files = probe_files(task)
    for name in (files.replies, files.record):
        if not (run_dir / name).is_file():
            raise FileNotFoundError(f"{run_dir}: no {name}; give an output folder of `queerbench {task.name} run`")
    fix = f"delete it and rerun `queerbench {task.name} run` with the same --out (cached replies are reused)"
    with folder_lock(run_dir, f"{task.name} report"):
        record = read_json_object(run_dir / files.record, fix=fix)
        stored_run = record.get("run")
        stored_run = stored_run if isinstance(stored_run, dict) else {}
        replies = read_parquet(run_dir / files.replies, fix=fix)
        if not isinstance(plan, ProbePlan):
            plan = plan(str(stored_run.get("model") or ""))
        t0 = time.perf_counter()
        analysis = plan.reanalyze(replies, {**record, "run": stored_run}, run_dir)
        meta = {**stored_run, **analysis.meta, "reanalysed": {"versions": _versions(files.versions)}}
        return _write(task, plan, run_dir, analysis, meta, {"analyze_s": time.perf_counter() - t0}, reanalysed=True)


def _write(
    task: Task,
    plan: ProbePlan,
    out: Path,
    analysis: ProbeAnalysis,
    meta: dict[str, Any],
    timings: dict[str, float],
    *,
    reanalysed: bool,
) -> dict[str, Any]:
    """The stored replies, the task's record (the result with ``signature`` and ``run``), the result record every
    run writes (``scores.json``) and the report, each atomically."""
    files = probe_files(task)
    res = analysis.result
    meta["signature"] = probe_signature(task, plan, meta, res)
    res["signature"] = meta["signature"]
    res["run"] = meta
    with atomic_path(out / files.replies) as tmp:
        analysis.replies.to_parquet(tmp, index=False)
    write_json(out / files.record, res)
    write_record(out, probe_record(task, analysis, meta, timings, reanalysed=reanalysed))
    plan.write_report(res, meta, out)
    return res


def probe_record(
    task: Task,
    analysis: ProbeAnalysis,
    meta: dict[str, Any],
    timings: dict[str, float],
    *,
    reanalysed: bool = False,
) -> RunRecord:
    """The typed result record of a probes run (``kind`` ``probes``): what produced it (the ``run`` block's model,
    fingerprint, settings and signature), the task's declared metrics per group as its plan computed them (each
    block saying what it was read from), how many replies were stored (``n_items``: every reply, failed ones
    included), whether no new reply was asked (a rerun from the cache, a re-analysis) and the timings of this
    command (``generate_s``: asking; ``analyze_s``: reading the replies, with a local model's option scoring). The
    method and request type are those of the task's replies (``generate``); a metric read from other requests says
    so in its block (``request_type``: the SCM probes' constrained rating, ``loglikelihood``), and ``request_types``
    lists every type the metrics with data were read from (an endpoint's run scores no options: ``generate``
    only). The task's own record keeps the rest."""
    stored = analysis.replies
    cached = int(stored["cached"].sum()) if "cached" in stored else 0
    asked = {  # the request types the metrics with data were read from (an endpoint scores no options)
        block.request_type for block in analysis.metrics.values() if block.overall is None or block.overall.n
    }
    return RunRecord(
        task=task.name,
        benchmark=task.benchmark,
        method=task.spec.methods[0],
        request_type=GENERATE,
        request_types=[GENERATE, *sorted(t for t in asked if isinstance(t, str) and t != GENERATE)],
        model=str(meta.get("model")),
        model_fingerprint=dict(meta.get("fingerprint") or {}),
        signature=str(meta["signature"]),
        settings=dict(meta.get("settings") or {}),
        declared_metrics=[m for m in task.spec.metrics if m.name in analysis.metrics],
        groups=analysis.groups,
        results=dict(analysis.metrics),
        n_items=len(stored),
        timings_s=timings,
        reused_predictions=reanalysed or (bool(len(stored)) and cached == len(stored)),
        parse_rate=analysis.parse_rate,
        finished=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        kind=RECORD_KINDS[2],
    )


def probe_signature(task: Task, plan: ProbePlan, meta: dict[str, Any], result: dict[str, Any]) -> str:
    """The run's signature (:mod:`queerbench.base.signature`): the task, the model and its weights' fingerprint (a
    local model's hash, a Hub commit or an endpoint's URL), the plan's fields and the version."""
    from queerbench import __version__

    fp = meta.get("fingerprint") or {}
    weights = fp["weights"] if isinstance(fp.get("weights"), dict) else fp
    label = short_hash(weights.get("sha256")) or short_hash(weights.get("commit_hash")) or fp.get("base_url")
    return format_signature(
        [
            ("task", task.name),
            ("model", meta.get("model")),
            *([("fp", label)] if label else []),
            *plan.signature_fields(meta, result),
            ("qb", __version__),
        ]
    )


def _versions(packages: tuple[str, ...]) -> dict[str, str | None]:
    """Versions of the packages that produced the numbers (None: not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for pkg in packages:
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out
