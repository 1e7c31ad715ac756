"""QueerBench's methods by name: one predictor interface for ``mlm``, ``scored`` and ``instructed``, one registry.

Like lm-evaluation-harness's model registry, a run names its method and the registry gives the predictor; nothing
else in the run branches on the method. Each :class:`Method` says what its name changes in a run: the default model,
the option fields added to the cache key (none for ``mlm``, so that masked-LM run folders written before there were
methods still resume), whether it is generative (a generation section in the report), and one predictor class per
backend (``local``: a model loaded here; ``endpoint``: an OpenAI-compatible server). Adding a backend is one
:func:`register` call, e.g. ``register(Method("scored", ..., backends={"local": ..., "endpoint": "pkg.mod:Cls"}))``.

A predictor class (:class:`Predictor`) has ``from_options(options, *, cache_path, log, fingerprint, stored)``,
``preflight(options)`` (checks that need no weights, run before the output folder is claimed), and its instances
``metadata()`` (recorded with every chunk: method, model, fingerprint, decoding), ``predict(ids, sentences, tick)``
(the prediction columns of those sentences) and ``close()``. :func:`check_same_weights` is the one check that a
resume's saved chunks and the loaded model are the same weights.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from queerbench.models.generation.settings import DEFAULT_MODEL

__all__ = [
    "GENERATIVE_METHODS",
    "METHODS",
    "Method",
    "Predictor",
    "check_same_weights",
    "get_method",
    "load_predictor",
    "register",
    "resolve_method",
    "same_weights",
]


class Predictor(Protocol):
    """What :mod:`queerbench.run.pipeline` needs of a method's predictor."""

    method: str

    def metadata(self) -> dict[str, Any]:
        """Method, model, its fingerprint and settings: stored with the chunks and in ``model.json``."""
        ...

    def predict(self, ids: Sequence[str], sentences: Sequence[str], tick: Callable[[int], None]) -> dict[str, list]:
        """The prediction columns (``tokens`` first) of ``sentences``; ``tick(n)`` after every ``n`` done."""
        ...

    def close(self) -> None:
        """Release what the predictor holds open (a reply cache)."""
        ...


@dataclass(frozen=True)
class Method:
    """One QueerBench method: its name, what it changes in a run, and its predictor class per backend
    (``"module:Class"``, imported when first used so that naming a method loads no model library)."""

    name: str
    default_model: str
    backends: dict[str, str]
    key_fields: tuple[str, ...] = ()
    """Option fields added to the cache key, after ``method`` itself (empty: the method is not part of the key)."""
    generative: bool = False
    description: str = ""
    _classes: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def in_key(self) -> bool:
        """Whether the method's name is part of the cache key and of the default output folder's name."""
        return bool(self.key_fields)

    def predictor_class(self, backend: str) -> Any:
        """The predictor class for ``backend`` (``local`` or ``endpoint``)."""
        if backend not in self._classes:
            module, _, name = self.backends[backend].partition(":")
            self._classes[backend] = getattr(importlib.import_module(module), name)
        return self._classes[backend]


_REGISTRY: dict[str, Method] = {}


def register(method: Method) -> Method:
    """Add (or replace) a method in the registry; returns it."""
    _REGISTRY[method.name] = method
    return method


register(
    Method(
        "mlm",
        default_model="bert-base-uncased",
        backends={"local": "queerbench.methods.mlm:MaskedLMPredictor"},
        description="a masked LM fills the blank",
    )
)
register(
    Method(
        "scored",
        default_model=DEFAULT_MODEL,
        backends={
            "local": "queerbench.methods.scored.predictor:ScoredPredictor",
            "endpoint": "queerbench.methods.scored.endpoint:EndpointScoredPredictor",  # a completions endpoint's logprobs
        },
        key_fields=("endpoint",),
        generative=True,
        description="candidate words ranked by whole-sentence probability",
    )
)
register(
    Method(
        "instructed",
        default_model=DEFAULT_MODEL,
        backends={
            "local": "queerbench.methods.instructed.predictor:InstructedPredictor",
            "endpoint": "queerbench.methods.instructed.predictor:InstructedPredictor",
        },
        key_fields=("endpoint", "prompt_id", "max_new_tokens", "seed"),  # the seed: it seeds the sampled replies
        generative=True,
        description="a chat model is asked for the word",
    )
)

