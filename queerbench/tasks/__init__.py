"""Tasks: each benchmark as one declared task (:class:`~queerbench.tasks.base.Task`), found by one registry.

A task module is a Python module with a module-level ``TASKS`` (a list of :class:`~queerbench.tasks.base.Task`),
usually built from a task data file next to it (:func:`~queerbench.tasks.base.load_specs`). The registry finds:

1. every package under ``queerbench/tasks/`` with a ``task`` module (QueerBench's ``default`` and ``paper``,
   QueerGen, the SCM probes) — a new benchmark shipped with queerbench is one new folder here, with no edit elsewhere;
2. the modules named by the ``queerbench.tasks`` entry-point group of installed packages (a benchmark published as
   a plugin);
3. every ``*.py`` file with ``TASKS`` in the folders listed in ``QUEERBENCH_TASK_PATH`` (like lm-evaluation-harness's
   ``--include_path``).

Generic code asks :func:`get_task` for a task by name and reads its fields and hooks; it never compares names. A task
module may also name a commands file (``COMMANDS``: a path) declaring commands of its own (``queerbench scm …``,
``queerbench check-predictions``), which the CLI builds (:func:`command_files`, :mod:`queerbench.cli.declared`).
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType

from queerbench.base import env
from queerbench.tasks.base import EvalPass, Task, TaskSpec, TemplateTask, load_specs

__all__ = [
    "EvalPass",
    "Task",
    "TaskSpec",
    "TemplateTask",
    "all_tasks",
    "command_files",
    "default_task_name",
    "get_task",
    "load_specs",
    "task_names",
]


def _tasks_of(module: ModuleType, where: str) -> list[Task]:
    tasks = getattr(module, "TASKS", None)
    if not isinstance(tasks, (list, tuple)) or not all(isinstance(t, Task) for t in tasks):
        raise ValueError(f"task module {where} must define TASKS, a list of queerbench.tasks.Task")
    return list(tasks)


def _from_file(path: Path) -> ModuleType:
    name = f"queerbench_task_path_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot load the task module {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _discovered() -> list[tuple[str, ModuleType]]:
    found: list[tuple[str, ModuleType]] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.ispkg and importlib.util.find_spec(f"{__name__}.{info.name}.task") is not None:
            name = f"{__name__}.{info.name}.task"
            found.append((name, importlib.import_module(name)))
    for ep in sorted(entry_points(group="queerbench.tasks"), key=lambda e: e.name):
        found.append((f"entry point {ep.name}", importlib.import_module(ep.value)))
    for folder in env.task_path():
        if not folder.is_dir():
            raise ValueError(f"QUEERBENCH_TASK_PATH names {folder}, which is not a folder of task modules")
        for path in sorted(folder.glob("*.py")):
            found.append((str(path), _from_file(path)))
    return found


@cache
def _modules() -> tuple[tuple[str, ModuleType], ...]:
    return tuple(_discovered())


@cache
def all_tasks() -> dict[str, Task]:
    """Every task the registry finds, by name, in discovery order (see the module doc)."""
    tasks: dict[str, Task] = {}
    for where, module in _modules():
        for task in _tasks_of(module, where):
            if task.name in tasks:
                raise ValueError(f"two tasks are named {task.name!r} (the second in {where}); rename one")
            tasks[task.name] = task
    return tasks


def task_names(*, runs_blanks: bool | None = None) -> tuple[str, ...]:
    """The names of the tasks (only those ``queerbench run`` predicts, with ``runs_blanks=True``)."""
    return tuple(n for n, t in all_tasks().items() if runs_blanks is None or t.runs_blanks == runs_blanks)


def get_task(name: str) -> Task:
    """The task ``name``; a one-line ``ValueError`` naming the choices for an unknown one."""
    tasks = all_tasks()
    if name not in tasks:
        raise ValueError(f"unknown config {name!r}; choose one of: {', '.join(tasks)}")
    return tasks[name]


def command_files() -> list[tuple[str, Path]]:
    """The commands files the task modules name (their ``COMMANDS``), each with the package its actions live in."""
    found = []
    for _, module in _modules():
        path = getattr(module, "COMMANDS", None)
        if path is not None:
            found.append((module.__name__.rpartition(".")[0], Path(path)))
    return found


def default_task_name() -> str:
    """The task run when none is named (``queerbench run`` without ``--config``, ``RunOptions()``, the Space): the
    one whose data declares ``"run_by_default": true``, the first found should a plugin declare one too; a one-line
    ``ValueError`` when none does or when it is not a fill-in-the-blank task."""
    for name, task in all_tasks().items():
        if task.spec.run_by_default:
            if not task.runs_blanks:
                raise ValueError(
                    f'task {name} declares "run_by_default": true but is not a fill-in-the-blank task, which '
                    "`queerbench run` runs when no --config is given; declare it on such a task"
                )
            return name
    raise ValueError('no task declares "run_by_default": true in its task data file; name the task (--config NAME)')
