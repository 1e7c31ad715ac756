"""What the CLI's own commands share beyond :mod:`queerbench.base.arguments`: the ``--config`` flag, whose choices are
the tasks ``queerbench run`` predicts."""

from __future__ import annotations

import argparse

__all__ = ["config_argument"]


def config_argument(parser: argparse.ArgumentParser, default: str | None = None, *, requests: bool = False) -> None:
    """Add the shared ``--config`` flag: one of the tasks ``queerbench run`` predicts (from the task registry), each
    described by its own one line, ``default`` (None: the task the registry's data declares the default);
    ``requests``: the tasks of the request runner too (``queerbench run`` runs both, ``queerbench score`` scores the
    predictions of fill-in-the-blank tasks only)."""
    from queerbench.tasks import all_tasks, default_task_name

    tasks = {name: t for name, t in all_tasks().items() if t.runs_blanks or (requests and t.runs_requests)}
    described = "; ".join(f"'{name}': {task.spec.title}" for name, task in tasks.items())
    parser.add_argument(
        "--config",
        choices=tuple(tasks),
        default=default or default_task_name(),
        help=f"the task: {described} (default: %(default)s)",
    )
