"""What a method is: a way of filling a blank, one typed predictor interface over the model backends.

A :class:`Method` names its predictor class per model backend (:data:`queerbench.models.registry.BACKENDS`), the
option fields it adds to a run's key, and the work that belongs to it alone, which the run asks for without knowing
which method it runs: how many model calls a sentence costs, a summary of its replies, the ``k`` its scores report,
the facts its report shows, its report section, and the report of a run none of whose sentences got a word.

A predictor class (:class:`Predictor`) is built from a run's :class:`~queerbench.methods.options.RunOptions` by
``from_options`` after ``preflight`` (the checks that need no weights) passed.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import pandas as pd

if TYPE_CHECKING:
    from queerbench.methods.options import RunOptions

__all__ = ["Method", "Predictor"]


class Predictor(Protocol):
    """What the run needs of a method's predictor (the registry gives the class for a method and backend)."""

    method: ClassVar[str]

    @staticmethod
    def preflight(options: RunOptions) -> None:
        """Every check that needs no weights (device, memory, tokenizer against ``--top-k``), before the run claims
        its output folder; a one-line error for what cannot work."""
        ...

    @classmethod
    def from_options(
        cls,
        options: RunOptions,
        *,
        cache_path: Path,
        log: Callable[[str], None] = print,
        fingerprint: dict[str, Any] | None = None,
        stored: dict[str, Any] | None = None,
    ) -> Predictor:
        """The predictor for a run: ``cache_path`` keeps its replies (generative methods), ``fingerprint`` is the
        run's model fingerprint, ``stored`` the metadata of a resume's saved parts."""
        ...

    def metadata(self) -> dict[str, Any]:
        """Method, model, its fingerprint and settings: stored with the parts and in ``model.json``."""
        ...

    def predict(self, ids: Sequence[str], sentences: Sequence[str], tick: Callable[[int], None]) -> dict[str, list]:
        """The prediction columns (``tokens`` first) of ``sentences``; ``tick(n)`` after every ``n`` done."""
        ...

    def close(self) -> None:
        """Release what the predictor holds open (a reply cache)."""
        ...


@dataclass(frozen=True)
class Method:
    """One way of filling a blank: its name, what it changes in a run, its predictor class per model backend
    (``"module:Class"``, imported when first used so that naming a method loads no model library), and the hooks a
    method overrides (the defaults are a method with one call per sentence and nothing to summarise)."""

    name: str
    default_model: str
    backends: dict[str, str]
    key_fields: tuple[str, ...] = ()
    """Option fields added to the run's key, after ``method`` itself (empty: the method is not part of the key)."""
    generative: bool = False
    description: str = ""
    _classes: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def in_key(self) -> bool:
        """Whether the method's name is part of the run's key and of the default output folder's name."""
        return bool(self.key_fields)

    def predictor_class(self, backend: str) -> type[Predictor]:
        """The predictor class for a model backend (one of :meth:`backend_names`)."""
        if backend not in self._classes:
            module, _, name = self.backends[backend].partition(":")
            self._classes[backend] = getattr(importlib.import_module(module), name)
        return self._classes[backend]

    def backend_names(self) -> tuple[str, ...]:
        """The model backends this method runs on."""
        return tuple(self.backends)

    # ------------------------------------------------------------------------------------------------- hooks --
    def key_settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        """The method's key fields of ``settings`` by what they mean (a default written out equals the default left
        out), so that two runs are the same run exactly when these agree."""
        return {name: settings.get(name) for name in self.key_fields}

    def calls_per_sentence(self, options: RunOptions) -> int:
        """Model calls one sentence costs (what a failure count is out of)."""
        return 1

    def summarize(self, predictions: pd.DataFrame) -> dict[str, Any] | None:
        """A summary of the method's replies for ``scores.json`` (``generation``), or None."""
        return None

    def k_reported(self, predictions: pd.DataFrame, k: int | None, scored_k: int) -> int:
        """The ``k`` a run's scores report (``scored_k``: the most words a scored sentence got)."""
        return scored_k

    def run_facts(self, options: RunOptions, meta: dict[str, Any]) -> dict[str, Any]:
        """What the method adds to the ``run`` block of ``scores.json`` and to the report's provenance."""
        return {}

    def report_section(self, meta: dict[str, Any], summary: dict[str, Any] | None) -> str | None:
        """The method's section of ``report.md`` (before the scores), or None."""
        return None

    def unscored_report(self, meta: dict[str, Any], summary: dict[str, Any] | None) -> str:
        """``report.md`` of a run in which no sentence got a word to score."""
        raise ValueError(f"--method {self.name}: no sentence got a word to score")
