"""What a method is: a way of filling a blank, one typed predictor interface over the model backends.

A :class:`Method` names its predictor class per model backend (:data:`queerbench.models.registry.BACKENDS`), the
option fields it adds to a run's key, and the work that belongs to it alone, which the run asks for without knowing
which method it runs: how many model calls a sentence costs, a summary of its replies, the ``k`` its scores report,
the facts its report shows, its report section, and the report of a run none of whose sentences got a word.

A predictor class (:class:`Predictor`) is built from a run's :class:`~queerbench.run.options.RunOptions` by
``from_options`` after ``preflight`` (the checks that need no weights) passed.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import pandas as pd

from queerbench.base.redact import redact_url
from queerbench.models.spec import ModelSpec

if TYPE_CHECKING:
    from queerbench.models.registry import ModelRef

__all__ = ["GenerationError", "Method", "Pacing", "Predictor", "Rows", "predict_in_parts"]


class GenerationError(RuntimeError):
    """Some replies could not be obtained (the endpoint failed after its retries, or rejected those prompts).

    Raised once every other prompt has been asked: ``failures`` lists the failed (sentence, sample) calls, of
    ``total`` calls; every reply that arrived is cached, so a rerun asks only the failed ones.
    :meth:`merge` joins the errors of several parts of a run into one report.
    """

    def __init__(self, failures: Sequence[Any], total: int) -> None:
        from queerbench.models.generation.failures import describe_failures

        self.failures, self.total = list(failures), int(total)
        super().__init__(describe_failures(self.failures, self.total, what="sentence"))

    @classmethod
    def merge(cls, errors: Sequence[GenerationError], total: int | None = None) -> GenerationError:
        """One error listing the failures of all ``errors`` (parts of one run), out of ``total`` calls (default:
        the calls of those parts)."""
        return cls([f for e in errors for f in e.failures], sum(e.total for e in errors) if total is None else total)


@dataclass(frozen=True)
class Rows:
    """Predicted rows a predictor's :meth:`~Predictor.stream` hands out: their ids and prediction columns, and
    whether they end a part the run should save now (``checkpoint``; rows that stream in one by one do not)."""

    ids: list[str]
    columns: dict[str, list]
    checkpoint: bool = False


class Pacing(Protocol):
    """How many sentences a part holds (:class:`queerbench.run.parts.PartPlan`): sized from the measured pace."""

    def size(self) -> int:
        """The size of the next part."""
        ...

    def record(self, n: int, seconds: float) -> None:
        """A part of ``n`` sentences took ``seconds``."""
        ...

    def now(self) -> float:
        """The time the parts are measured in (seconds)."""
        ...


def predict_in_parts(
    predictor: Predictor,
    ids: Sequence[str],
    sentences: Sequence[str],
    tick: Callable[[int], None],
    pacing: Pacing,
) -> Iterator[Rows]:
    """The stream of a predictor that predicts a batch of sentences at a time: parts sized by ``pacing``, each a
    checkpoint. A part whose calls did not all get a reply is not handed out, the others go on; the failures are
    raised at the end as one :class:`GenerationError` (every reply that arrived is cached: a rerun asks only those)."""
    failed: list[GenerationError] = []
    pos = 0
    while pos < len(ids):
        stop = min(len(ids), pos + pacing.size())
        began = pacing.now()
        try:
            columns = predictor.predict(list(ids[pos:stop]), list(sentences[pos:stop]), tick)
        except GenerationError as exc:
            failed.append(exc)
        else:
            pacing.record(stop - pos, pacing.now() - began)
            yield Rows(list(ids[pos:stop]), columns, checkpoint=True)
        pos = stop
    if failed:
        raise GenerationError.merge(failed)


class RunSettings(Protocol):
    """What a method and its predictors read of a run's options. :class:`~queerbench.run.options.RunOptions`
    satisfies it; the methods name this protocol rather than the options class, whose checks ask the method registry
    (so nothing in ``methods/`` imports in a circle)."""

    @property
    def model(self) -> str | None: ...
    @property
    def model_id(self) -> str: ...
    @property
    def config(self) -> str: ...
    @property
    def method(self) -> str: ...
    @property
    def top_k(self) -> int: ...
    @property
    def revision(self) -> str | None: ...
    @property
    def model_spec(self) -> ModelSpec:
        """How the model runs: device, dtype, device map, batch size, concurrency, rate, timeout."""
        ...

    @property
    def ref(self) -> ModelRef:
        """The model reference, resolved once."""
        ...

    @property
    def method_impl(self) -> Method:
        """The registered method ``method`` names, looked up once."""
        ...

    @property
    def mlm_mode(self) -> str:
        """How the task reads a masked LM's top-k fills (its ``mlm_mode``), looked up once."""
        ...

    @property
    def endpoint(self) -> str | None: ...
    @property
    def seed(self) -> int: ...
    def setting(self, name: str) -> Any:
        """A method's own setting (one of a registered method's :attr:`~Method.settings`; None: its default)."""
        ...


