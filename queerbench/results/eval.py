"""``queerbench eval``: the whole suite on one model, into one folder, with a report card.

Every task of the suite (those with :attr:`~queerbench.tasks.Task.in_suite`, or those ``--tasks`` names) runs its
passes (:attr:`~queerbench.tasks.Task.eval_passes`, data of the task's file: a method, its k, an instructed pass's
prompt) whose method the model supports: a masked LM ``mlm``; a local causal LM ``scored``, and ``instructed`` when
its tokenizer has a chat template; an endpoint ``instructed``, and ``scored`` when the server passes the
log-probability probe (a server that does not is listed with the probe's reason). A task that declares no passes
runs each of its methods at ``--top-k``; one that does runs the settings of the papers' published rows (e.g. k = 1
and 5), so that its rows rank beside theirs. A ``blanks`` pass is an ordinary ``queerbench run`` into
``OUT/<task>-<method>`` when it runs at ``--top-k`` with the default prompt (the name every eval has used), else
``OUT/<task>-<method>-k<k>[-<prompt>]`` (resumable); a ``probes`` task runs on the probe runner into ``OUT/<task>``.
Every generative part keeps its replies in one shared cache, ``OUT/replies.sqlite``. ``OUT/eval.json`` records the
eval's settings and each part's state, so a rerun of an interrupted eval skips what finished (nothing is predicted or
scored again; a finished run part whose ``scores.json`` was lost is scored again from its ``predictions.parquet``,
with no inference) and a different eval (other settings, the resamples of the CIs and p-values included) is refused
in ``OUT``. Every setting is checked once, before any folder is made or request sent, with the messages ``queerbench
run`` gives. The card (:mod:`queerbench.results.card`) is written from the parts' folders at the end.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from queerbench import __version__
from queerbench.base.files import CorruptOutputError, read_json_object, write_json
from queerbench.base.http import DEFAULT_REQUEST_TIMEOUT, DEFAULT_REQUESTS_PER_MINUTE
from queerbench.base.lock import LOCK_FILES, folder_lock
from queerbench.base.redact import redact_url
from queerbench.methods.registry import check_task_spec, model_methods, registered
from queerbench.models.device import resolve_device
from queerbench.models.generation.settings import MethodUnsupportedError
from queerbench.models.registry import model_ref
from queerbench.reporting.rows import ResultRow, coverage_label
from queerbench.results.folders import folder_kind, folder_rows
from queerbench.run.pipeline import RunOptions, run_benchmark
from queerbench.run.requests import RequestRun, resolve_request_run, run_requests
from queerbench.tasks import Task, all_tasks, get_task, task_names

__all__ = [
    "EVAL_FILE",
    "EvalPart",
    "EvalSettings",
    "check_settings",
    "part_folder",
    "plan_eval",
    "read_eval_record",
    "run_eval",
]

EVAL_FILE = "eval.json"


@dataclass(frozen=True)
class EvalSettings:
    """What an eval runs: the model, the tasks (None: the suite) and the run settings every part shares."""

    model: str | None = None
    endpoint: str | None = None
    revision: str | None = None
    tasks: tuple[str, ...] | None = None
    limit: int | None = None
    top_k: int = 5
    toxicity: str = "embedded"
    device: str = "auto"
    dtype: str = "float32"
    concurrency: int = 8
    requests_per_minute: float = DEFAULT_REQUESTS_PER_MINUTE
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    n_bootstrap: int = 1000
    n_permutations: int = 1000
    seed: int = 0

    def __post_init__(self) -> None:
        # a task named twice (--tasks default,default) is one task: each part runs, and each row is listed, once
        if self.tasks is not None:
            object.__setattr__(self, "tasks", tuple(dict.fromkeys(self.tasks)))

    def key(self) -> dict[str, Any]:
        """What makes two evals the same eval (the settings that change a result, the resamples of its CIs and
        p-values included: one card never mixes intervals of different resamples)."""
        return {
            "model": self.model,
            "endpoint": redact_url(self.endpoint) if self.endpoint else None,
            "revision": self.revision,
            "tasks": list(self.tasks) if self.tasks else None,
            "limit": self.limit,
            "top_k": self.top_k,
            "toxicity": self.toxicity,
            "dtype": self.dtype,
            "seed": self.seed,
            "n_bootstrap": self.n_bootstrap,
            "n_permutations": self.n_permutations,
        }


_KEY_DEFAULTS = {"n_bootstrap": 1000, "n_permutations": 1000}
"""The key entries an eval folder written before they were recorded lacks: it ran with these (the flags' defaults)."""


@dataclass
class EvalPart:
    """One run of the eval: a task with a method (``None`` for a probes task), its k (None: the eval's ``--top-k``)
    and prompt (None: the default), its folder name, or why it is skipped; ``about``: why the task runs this pass
    (its note in the task's data)."""

    task: str
    method: str | None
    folder: str
    skipped: str | None = None
    status: str = "todo"
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    k: int | None = None
    prompt: str | None = None
    about: str = ""


def _model_methods(settings: EvalSettings) -> tuple[list[str], str]:
    """The methods the model supports, in the order of its backends (the method registry's
    :func:`~queerbench.methods.registry.model_methods`: an endpoint's chat route before its completions route), and
    what it is, in words."""
    ref = model_ref(settings.model, settings.endpoint, settings.revision)
    if ref.endpoint:
        return list(model_methods(ref)), f"an endpoint ({redact_url(ref.endpoint)}, model {ref.name})"
    kind, arch = ref.description
    if kind == "masked":
        return list(model_methods(ref)), f"a masked LM ({arch})"
    if kind == "causal":
        chat = ref.has_chat_template()
        return list(
            model_methods(ref, chat)
        ), f"a causal LM ({arch}{', chat template' if chat else ', no chat template'})"
    return list(model_methods(ref)), f"a {kind} model ({arch})"


def _needs(task: Task) -> str:
    methods = dict.fromkeys(p.method for p in task.eval_passes)
    notes = "; ".join(dict.fromkeys(p.note for p in task.eval_passes if p.note))
    return f"{task.name} needs a model for {' or '.join(methods)}" + (f" (its passes: {notes})" if notes else "")


def _default_prompt() -> str:
    from queerbench.methods.instructed.replies import load_prompts

    return str(load_prompts()["default_prompt"])


def part_folder(task: str, method: str, k: int, prompt: str | None, top_k: int) -> str:
    """The folder of a fill-in-the-blank pass: ``<task>-<method>`` at the eval's ``--top-k`` with the default prompt
    (the name every eval has given it, so an older eval folder resumes), else with ``-k<k>`` and the prompt id."""
    name = f"{task}-{method}"
    if k != top_k:
        name += f"-k{k}"
    if prompt is not None and prompt != _default_prompt():
        name += f"-{prompt}"
    return name


def _task_parts(task: Task, methods: list[str], settings: EvalSettings) -> list[EvalPart]:
    """A task's parts for a model of ``methods``: its passes of those methods, in the model's order of methods (one
    part for a probes task); each folder once."""
    usable = sorted((p for p in task.eval_passes if p.method in methods), key=lambda p: methods.index(p.method))
    if task.runs_requests:  # a part per method, on the request runner
        return [EvalPart(task.name, p.method, f"{task.name}-{p.method}", about=p.note) for p in usable]
    if not task.runs_blanks:
        return [EvalPart(task.name, None, task.name, about=usable[0].note)] if usable else []
    parts: dict[str, EvalPart] = {}
    for p in usable:
        k = p.k or settings.top_k
        folder = part_folder(task.name, p.method, k, p.prompt, settings.top_k)
        parts.setdefault(folder, EvalPart(task.name, p.method, folder, k=k, prompt=p.prompt, about=p.note))
    return list(parts.values())


def plan_eval(settings: EvalSettings) -> tuple[list[EvalPart], str]:
    """The eval's parts (each task's passes whose method the model supports, skipped tasks with the reason) and the
    model in words; a one-line ``ValueError`` when no task applies, saying what each needs."""
    tasks = [get_task(t) for t in settings.tasks] if settings.tasks else [t for t in all_tasks().values() if t.in_suite]
    for task in tasks:  # what the task declares of the methods, before the model is looked at
        check_task_spec(task.spec)
    methods, what = _model_methods(settings)
    parts: list[EvalPart] = []
    for task in tasks:
        mine = _task_parts(task, methods, settings)
        if not mine:
            parts.append(EvalPart(task.name, None, task.name, skipped=f"{_needs(task)}; the model is {what}"))
        parts += mine
    if all(p.skipped for p in parts):
        needs = "; ".join(_needs(t) for t in tasks)
        raise ValueError(f"no task of the suite applies to {settings.model} ({what}): {needs}")
    return parts, what


def read_eval_record(path: Path) -> dict[str, Any]:
    """The eval record ``path`` (``OUT/eval.json``): an object whose ``key`` is an object and whose ``parts`` maps each
    part's folder to its state (an object); anything else (a hand edit, another tool's file) is one line naming the
    file and the fix, never an ``AttributeError`` later."""
    path = Path(path)
    fix = f"delete {path.parent} (or just {path.name}, and the parts' folders with it) or choose another --out"
    record = read_json_object(path, fix=fix)
    if not isinstance(record.get("key"), dict):
        raise CorruptOutputError(f"{path} has no 'key' object (the eval's settings); {fix}")
    parts = record.get("parts", {})
    if not isinstance(parts, dict):
        raise CorruptOutputError(
            f"{path}: 'parts' must be an object of part folder → state, not a JSON {type(parts).__name__}; {fix}"
        )
    for name, state in parts.items():
        if not isinstance(state, dict) or not isinstance(state.get("status", ""), str):
            raise CorruptOutputError(
                f'{path}: the state of part {name!r} must be an object like {{"status": "done", "note": ""}}, '
                f"got {state!r:.60}; {fix}"
            )
    record["parts"] = parts
    return record


def _check_folder(out: Path, key: dict[str, Any]) -> dict[str, Any]:
    """The eval record in ``out`` when it is this eval's (a rerun resumes it); a new record for an empty or new
    folder; a one-line refusal for anything else. A record written before the key held the resamples is this eval's
    when the eval runs with the defaults it ran with."""
    path = out / EVAL_FILE
    if path.is_file():
        stored = read_eval_record(path)
        was = {**_KEY_DEFAULTS, **stored["key"]}
        if was != key:
            diff = ", ".join(f"{k}: {was.get(k)!r} there, {key[k]!r} now" for k in key if was.get(k) != key[k])
            raise FileExistsError(f"{out} holds another eval ({diff}); choose another --out (or delete that folder)")
        stored["key"] = key
        return stored
    if out.exists() and any(p.name not in LOCK_FILES for p in out.iterdir()):
        raise FileExistsError(f"{out} is not empty and holds no queerbench eval; choose another --out")
    return {"key": key, "queerbench_version": __version__, "parts": {}}


def _references(path: Path | None) -> tuple[list[ResultRow], str]:
    """The reference rows the card places the model among, and where they come from in words (a file's name, never
    a local folder: the card and ``results.json`` may be pushed). ``path`` (``eval --reference``) must be readable (a
    one-line error before anything runs); the default ones (``leaderboard build``'s, else the bundled copy) only may
    not be, which the card then says."""
    from queerbench.results.reference import reference_rows_for_show

    if path is not None:
        return reference_rows_for_show(Path(path))[0], f"the reference rows of `{Path(path).name}` (`--reference`)"
    try:
        rows, note = reference_rows_for_show(None)
    except (ValueError, FileNotFoundError):
        return [], (
            "no reference rows: the ones `queerbench leaderboard build` wrote cannot be read; rebuild them with "
            "`queerbench leaderboard build`"
        )
    if note:
        return rows, f"the reference rows bundled with queerbench {__version__}"
    return rows, "the reference rows `queerbench leaderboard build` wrote"


def run_eval(
    settings: EvalSettings,
    out: Path,
    *,
    log: Callable[[str], None] = print,
    reference: Path | None = None,
) -> dict[str, Any]:
    """Run every part of the eval into ``out`` (resuming) and write the report card, which places each row among the
    reference rows (``reference``: a ``reference_rows.json``; default: those ``leaderboard show`` uses); returns the
    results document. A part that fails is recorded with its one-line reason and the others go on."""
    from queerbench.results.card import write_card
    from queerbench.results.eval_results import write_eval_results

    out = Path(out)
    parts, what = plan_eval(settings)
    check_settings(settings, parts)  # every bad value is one line before any folder is made or request sent
    references, reference_note = _references(reference)
    with folder_lock(out, "eval"):
        record = _check_folder(out, settings.key())
        out.mkdir(parents=True, exist_ok=True)
        record["model"] = what
        write_json(out / EVAL_FILE, record)
        planned = {p.folder for p in parts}
        for name, state in record["parts"].items():
            if name not in planned and state.get("status") == "done":  # an earlier version's pass: kept, not shown
                log(
                    f"{name}: a part of an earlier version's plan, no longer a pass of this eval; kept, not in the card"
                )
        for part in parts:
            state = record["parts"].get(part.folder) or {}
            if part.skipped:
                part.status = "skipped"
                continue
            if state.get("status") == "done" and (out / part.folder).is_dir():
                lost = _lost_result(out / part.folder)
                if lost is None:
                    part.status, part.note = "done", "finished earlier (reused)"
                    log(f"{part.folder}: finished earlier, reused")
                    continue
                # its results were lost (a deleted or damaged scores.json): the part runs again, which scores the
                # predictions still in its folder (a run reuses its predictions.parquet: no inference)
                log(f"{part.folder}: finished earlier but {lost}; scoring its saved predictions again")
            else:
                log(f"{part.folder}: running …")
            try:
                _run_part(part, settings, out, log)
                part.status, part.note = "done", ""
            except MethodUnsupportedError as exc:  # the server answered: it cannot serve this method (the probe)
                part.status, part.note = "skipped", str(exc)
                log(f"{part.folder}: skipped: {exc}")
            except (ValueError, FileExistsError, FileNotFoundError, RuntimeError) as exc:
                part.status, part.note = "failed", str(exc)
                log(f"{part.folder}: {exc}")
            record["parts"][part.folder] = {"status": part.status, "note": part.note}
            write_json(out / EVAL_FILE, record)
        rows = []
        for part in parts:
            if part.status == "done":
                rows += [_labelled(r).to_dict() for r in folder_rows(out / part.folder)]
        document = {
            "schema_version": 1,
            "model": settings.model,
            "endpoint": redact_url(settings.endpoint) if settings.endpoint else None,
            "model_kind": what,
            "settings": settings.key(),
            "queerbench_version": __version__,
            "parts": [
                {
                    "task": p.task,
                    "method": p.method,
                    "k": p.k,
                    "prompt": p.prompt,
                    "folder": p.folder,
                    "status": p.status,
                    "note": p.skipped or p.note,
                    "about": p.about,
                }
                for p in parts
            ],
            "rows": rows,
        }
        write_card(document, out, references=references, reference_note=reference_note)
        write_eval_results(document, out)  # the Hub's .eval_results/*.yaml entries and their record
        return document


def _labelled(row: ResultRow) -> ResultRow:
    """``row`` with a caveat saying so when it is a ``--limit`` pass (its ``limit`` field says how many templates)."""
    if row.limit is not None:
        covered = coverage_label(row, "templates" if row.k is not None else "prompts")
        row.caveats = [
            *row.caveats,
            f"a `--limit` pass ({covered}): ranked with no whole run, nor with the published rows; with so few "
            "templates its CIs and p-values over templates say little",
        ]
    return row


def _lost_result(folder: Path) -> str | None:
    """What became of a finished part's result (a run's ``scores.json``, a task's own results), or None when it is
    still there and reads: a result that is missing, or damaged so that its rows cannot be read (a hand-edited
    record), is made again by running the part, which scores the predictions its folder keeps."""
    try:
        folder_kind(folder)
    except (ValueError, FileNotFoundError):
        return "its results are missing"
    try:
        folder_rows(folder)
    except (ValueError, FileNotFoundError) as exc:
        return f"its results cannot be read ({exc})"
    return None


def _part_options(part: EvalPart, settings: EvalSettings, out: Path) -> RunOptions:
    """The options a run part runs with (checked when made: one line per bad value, as ``queerbench run`` says it).
    A probes task runs on the probe runner; its options stand for the eval's shared settings (concurrency, rate,
    toxicity scorer, resamples, seed), checked with the first fill-in-the-blank task."""
    task = get_task(part.task)
    blanks = task.runs_blanks
    method = registered(part.method)  # None: a probes part, whose pipeline asks a generative model
    return RunOptions.for_task(
        task if blanks else get_task(task_names(runs_blanks=True)[0]),
        model=settings.model,
        endpoint=settings.endpoint,
        revision=settings.revision,
        method=(part.method or "auto") if blanks else "auto",
        limit=task.eval_limit(settings.limit) if blanks else settings.limit,
        top_k=part.k or settings.top_k,
        method_settings={"prompt_id": part.prompt},
        toxicity=settings.toxicity,
        device=settings.device,
        dtype=settings.dtype,
        concurrency=settings.concurrency,
        requests_per_minute=settings.requests_per_minute,
        request_timeout=settings.request_timeout,
        n_bootstrap=settings.n_bootstrap,
        n_permutations=settings.n_permutations,
        seed=settings.seed,
        reply_cache=str(out / "replies.sqlite") if method is None or method.generative else None,
    )


def _request_run(part: EvalPart, settings: EvalSettings) -> RequestRun:
    """A part of a ``requests`` task, resolved as ``queerbench run`` resolves it (one line per bad value)."""
    task = get_task(part.task)
    return resolve_request_run(
        task,
        model=settings.model,
        endpoint=settings.endpoint,
        revision=settings.revision,
        method=part.method or "auto",
        limit=task.eval_limit(settings.limit),
        device=settings.device,
        dtype=settings.dtype,
        concurrency=settings.concurrency,
        requests_per_minute=settings.requests_per_minute,
        request_timeout=settings.request_timeout,
        n_resamples=settings.n_bootstrap,
        n_permutations=settings.n_permutations,
        seed=settings.seed,
    )


def check_settings(settings: EvalSettings, parts: list[EvalPart]) -> None:
    """Check every setting of the eval once, before anything is written or asked: each part that will run gets the
    options it runs with, so a bad value (``--concurrency 0``, ``--toxicity banana``, ``--seed -1``,
    ``--bootstrap -1``) is the one line ``queerbench run`` gives for it. A local model's ``--device`` is checked
    here too (``run`` checks it when it loads the model, before its folder; an endpoint has no device)."""
    running = [part for part in parts if not part.skipped]
    requests = [part for part in running if get_task(part.task).runs_requests]
    for part in running:  # the run parts first: a bad value is the line `queerbench run` gives for it
        if part not in requests:
            _part_options(part, settings, Path("."))
    for part in requests:
        _request_run(part, settings)
    if running and settings.endpoint is None:
        resolve_device(settings.device)


def _run_part(part: EvalPart, settings: EvalSettings, out: Path, log: Callable[[str], None]) -> None:
    """Run one part into ``out/part.folder``."""
    task = get_task(part.task)
    folder = out / part.folder
    if task.runs_requests:
        run_requests(_request_run(part, settings), folder, log=log)
        return
    if not task.runs_blanks:
        from queerbench.run.probes import model_label, run_probes

        plan = task.probe_plan(
            model_label(settings.model, settings.endpoint),
            endpoint=settings.endpoint is not None,
            limit=task.eval_limit(settings.limit),
            quick=settings.limit is not None,
        )
        run_probes(
            task,
            folder,
            plan,
            model=settings.model,
            endpoint=settings.endpoint,
            concurrency=settings.concurrency,
            requests_per_minute=settings.requests_per_minute,
            device=settings.device,
            dtype=settings.dtype,
            request_timeout=settings.request_timeout,
            cache_path=out / "replies.sqlite",
            log=log,
        )
        return
    options = _part_options(part, settings, out)
    try:
        run_benchmark(options, folder, log=log)
    except Exception:
        if folder.is_dir() and not any(p.name not in LOCK_FILES for p in folder.iterdir()):
            shutil.rmtree(folder, ignore_errors=True)
        raise
