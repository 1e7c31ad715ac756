"""The actions ``probes:run`` and ``probes:report`` of a task's declared commands (``queerbench scm run`` and
``scm report``): the shared probe runner (:mod:`queerbench.run.probes`) behind a task's own flags.

The model's flags (which model, where it runs, how an endpoint is asked) go to the model; every other flag is the
task's, which its plan checks (:meth:`queerbench.tasks.base.Task.probe_plan`) before anything loads.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

__all__ = ["MODEL_FLAGS", "report", "run"]

MODEL_FLAGS = (
    "model",
    "endpoint",
    "device",
    "dtype",
    "device_map",
    "api_key_env",
    "requests_per_minute",
    "concurrency",
    "request_timeout",
)
"""The flags that say which model answers and how it is reached (the rest are the task's)."""
_SHARED = ("api_key_env",)
"""Model flags every task's plan is given too (the environment variable of an API key, for endpoints of its own:
an embedder, say)."""


def run(task_name: str, flags: dict[str, Any]) -> int:
    """Check the task's settings and the folder, load the model, run the probes; exit 1 when prompts failed."""
    from queerbench.base.lock import folder_lock
    from queerbench.models.generation import RunAbortedError
    from queerbench.reporting.record import RECORD_FILE
    from queerbench.run.probe_folder import check_probe_folder, probe_files
    from queerbench.run.probes import check_model_settings, model_label, open_probe_model, run_probes
    from queerbench.tasks import get_task

    task = get_task(task_name)
    out = Path(flags.pop("out"))
    model = {k: flags.pop(k) for k in MODEL_FLAGS if k in flags}
    check_model_settings(**{k: v for k, v in model.items() if k not in _SHARED})  # one line each, before the plan
    plan = task.probe_plan(
        model_label(model.get("model"), model.get("endpoint")),
        endpoint=bool(model.get("endpoint")),
        **flags,
        **{k: model[k] for k in _SHARED if k in model},
    )
    check_probe_folder(task, out)  # a file, or a folder of something else: refused before any model loads
    with folder_lock(out, f"{task.name} run"):  # one writer per folder, from before the model loads to the report
        backend = open_probe_model(plan, **model)  # checked before anything runs: URL, API key rule, model files
        try:
            res = run_probes(task, out, plan, backend=backend)
        except RunAbortedError as exc:
            print(f"queerbench: error: {exc}", file=sys.stderr)
            return 1
        finally:
            backend.close()
    files = probe_files(task)
    meta = res["run"]
    failed = len(meta["failed_prompts"])
    print(
        f"wrote {out}/{files.replies}, {files.record}, {RECORD_FILE}, {files.report} "
        f"({meta['cached'] + meta['calls']} responses, "
        f"{failed} failed)"
    )
    return 1 if failed else 0


def report(task_name: str, flags: dict[str, Any]) -> int:
    """Read a finished run again from its stored replies with the task's reply rules (no model calls)."""
    from queerbench.reporting.record import RECORD_FILE
    from queerbench.run.probe_folder import probe_files
    from queerbench.run.probes import reanalyze_probes
    from queerbench.tasks import get_task

    task = get_task(task_name)
    files = probe_files(task)
    run_dir = Path(flags.pop("run"))
    res = reanalyze_probes(task, run_dir, lambda model: task.probe_plan(model or "embedded", **flags))
    meta = res["run"]
    n = int(meta.get("cached") or 0) + int(meta.get("calls") or 0)
    print(f"rewrote {run_dir}/{files.record}, {RECORD_FILE} and {files.report} ({n} responses)")
    return 0
