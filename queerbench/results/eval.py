"""``queerbench eval``: the whole suite on one model, into one folder, with a report card.

Every task of the suite (those with :attr:`~queerbench.tasks.Task.in_suite`, or those ``--tasks`` names) runs with
each method the model supports and the task allows: a masked LM ``mlm``; a local causal LM ``scored``, and
``instructed`` when its tokenizer has a chat template; an endpoint ``instructed``, and ``scored`` when the server
passes the log-probability probe (a server that does not is listed with the probe's reason). A ``blanks`` task is an
ordinary ``queerbench run`` into ``OUT/<task>-<method>`` (resumable); a ``probes`` task runs its own pipeline into
``OUT/<task>``. Every generative part keeps its replies in one shared cache, ``OUT/replies.sqlite``. ``OUT/eval.json`` records the
eval's settings and each part's state, so a rerun of an interrupted eval skips what finished (nothing is predicted or
scored again) and a different eval is refused in ``OUT``. The card (:mod:`queerbench.results.card`) is written from
the parts' folders at the end.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from queerbench import __version__
from queerbench.base.files import read_json_object, write_json
from queerbench.base.http import DEFAULT_REQUEST_TIMEOUT, DEFAULT_REQUESTS_PER_MINUTE
from queerbench.base.lock import LOCK_FILES, folder_lock
from queerbench.models.registry import model_ref
from queerbench.results.folders import folder_rows
from queerbench.run.pipeline import RunOptions, run_benchmark
from queerbench.tasks import Task, all_tasks, get_task

__all__ = ["EVAL_FILE", "EvalPart", "EvalSettings", "plan_eval", "run_eval"]

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

    def key(self) -> dict[str, Any]:
        """What makes two evals the same eval (the settings that change a result)."""
        return {
            "model": self.model,
            "endpoint": self.endpoint,
            "revision": self.revision,
            "tasks": list(self.tasks) if self.tasks else None,
            "limit": self.limit,
            "top_k": self.top_k,
            "toxicity": self.toxicity,
            "dtype": self.dtype,
            "seed": self.seed,
        }


@dataclass
class EvalPart:
    """One run of the eval: a task with a method (``None`` for a probes task), its folder name, or why it is
    skipped."""

    task: str
    method: str | None
    folder: str
    skipped: str | None = None
    status: str = "todo"
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _model_methods(settings: EvalSettings) -> tuple[list[str], str]:
    """The methods the model supports and what it is, in words."""
    ref = model_ref(settings.model, settings.endpoint, settings.revision)
    if ref.endpoint:
        return ["instructed", "scored"], f"an endpoint ({ref.endpoint}, model {ref.name})"
    kind, arch = ref.description
    if kind == "masked":
        return ["mlm"], f"a masked LM ({arch})"
    if kind == "causal":
        chat = ref.has_chat_template()
        methods = ["scored", "instructed"] if chat else ["scored"]
        return methods, f"a causal LM ({arch}{', chat template' if chat else ', no chat template'})"
    return [], f"a {kind} model ({arch})"


def _needs(task: Task) -> str:
    return f"{task.name} needs a model for {' or '.join(task.spec.methods)}"


def plan_eval(settings: EvalSettings) -> tuple[list[EvalPart], str]:
    """The eval's parts (each task × applicable method, skipped ones with the reason) and the model in words; a
    one-line ``ValueError`` when no task applies, saying what each needs."""
    tasks = [get_task(t) for t in settings.tasks] if settings.tasks else [t for t in all_tasks().values() if t.in_suite]
    methods, what = _model_methods(settings)
    parts: list[EvalPart] = []
    for task in tasks:
        usable = [m for m in methods if m in task.spec.methods]
        if not usable:
            parts.append(EvalPart(task.name, None, task.name, skipped=f"{_needs(task)}; the model is {what}"))
            continue
        if task.runs_blanks:
            parts += [EvalPart(task.name, m, f"{task.name}-{m}") for m in usable]
        else:
            parts.append(EvalPart(task.name, None, task.name))
    if all(p.skipped for p in parts):
        needs = "; ".join(_needs(t) for t in tasks)
        raise ValueError(f"no task of the suite applies to {settings.model} ({what}): {needs}")
    return parts, what


def _check_folder(out: Path, key: dict[str, Any]) -> dict[str, Any]:
    """The eval record in ``out`` when it is this eval's (a rerun resumes it); a new record for an empty or new
    folder; a one-line refusal for anything else."""
    path = out / EVAL_FILE
    if path.is_file():
        stored = read_json_object(path, fix=f"delete {out} or choose another --out")
        if stored.get("key") != key:
            was = stored.get("key") or {}
            diff = ", ".join(f"{k}: {was.get(k)!r} there, {key[k]!r} now" for k in key if was.get(k) != key[k])
            raise FileExistsError(f"{out} holds another eval ({diff}); choose another --out (or delete that folder)")
        return stored
    if out.exists() and any(p.name not in LOCK_FILES for p in out.iterdir()):
        raise FileExistsError(f"{out} is not empty and holds no queerbench eval; choose another --out")
    return {"key": key, "queerbench_version": __version__, "parts": {}}


def run_eval(
    settings: EvalSettings,
    out: Path,
    *,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run every part of the eval into ``out`` (resuming) and write the report card; returns the results document.
    A part that fails is recorded with its one-line reason and the others go on."""
    from queerbench.results.card import write_card

    out = Path(out)
    parts, what = plan_eval(settings)
    with folder_lock(out, "eval"):
        record = _check_folder(out, settings.key())
        out.mkdir(parents=True, exist_ok=True)
        record["model"] = what
        write_json(out / EVAL_FILE, record)
        for part in parts:
            state = record["parts"].get(part.folder) or {}
            if part.skipped:
                part.status = "skipped"
                continue
            if state.get("status") == "done" and (out / part.folder).is_dir():
                part.status, part.note = "done", "finished earlier (reused)"
                log(f"{part.folder}: finished earlier, reused")
                continue
            log(f"{part.folder}: running …")
            try:
                _run_part(part, settings, out, log)
                part.status = "done"
            except (ValueError, FileExistsError, FileNotFoundError, RuntimeError) as exc:
                part.status, part.note = "failed", str(exc)
                log(f"{part.folder}: {exc}")
            record["parts"][part.folder] = {"status": part.status, "note": part.note}
            write_json(out / EVAL_FILE, record)
        rows = []
        for part in parts:
            if part.status == "done":
                rows += [r.to_dict() for r in folder_rows(out / part.folder)]
        document = {
            "schema_version": 1,
            "model": settings.model,
            "endpoint": settings.endpoint,
            "model_kind": what,
            "settings": settings.key(),
            "queerbench_version": __version__,
            "parts": [
                {
                    "task": p.task,
                    "method": p.method,
                    "folder": p.folder,
                    "status": p.status,
                    "note": p.skipped or p.note,
                }
                for p in parts
            ],
            "rows": rows,
        }
        write_card(document, out)
        return document


