"""QueerBench's methods by name: one predictor interface for ``mlm``, ``scored`` and ``instructed``, one registry.

Like lm-evaluation-harness's model registry, a run names its method and the registry gives the predictor; nothing
else in the run branches on the method. Each :class:`~queerbench.methods.base.Method` says what its name changes in a
run (the default model, the option fields added to the run's key — none for ``mlm``, so that masked-LM run folders
written before there were methods still resume — and the hooks of :mod:`queerbench.methods.base`) and names one
predictor class per model backend (:data:`queerbench.models.registry.BACKENDS`): ``mlm`` runs on a masked LM,
``scored`` on a local causal LM or a completions endpoint, ``instructed`` on a local causal LM or a chat endpoint.
Adding a method or a backend is one :func:`register` call.

The model a run names is resolved by the model registry (:func:`queerbench.models.registry.model_ref`);
:func:`resolve_method` picks the method for it, :func:`backend_for` the backend, :func:`load_predictor` builds the
predictor, and :func:`check_same_weights` is the one check that a resume's saved parts and the loaded model are the
same weights.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from queerbench.methods.base import Method, Predictor
from queerbench.methods.instructed import INSTRUCTED
from queerbench.methods.mlm import MLM
from queerbench.methods.scored import SCORED
from queerbench.models.registry import ModelRef, model_ref

if TYPE_CHECKING:
    from queerbench.methods.base import RunSettings
    from queerbench.tasks.spec import TaskSpec

__all__ = [
    "GENERATIVE_METHODS",
    "METHODS",
    "Method",
    "Predictor",
    "auto_method",
    "backend_for",
    "check_same_weights",
    "check_task_spec",
    "get_method",
    "in_label",
    "load_predictor",
    "method_settings",
    "model_methods",
    "preflight",
    "recorded_method",
    "register",
    "registered",
    "registered_methods",
    "registered_names",
    "resolve_method",
    "same_weights",
    "setting_flags",
    "unrecorded_method",
]

_REGISTRY: dict[str, Method] = {}


def register(method: Method) -> Method:
    """Add (or replace) a method in the registry; returns it. A one-line ``ValueError`` for a second method that says
    it :attr:`~queerbench.methods.base.Method.predates_methods` (a run that names no method was made by one)."""
    if method.predates_methods:
        other = next((m.name for m in _REGISTRY.values() if m.predates_methods and m.name != method.name), None)
        if other is not None:
            raise ValueError(
                f"method {method.name!r}: predates_methods=True, but {other!r} already is the method of runs that "
                "name none; leave predates_methods False for a new method"
            )
    _REGISTRY[method.name] = method
    return method


for _method in (MLM, SCORED, INSTRUCTED):
    register(_method)

METHODS: tuple[str, ...] = ("auto", *_REGISTRY)
"""The names ``--method`` takes: ``auto`` and every registered method."""
GENERATIVE_METHODS: tuple[str, ...] = tuple(name for name, m in _REGISTRY.items() if m.generative)


def unrecorded_method() -> Method:
    """The method of a stored run, predictions table or run key that names none (written before runs recorded their
    method): the registered method that declares it :attr:`~queerbench.methods.base.Method.predates_methods`."""
    found = next((m for m in _REGISTRY.values() if m.predates_methods), None)
    if found is None:
        raise ValueError("no registered method predates_methods; register one so that runs naming none can be read")
    return found


def auto_method(backends: Sequence[str]) -> str:
    """The method ``--method auto`` picks for a model that runs on ``backends`` (in the model's order of preference,
    :meth:`~queerbench.models.registry.ModelRef.backends`): the method that declares the first of them in its
    :attr:`~queerbench.methods.base.Method.auto_on`; a one-line ``ValueError`` when none does."""
    for backend in backends:
        found = next((m.name for m in _REGISTRY.values() if backend in m.auto_on), None)
        if found is not None:
            return found
    raise ValueError(f"no method runs on {', '.join(backends) or 'no backend'} by default; choose --method")


def get_method(name: str) -> Method:
    """The registered method ``name`` (``auto`` reads as :func:`unrecorded_method`, the method of the run key before
    there were methods); a one-line ``ValueError`` for an unknown name."""
    if name == "auto":
        return unrecorded_method()
    if name not in _REGISTRY:
        raise ValueError(f"--method must be one of {', '.join(('auto', *_REGISTRY))}, got {name!r}")
    return _REGISTRY[name]


def registered_names() -> tuple[str, ...]:
    """The names of the registered methods, in the order they were registered (``auto`` is none of them)."""
    return tuple(_REGISTRY)


def registered_methods() -> tuple[Method, ...]:
    """The registered methods themselves, in the order they were registered."""
    return tuple(_REGISTRY.values())


def method_settings() -> tuple[str, ...]:
    """The names of every registered method's own settings (:attr:`~queerbench.methods.base.Method.settings`), in
    registration order: what a run's options take as ``method_settings`` and the command line reads from its flags
    of the same names."""
    return tuple(dict.fromkeys(name for method in registered_methods() for name in method.settings))


def setting_flags(names: Sequence[str]) -> str:
    """The command line's flags of method settings ``names``, as a user typed them (``--prompt, --max-new-tokens``)."""
    flags = {name: flag for method in registered_methods() for name, flag in method.settings.items()}
    return ", ".join(flags.get(name, name) for name in names)