METHODS: tuple[str, ...] = ("auto", *_REGISTRY)
"""The names ``--method`` takes: ``auto`` and every registered method."""
GENERATIVE_METHODS: tuple[str, ...] = tuple(name for name, m in _REGISTRY.items() if m.generative)


def get_method(name: str) -> Method:
    """The registered method ``name`` (``auto`` reads as ``mlm``, the method of the run key before there were
    methods); a one-line ``ValueError`` for an unknown name."""
    if name == "auto":
        name = "mlm"
    if name not in _REGISTRY:
        raise ValueError(f"--method must be one of {', '.join(('auto', *_REGISTRY))}, got {name!r}")
    return _REGISTRY[name]


def _backend(endpoint: str | None) -> str:
    return "endpoint" if endpoint else "local"


def resolve_method(method: str, model: str | None, endpoint: str | None, revision: str | None = None) -> str:
    """The concrete method for these options, or a one-line ``ValueError``.

    ``auto`` reads the model's configuration (never its weights: :func:`queerbench.models.generation.describe_model`, the one
    function that says what kind a model is) and picks ``mlm`` for a masked LM and ``scored`` for a local causal LM;
    ``--endpoint URL`` means ``instructed``. A mismatch (a causal LM with ``mlm``, a masked LM with a generative
    method, an endpoint with a method that has no endpoint backend) is one clear error before anything loads.
    """
    get_method(method)
    if endpoint:
        if not model:
            raise ValueError("--endpoint needs --model NAME (the model name the endpoint serves, e.g. gpt-4o-mini)")
        served = [name for name, m in _REGISTRY.items() if "endpoint" in m.backends]
        if method == "auto":
            return "instructed"
        if method not in served:
            raise ValueError(
                "--endpoint runs --method instructed (replies) or scored (a completions endpoint's log-probabilities), "
                f"not a masked LM; drop --method {method} or use --method instructed"
            )
        return method
    if model is None:
        return "scored" if method == "auto" else method
    from queerbench.models.generation import describe_model

    kind, arch = describe_model(model, revision)
    if method == "auto":
        return "scored" if kind == "causal" else "mlm"
    if method == "mlm" and kind == "causal":
        raise ValueError(
            f"{model!r} is a causal LM ({arch}), not a masked LM: --method mlm needs a masked LM; "
            "use --method scored (or instructed, or auto)"
        )
    if _REGISTRY[method].generative and kind == "masked":
        raise ValueError(
            f"{model!r} is a masked LM ({arch}): --method {method} needs a causal LM; use --method mlm (or auto)"
        )
    return method


def preflight(options: Any) -> None:
    """The checks the run's predictor can make before any weights load (for a masked LM: tokenizer and top-k)."""
    cls = get_method(options.method).predictor_class(_backend(options.endpoint))
    if hasattr(cls, "preflight"):
        cls.preflight(options)


def load_predictor(
    options: Any,
    cache_path: Path,
    log: Callable[[str], None] = print,
    *,
    fingerprint: dict[str, Any] | None = None,
    stored: dict[str, Any] | None = None,
) -> Predictor:
    """The predictor for a run's ``options`` (``options.method`` already resolved): the registry's class for that
    method and backend, built from the options. ``cache_path``: where a generative method keeps its replies;
    ``fingerprint``: the run's model fingerprint; ``stored``: the metadata of a resume's saved chunks."""
    cls = get_method(options.method).predictor_class(_backend(options.endpoint))
    return cls.from_options(options, cache_path=cache_path, log=log, fingerprint=fingerprint, stored=stored)


def same_weights(stored: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether two run metadata records name the same model weights (their fingerprints match)."""
    return json.dumps(stored.get("fingerprint"), sort_keys=True) == json.dumps(now.get("fingerprint"), sort_keys=True)


def check_same_weights(stored: dict[str, Any], now: dict[str, Any], model: str, chunk_dir: Path) -> None:
    """Refuse to add chunks predicted by other weights to a resume's saved ones, for every method: other fingerprints
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
