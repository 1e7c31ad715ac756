"""The Stereotype Content Model probes as a task (``scm``): prompts with a pipeline of their own.

Its data is in ``tasks.json`` next to this module. The probes are not fill-in-the-blank sentences: a generative
model answers survey and story prompts several times each, and the replies are parsed and mapped onto Warmth and
Competence (:mod:`.pipeline`). The task gives the harness its items (the ``survey`` and ``generation`` splits, also
the dataset's ``scm`` config) and its run (:meth:`ScmTask.run`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pandas as pd

from queerbench.tasks.base import Task, TaskSpec, load_specs

__all__ = ["TASKS", "ScmTask", "register_commands"]

SPECS: dict[str, TaskSpec] = load_specs(Path(__file__).with_name("tasks.json"))


class ScmTask(Task):
    """The SCM survey and story prompts."""

    def items(self) -> pd.DataFrame:
        """Every prompt, ``survey`` then ``generation`` (the split in ``split``)."""
        from queerbench.tasks.scm.dataset import scm_splits

        return pd.concat([frame.assign(split=name) for name, frame in scm_splits().items()], ignore_index=True)

    def dataset_splits(self) -> dict[str, pd.DataFrame]:
        """``survey`` and ``generation``."""
        from queerbench.tasks.scm.dataset import scm_splits

        return scm_splits()

    def space_tab(self) -> tuple[str, Any] | None:
        """The Space's "Generative LMs" tab (when its optional parts are installed)."""
        import logging

        try:
            from queerbench.tasks.scm.space import build_scm_tab
        except ImportError as exc:
            logging.getLogger(__name__).info("no Generative LMs tab: %s", exc)
            return None
        return "Generative LMs", build_scm_tab

    def run(self, out: str | Path, **settings: Any) -> dict[str, Any]:
        """Run the probes into ``out`` (:func:`queerbench.tasks.scm.pipeline.run_scm` with ``settings``)."""
        from queerbench.tasks.scm.pipeline import run_scm

        return run_scm(out, **settings)


TASKS = [ScmTask(spec) for spec in SPECS.values()]


def register_commands(sub: argparse._SubParsersAction) -> None:
    """Add the benchmark's own commands to the CLI (the registry calls this while the parser is built)."""
    from queerbench.tasks.scm.commands import register

    register(sub)