def registered(name: str | None) -> Method | None:
    """The registered method ``name`` as a stored record names it, or None for none or a name this version does not
    know (a stored result is read back, never refused, for its method's name)."""
    return _REGISTRY.get(name) if name is not None else None


def recorded_method(name: str | None) -> str:
    """The method a stored run used: the one it records, or, for a run written before there were methods (none
    recorded), the method of the run key of that time (:func:`unrecorded_method`, what ``auto`` reads as)."""
    return name or unrecorded_method().name


def in_label(name: str | None) -> bool:
    """Whether a stored run's method is part of its label beside model, task and k: a method in the run key (as in
    its default folder's name), or one this version does not know (shown as recorded); not a run without a recorded
    method, nor one whose method is not in the key."""
    method = registered(name)
    return name is not None and (method is None or method.in_key)


def model_methods(ref: ModelRef, chat: bool | None = None) -> tuple[str, ...]:
    """The methods a model runs, in the order of its backends (``ref.backends()``) and, for one backend, of the
    registry: a method with a predictor for one of them, and, for a method that needs a chat (``needs_chat``), only
    when the model answers one (``chat``; None: asked of the model, its tokenizer's files only, when first needed)."""
    found: list[str] = []
    for backend in ref.backends():
        for method in _REGISTRY.values():
            if backend not in method.backends or method.name in found:
                continue
            if method.needs_chat and chat is None:
                chat = ref.has_chat_template()
            if chat or not method.needs_chat:
                found.append(method.name)
    return tuple(found)


def check_task_spec(spec: TaskSpec) -> None:
    """Check what a task declares of the methods against this registry, where a task and its methods meet (the task
    layer knows no method): every method it names is registered, and a pass of its ``eval_passes`` names a prompt only
    for a method that takes one. A one-line ``ValueError`` naming the task and the method otherwise."""
    unknown = [m for m in spec.methods if m not in _REGISTRY]
    if unknown:
        raise ValueError(
            f"task {spec.name!r}: 'methods' must name some of {', '.join(_REGISTRY)}, got {list(spec.methods)} "
            f"(unknown: {', '.join(unknown)})"
        )
    prompted = [m.name for m in _REGISTRY.values() if m.takes_prompt]
    for i, p in enumerate(spec.eval_passes or ()):
        if p.prompt is not None and not get_method(p.method).takes_prompt:
            raise ValueError(
                f"task {spec.name!r}: eval_passes[{i}]: 'prompt' names the prompt id of an {' or '.join(prompted)} "
                f"pass, got {p.prompt!r} for {p.method}"
            )