class Predictor(Protocol):
    """What the run needs of a method's predictor (the registry gives the class for a method and backend)."""

    method: ClassVar[str]

    @staticmethod
    def preflight(options: RunSettings) -> None:
        """Every check that needs no weights (device, memory, tokenizer against ``--top-k``), before the run claims
        its output folder; a one-line error for what cannot work."""
        ...

    @classmethod
    def from_options(
        cls,
        options: RunSettings,
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

    def stream(
        self, ids: Sequence[str], sentences: Sequence[str], tick: Callable[[int], None], pacing: Pacing
    ) -> Iterator[Rows]:
        """Predict ``sentences``, handing out rows as they are done, in any order (:func:`predict_in_parts` for a
        predictor that works a batch at a time; an endpoint streams its prompts through its slots); rows whose calls
        failed are left out and listed by a :class:`GenerationError` at the end."""
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
    """Run settings added to the run's key, after ``method`` itself (empty: the method is not part of the key): the
    method's own :attr:`settings` and the run's fields it reads (``endpoint``, ``seed``)."""
    settings: dict[str, str] = field(default_factory=dict)
    """The settings only this method's runs take, by name, with the command line's flag of each (``instructed``:
    ``prompt_id`` ``--prompt``, ``max_new_tokens`` ``--max-new-tokens``): given to a run as
    ``RunOptions(method_settings={...})``, checked by :meth:`check_settings`, read by its predictors with
    ``options.setting(name)``; a run of another method is refused one of them."""
    generative: bool = False
    description: str = ""
    hub_task: str = "text-generation"
    """The Hub's task type of the method's results (``task.type`` of a card's ``model-index``)."""
    needs_chat: bool = False
    """Whether a model must answer a chat to run the method (a local causal LM then needs a chat template)."""
    auto_on: tuple[str, ...] = ()
    """The model backends on which ``--method auto`` picks this method (:func:`~queerbench.methods.registry.
    auto_method`: the first of a model's backends that a method claims)."""
    predates_methods: bool = False
    """Whether this is the method every run used before runs recorded their method: a stored run, predictions table
    or run key that names none was made by it (exactly one registered method says so)."""
    _classes: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def in_key(self) -> bool:
        """Whether the method's name is part of the run's key and of the default output folder's name."""
        return bool(self.key_fields)

    @property
    def takes_prompt(self) -> bool:
        """Whether a run of the method names a prompt (``--prompt-id``: a prompt id is one of its key fields)."""
        return "prompt_id" in self.key_fields

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
        out), so that two runs are the same run exactly when these agree. An endpoint is its URL without the
        credentials it may carry (:func:`~queerbench.base.redact.redact_url`): the key is written to ``run.json`` and
        the signature."""
        out = {name: settings.get(name) for name in self.key_fields}
        if out.get("endpoint"):
            out["endpoint"] = redact_url(str(out["endpoint"]))
        return out

    def check_settings(self, settings: dict[str, Any]) -> None:
        """A one-line ``ValueError`` for a value of one of the method's own settings (its key fields, by name) that it
        cannot take, before anything loads; a setting left out (None) takes the method's default. A run's options
        ask every registered method, so a method's settings are checked wherever they are given."""
        return None

    def calls_per_sentence(self, options: RunSettings) -> int:
        """Model calls one sentence costs (what a failure count is out of)."""
        return 1

    def summarize(self, predictions: pd.DataFrame) -> dict[str, Any] | None:
        """A summary of the method's replies for ``scores.json`` (``generation``), or None."""
        return None

    def k_reported(self, predictions: pd.DataFrame, k: int | None, scored_k: int) -> int:
        """The ``k`` a run's scores report (``scored_k``: the most words a scored sentence got)."""
        return scored_k

    def run_facts(self, options: RunSettings, meta: dict[str, Any]) -> dict[str, Any]:
        """What the method adds to the ``run`` block of ``scores.json`` and to the report's provenance."""
        return {}

    def report_section(self, meta: dict[str, Any], summary: dict[str, Any] | None) -> str | None:
        """The method's section of ``report.md`` (before the scores), or None."""
        return None

    def unscored_report(self, meta: dict[str, Any], summary: dict[str, Any] | None) -> str:
        """``report.md`` of a run in which no sentence got a word to score."""
        raise ValueError(f"--method {self.name}: no sentence got a word to score")