def _run_part(part: EvalPart, settings: EvalSettings, out: Path, log: Callable[[str], None]) -> None:
    """Run one part into ``out/part.folder``."""
    task = get_task(part.task)
    folder = out / part.folder
    if not task.runs_blanks:
        task.run(
            folder,
            model=settings.model,
            endpoint=settings.endpoint,
            limit=task.eval_limit(settings.limit),
            quick=settings.limit is not None,
            concurrency=settings.concurrency,
            requests_per_minute=settings.requests_per_minute,
            device=settings.device,
            dtype=settings.dtype,
            request_timeout=settings.request_timeout,
            cache_path=out / "replies.sqlite",
            log=log,
        )
        return
    options = RunOptions(
        model=settings.model,
        endpoint=settings.endpoint,
        revision=settings.revision,
        config=part.task,
        method=part.method or "auto",
        limit=task.eval_limit(settings.limit),
        top_k=settings.top_k,
        toxicity=settings.toxicity,
        device=settings.device,
        dtype=settings.dtype,
        concurrency=settings.concurrency,
        requests_per_minute=settings.requests_per_minute,
        request_timeout=settings.request_timeout,
        n_bootstrap=settings.n_bootstrap,
        n_permutations=settings.n_permutations,
        seed=settings.seed,
        reply_cache=str(out / "replies.sqlite") if part.method != "mlm" else None,
    )
    try:
        run_benchmark(options, folder, log=log)
    except Exception:
        if folder.is_dir() and not any(p.name not in LOCK_FILES for p in folder.iterdir()):
            shutil.rmtree(folder, ignore_errors=True)
        raise
