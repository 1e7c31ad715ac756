"""The options of a run: :class:`RunOptions`, the typed input every method's predictor is built from.

Every value is checked when the options are made, so a bad flag is one line before anything loads: the task (its
``--config``), the method, the model reference and endpoint (:func:`queerbench.models.registry.model_ref`), k, the
templates, the dtype, the device map, the prompt, the toxicity scorer and what it reads.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import TYPE_CHECKING, Any

from queerbench.methods.registry import METHODS, get_method, method_settings, registered_methods, setting_flags
from queerbench.models.generation.settings import (
    DEFAULT_CONCURRENCY,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_REQUESTS_PER_MINUTE,
)
from queerbench.models.registry import ModelRef, model_ref, with_paths_checked
from queerbench.models.spec import DTYPES, ModelSpec
from queerbench.scoring.aggregate import TOXICITY_CHOICES, ScoringOptions, check_toxicity_scorer
from queerbench.tasks import default_task_name, get_task, task_names
from queerbench.tasks.base import TOXICITY_INPUTS

if TYPE_CHECKING:
    from queerbench.methods.base import Method
    from queerbench.tasks import Task

__all__ = ["DTYPES", "TOXICITY_INPUTS", "RunOptions"]

_SUBSET = re.compile(r"[1-9][0-9]*@[0-9a-f]{12}")


_RESOLVED_FROM: dict[str, tuple[str, ...]] = {
    "task": ("config",),
    "mlm_mode": ("config",),
    "named_ref": ("model", "endpoint", "revision"),
    "ref": ("model", "endpoint", "revision"),
    "method_impl": ("method",),
}
"""What :meth:`RunOptions.with_fields` keeps of what the options resolved: each lookup, unless a field it was
resolved from changed (anything else resolved, :attr:`RunOptions.model_spec`, is made again)."""


@dataclass(frozen=True)
class RunOptions:
    """Everything that defines a run, checked and resolved when it is made (one line for each bad value, before
    anything loads), then frozen: its task and model reference are looked up once (:attr:`task`, :attr:`ref`), how
    the model runs is one :class:`~queerbench.models.spec.ModelSpec` (:attr:`model_spec`), each method checks the
    settings it owns (:meth:`~queerbench.methods.base.Method.check_settings`), and the default model and toxicity
    input are filled in. A changed run is new options: made anew, or with :meth:`with_fields`, which keeps what
    was looked up from the fields that did not change; a changed ``config`` or ``method`` keeps the resolved
    ``toxicity_input`` and ``model`` unless they are passed as None.

    What identifies the run (its task, method, model, k, templates, dtype and the method's own settings) is its
    signature (:mod:`queerbench.run.signature`); the rest (device, batch size, the toxicity scorer, the uncertainty
    settings) changes how it runs or is scored, not what is predicted."""

    model: str | None = "bert-base-uncased"  # None: bert-base-uncased (mlm), the embedded SmolLM2 (generative)
    config: str = field(default_factory=default_task_name)  # the task the registry's data declares the default
    top_k: int = 5
    revision: str | None = None
    limit: int | None = None  # use only the first N templates (every subject of each)
    dtype: str = "float32"
    toxicity: str = "embedded"
    toxicity_input: str | None = None  # None: the task's (neutral in default and queergen, full in paper)
    device: str = "auto"
    device_map: str | None = None  # accelerate's placement of a local model (not part of the key: same results)
    batch_size: int = 64
    n_bootstrap: int = 1000
    n_permutations: int = 1000
    seed: int = 0
    toxicity_kwargs: dict[str, Any] = field(default_factory=dict)
    method: str = "auto"  # auto | mlm | scored | instructed (see queerbench.methods.registry.resolve_method)
    endpoint: str | None = None  # an OpenAI-compatible base URL: instructed on the served model `model`
    concurrency: int = DEFAULT_CONCURRENCY  # endpoint requests in flight
    requests_per_minute: float = DEFAULT_REQUESTS_PER_MINUTE  # endpoint rate limit (not part of the key)
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT  # seconds per endpoint request (not part of the key)
    method_settings: dict[str, Any] = field(default_factory=dict)
    """The settings a method owns, by name (:attr:`~queerbench.methods.base.Method.settings`; ``instructed``:
    ``prompt_id``, a prompt of queerbench/data/llm_prompts.json, and ``max_new_tokens``), each checked by its method;
    one left out or None takes the method's default. Read with :meth:`setting`."""
    exclude_function_words: bool = False  # scoring only (not in the cache key): see queerbench.scoring.function_words
    safetensors_only: bool = False  # refuse pickle checkpoints of a masked LM (the Space); not in the key
    reply_cache: str | None = None  # a generative run's reply cache (None: its own, in OUT/.chunks); not in the key
    sentences: str | None = None
    """The sentences of an imported run that are not the first ``--limit`` templates (``lm_eval --limit 100``, a later
    template), as ``<n>@<hash of their ids>`` (:func:`queerbench.run.signature.sentence_subset`); part of the key and
    the signature. None: the first ``limit`` templates. Never a flag: a run predicts whole templates."""

    @cached_property
    def task(self) -> Task:
        """The task ``config`` names, looked up once (a one-line ``ValueError`` for an unknown one)."""
        return get_task(self.config)

    @cached_property
    def named_ref(self) -> ModelRef:
        """The model reference with its names and URL checked (what the options check when made)."""
        return model_ref(self.model, self.endpoint, self.revision, check_paths=False)

    @cached_property
    def ref(self) -> ModelRef:
        """The model reference, its local paths checked too, when the run first needs it (:attr:`named_ref`, the
        same object: what it read of the model is not read again)."""
        return with_paths_checked(self.named_ref)

    @cached_property
    def method_impl(self) -> Method:
        """The registered method ``method`` names, looked up once (``auto``, before the run resolves it, reads as the
        method of the run key before there were methods: :func:`~queerbench.methods.registry.get_method`)."""
        return get_method(self.method)

    @cached_property
    def mlm_mode(self) -> str:
        """How the task reads a masked LM's top-k fills (its ``mlm_mode``: whole words or raw tokens)."""
        return str(self.task.spec.mlm_mode)

    @cached_property
    def model_spec(self) -> ModelSpec:
        """How the model runs (:class:`~queerbench.models.spec.ModelSpec`: device, dtype, device map, batch size,
        concurrency, rate, timeout, safetensors only), checked when the options were made: what the method's
        predictor and its backend are built from."""
        return ModelSpec(
            device=self.device,
            dtype=self.dtype,
            device_map=self.device_map,
            batch_size=self.batch_size,
            concurrency=self.concurrency,
            requests_per_minute=self.requests_per_minute,
            request_timeout=self.request_timeout,
            safetensors_only=self.safetensors_only,
        )

    def __post_init__(self) -> None:
        task = self.task
        if not task.runs_blanks:
            raise ValueError(
                f"--config {self.config} is not a fill-in-the-blank task ({task.spec.title}); "
                f"`queerbench run` runs {', '.join(task_names(runs_blanks=True))}"
            )
        if self.method not in METHODS:
            raise ValueError(f"--method must be one of {', '.join(METHODS)}, got {self.method!r}")
        self.model_spec.check_endpoint(self.endpoint)  # device, dtype, batch size, concurrency, rate, timeout
        if self.endpoint and self.revision:
            raise ValueError(
                "--revision pins a Hub model's commit; an --endpoint serves its own weights: drop --revision"
            )
        if self.model is None:
            if self.endpoint:
                raise ValueError("--endpoint needs --model NAME (the model name the endpoint serves, e.g. gpt-4o-mini)")
            object.__setattr__(self, "model", self.method_impl.default_model)  # resolved once, then frozen
        self.named_ref  # noqa: B018 - names and URLs: one line each
        if not isinstance(self.method_settings, dict):
            raise ValueError(
                f"method_settings must be a dict of a method's settings by name, got {self.method_settings!r}"
            )
        owned = {name: method.name for method in registered_methods() for name in method.settings}
        unknown = sorted(set(self.method_settings) - set(owned))
        if unknown:
            known = ", ".join(f"{name} ({owner})" for name, owner in sorted(owned.items())) or "none"
            raise ValueError(f"{', '.join(unknown)}: not a setting of any method; the methods' settings are {known}")
        given = {name: value for name, value in self.method_settings.items() if value is not None}
        object.__setattr__(self, "method_settings", given)  # a setting left out and one given as None are one
        mine = self.method_impl.settings if self.method != "auto" else owned  # auto: checked once resolved
        foreign = [name for name in given if name not in mine]
        if foreign:
            owners = ", ".join(dict.fromkeys(f"--method {owned[name]}" for name in foreign))
            what = "settings" if len(foreign) > 1 else "a setting"
            raise ValueError(
                f"{setting_flags(foreign)}: {what} of {owners}, which this run does not use (its method is "
                f"{self.method}): drop {'them' if len(foreign) > 1 else 'it'}"
            )
        values = self.key_values()
        for method in registered_methods():  # each method checks the settings it owns (a prompt, a reply length)
            method.check_settings({setting: values.get(setting) for setting in method.key_fields})
        if not isinstance(self.top_k, int) or self.top_k < 1:
            raise ValueError(f"--top-k must be a positive integer, got {self.top_k!r}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"--limit must be at least 1 template (or omitted for all), got {self.limit}")
        if self.sentences is not None and (self.limit is not None or not _SUBSET.fullmatch(self.sentences)):
            raise ValueError(f"sentences must be '<n>@<12 hex digits>' without a limit, got {self.sentences!r}")
        if self.toxicity_input is None:
            object.__setattr__(self, "toxicity_input", task.spec.toxicity_input)
        if self.toxicity_input not in TOXICITY_INPUTS:
            raise ValueError(
                f"--toxicity-input must be one of {', '.join(TOXICITY_INPUTS)}, got {self.toxicity_input!r}"
            )
        if self.toxicity == "precomputed":
            raise ValueError(
                "--toxicity precomputed reads flags stored in a file, which a new run does not have; use "
                "`queerbench score FILE --toxicity precomputed` for such a file, or run with --toxicity embedded, "
                "hf:<model id or path>, perspective or none"
            )
        check_toxicity_scorer(self.toxicity, tuple(c for c in TOXICITY_CHOICES if c != "precomputed"))
        self.scoring_options()  # an unknown scorer name fails here, before anything is loaded

    @classmethod
    def for_task(cls, task: Task, **values: Any) -> RunOptions:
        """Options for ``task`` already looked up (the CLI asks a task which runner runs it before it makes options):
        ``config`` is its name, and the task is not looked up again; ``values``: the other fields."""
        if "config" in values:
            raise TypeError("RunOptions.for_task takes the task, not config")
        options = cls.__new__(cls)
        vars(options)["task"] = task  # what the task property would look up (cached_property reads __dict__)
        cls.__init__(options, config=task.name, **values)
        return options

    def with_fields(self, **changes: Any) -> RunOptions:
        """These options with ``changes`` (as ``dataclasses.replace`` makes them, every check made again), keeping
        what was already resolved from the fields that did not change: the task and its masked-LM mode when
        ``config`` is the same, the model reference (its paths checked) when ``model``, ``endpoint`` and ``revision``
        are, the method when ``method`` is. So a run that resolves ``auto`` or drops a ``--limit`` covering every
        template looks none of them up again."""
        unknown = sorted(set(changes) - {f.name for f in fields(self)})
        if unknown:
            raise TypeError(f"RunOptions has no field(s) {', '.join(unknown)}")
        changed = {name for name, value in changes.items() if getattr(self, name) != value}
        if not changed:
            return self
        new = copy.copy(self)  # the fields and what was resolved from them (cached_property keeps it in __dict__)
        for name, value in changes.items():
            object.__setattr__(new, name, value)
        for name in _RESOLVED:
            inputs = _RESOLVED_FROM.get(name)
            if inputs is None or set(inputs) & changed:
                vars(new).pop(name, None)  # resolved again when read
        new.__post_init__()  # every check made again, on what was kept
        return new

    def setting(self, name: str) -> Any:
        """A method's own setting (``method_settings``; None: not given, the method's default)."""
        return self.method_settings.get(name)

    def key_values(self) -> dict[str, Any]:
        """Every value a method's key may read, by name: the run's fields and the methods' own settings."""
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "method_settings"}
        return {**values, **self.method_settings}

    def record(self) -> dict[str, Any]:
        """The options as a run records them (``scores.json``): every field, with each registered method's own
        settings in place of ``method_settings`` (None where not given), so that a record keeps one flat shape."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "method_settings":
                out.update({name: self.setting(name) for name in method_settings()})
            else:
                out[f.name] = copy.deepcopy(getattr(self, f.name))
        return out

    def scoring_options(self) -> ScoringOptions:
        """The scoring options this run implies (its task's rules)."""
        return self.task.scoring_options(
            toxicity=self.toxicity,
            toxicity_input="frame" if self.toxicity_input == "frame" else "sentence",
            text_form=self.toxicity_input,
            n_bootstrap=self.n_bootstrap,
            n_permutations=self.n_permutations,
            seed=self.seed,
            toxicity_kwargs=self.toxicity_kwargs,
            exclude_function_words=self.exclude_function_words,
        )

    @property
    def model_id(self) -> str:
        """``model`` as ``__post_init__`` resolved it (the method's default model when none was given)."""
        if self.model is None:
            raise ValueError("RunOptions.model is None: construct the options anew to resolve the default model")
        return self.model


_RESOLVED: tuple[str, ...] = tuple(
    name for name, value in vars(RunOptions).items() if isinstance(value, cached_property)
)
"""Every value the options resolve once and keep (their cached properties)."""