def resolve_method(
    method: str,
    model: str | None,
    endpoint: str | None,
    revision: str | None = None,
    *,
    ref: ModelRef | None = None,
) -> str:
    """The concrete method for these options, or a one-line ``ValueError``.

    ``auto`` reads the model's kind from the model registry (its configuration, never its weights) and picks
    ``mlm`` for a masked LM and ``scored`` for a local causal LM; ``--endpoint URL`` means ``instructed``. A
    mismatch (a causal LM with ``mlm``, a masked LM with a generative method, an endpoint with a method that has no
    endpoint backend) is one clear error before anything loads. ``ref``: the model's reference when the caller has
    resolved it already (the run's options), so that it is not resolved again.
    """
    if method != "auto" and method not in _REGISTRY:
        get_method(method)  # the one-line error naming the choices
    if endpoint:
        if not model:
            raise ValueError("--endpoint needs --model NAME (the model name the endpoint serves, e.g. gpt-4o-mini)")
        ref = ref or model_ref(model, endpoint)
        if method == "auto":
            return auto_method(ref.backends())
        if not set(ref.backends()) & set(_REGISTRY[method].backends):
            raise ValueError(
                "--endpoint runs --method instructed (replies) or scored (a completions endpoint's log-probabilities), "
                f"not a masked LM; drop --method {method} or use --method instructed"
            )
        return method
    if model is None:
        return auto_method((ref or model_ref(None)).backends()) if method == "auto" else method
    ref = ref or model_ref(model, revision=revision)
    kind, arch = ref.description
    if method == "auto":
        return auto_method(ref.backends())
    if kind == "causal" and "causal_lm" not in _REGISTRY[method].backends:
        raise ValueError(
            f"{model!r} is a causal LM ({arch}), not a masked LM: --method {method} needs a masked LM; "
            "use --method scored (or instructed, or auto)"
        )
    if kind == "masked" and "masked_lm" not in _REGISTRY[method].backends:
        raise ValueError(
            f"{model!r} is a masked LM ({arch}): --method {method} needs a causal LM; use --method mlm (or auto)"
        )
    return method


def backend_for(method: str, ref: ModelRef) -> str:
    """The model backend ``method`` runs ``ref`` on: an endpoint's route the method uses (``scored``: completions,
    ``instructed``: chat), else the backend of a local model's kind (a model of another kind is left to the
    method's loader, which says precisely why it cannot run it)."""
    return _backend_of(get_method(method), ref)


def _backend_of(method: Method, ref: ModelRef) -> str:
    backends = method.backends
    usable = [b for b in ref.backends() if b in backends] if ref.endpoint else []
    if ref.endpoint:
        return usable[0] if usable else next(iter(backends))
    return "causal_lm" if "causal_lm" in backends else next(iter(backends))


def _predictor_class(options: RunSettings) -> type[Predictor]:
    """The predictor class of the run's method on its model's backend (both resolved once, by the options)."""
    return options.method_impl.predictor_class(_backend_of(options.method_impl, options.ref))


def preflight(options: RunSettings) -> None:
    """The checks the run's predictor can make before any weights load (for a masked LM: tokenizer and top-k)."""
    _predictor_class(options).preflight(options)


def load_predictor(
    options: RunSettings,
    cache_path: Path,
    log: Callable[[str], None] = print,
    *,
    fingerprint: dict[str, Any] | None = None,
    stored: dict[str, Any] | None = None,
) -> Predictor:
    """The predictor for a run's ``options`` (``options.method`` already resolved): the registry's class for that
    method and the model's backend, built from the options. ``cache_path``: where a generative method keeps its
    replies; ``fingerprint``: the run's model fingerprint; ``stored``: the metadata of a resume's saved parts."""
    cls = _predictor_class(options)
    return cls.from_options(options, cache_path=cache_path, log=log, fingerprint=fingerprint, stored=stored)


def same_weights(stored: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether two run metadata records name the same model weights (their fingerprints match). A Hub id that an
    older version recorded by name (``kind: id``) matches the same id's commit record; the commit check follows."""
    old, new = stored.get("fingerprint"), now.get("fingerprint")
    if isinstance(old, dict) and isinstance(new, dict) and old.get("kind") == "id" and new.get("kind") in ("id", "hub"):
        return old.get("model") in (None, now.get("model"))
    return json.dumps(old, sort_keys=True) == json.dumps(new, sort_keys=True)


def check_same_weights(stored: dict[str, Any], now: dict[str, Any], model: str, chunk_dir: Path) -> None:
    """Refuse to add parts predicted by other weights to a resume's saved ones, for every method: other fingerprints
    (``ValueError``), or a Hub model that now resolves to another commit (``RuntimeError``)."""
    if not same_weights(stored, now):
        raise ValueError(
            f"the weights of {model} changed since the saved chunks in {chunk_dir} were predicted; "
            "delete that folder to start over (a run never mixes two models' rows)"
        )
    if stored.get("commit_hash") != now.get("commit_hash"):
        raise RuntimeError(
            f"{model} now resolves to commit {now.get('commit_hash')}, but the saved chunks in {chunk_dir} came from "
            "another commit; delete that folder to start over"
        )
