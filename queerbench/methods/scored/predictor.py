"""``scored`` as a predictor: a causal LM's top-k words for each blank, asked as top-k ``fill_mask`` requests
(:mod:`queerbench.models.requests`), the seam every task asks a model through. The backend proposes whole-word
candidates and ranks them by the whole sentence's probability: a local causal LM's
(:class:`~queerbench.models.backends.causal.CausalBackend`, by the engine :mod:`queerbench.models.causal_blanks.local`)
or an OpenAI-compatible completions endpoint's (:class:`~queerbench.models.backends.endpoint.EndpointBackend`, the
same steps made of echoed completions calls: :mod:`queerbench.models.causal_blanks.endpoint_steps`).

It has the interface of :class:`queerbench.methods.registry.Predictor`: ``from_options`` builds one from a run's
options, ``metadata()`` names the method, the model and how its backend found the words (recorded in every output),
``predict(ids, sentences, tick)`` gives the prediction columns of those sentences, ``close()`` releases the backend
and a served model's reply cache.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from queerbench.methods.base import Pacing, Rows, predict_in_parts
from queerbench.methods.common import preflight_local
from queerbench.models.generation.settings import DEFAULT_MODEL

if TYPE_CHECKING:
    from queerbench.methods.base import RunSettings
    from queerbench.models.generation.cache import ResponseCache
    from queerbench.models.registry import ModelRef
    from queerbench.models.requests import FillMaskResult
    from queerbench.models.spec import ModelSpec

__all__ = ["PROMPTS_PER_REQUEST", "ScoredPredictor"]

PROMPTS_PER_REQUEST = 16
"""How many prompts a served model's completions request holds unless told (the API takes a list of prompts)."""


def _quiet(_: str) -> None:
    """A local backend's notes are not shown: ``scored`` asks only ``fill_mask``, whose engine says nothing."""


def _columns(found: Sequence[FillMaskResult]) -> dict[str, list]:
    """The prediction columns of top-k fills, in their order."""
    out: dict[str, list] = {
        "tokens": [list(r.words) for r in found],
        "probs": [list(r.probs) for r in found],
        "logprobs": [list(r.logprobs) for r in found],
        "n_word_tokens": [list(r.n_tokens) for r in found],
    }
    if any(r.n_proposed is not None for r in found):
        out["n_proposed"] = [r.n_proposed for r in found]
    return out


class ScoredPredictor:
    """``scored`` on a local causal LM or a completions endpoint (see the module doc)."""

    method: ClassVar[str] = "scored"

    def __init__(
        self,
        model: str,
        *,
        top_k: int,
        spec: ModelSpec | None = None,
        endpoint: str | None = None,
        revision: str | None = None,
        loaded: tuple[Any, Any] | None = None,
        ref: ModelRef | None = None,
        cache_path: Path | None = None,
        prompts_per_request: int | None = None,
        logprobs: int | None = None,
        log: Callable[[str], None] = print,
        **endpoint_options: Any,
    ) -> None:
        """``spec``: how the model runs (an endpoint's ``batch_size`` is not used: a completions request holds
        ``prompts_per_request`` prompts, :data:`PROMPTS_PER_REQUEST` unless given). A served model's calls are kept
        in the reply cache at ``cache_path`` and its probe's in ``probe.sqlite`` next to it; ``logprobs``: how many
        next tokens its propose step asks for (None: five times the candidates). Both shape a served model's calls:
        given for a local model, they are refused in one line. ``endpoint_options`` go to its runner
        (``api_key_env``, ``max_retries``, …)."""
        from queerbench.models.backends import BlanksBackend, GenerateBackend, open_backend
        from queerbench.models.generation.cache import ResponseCache
        from queerbench.models.registry import model_ref
        from queerbench.models.requests import FILL_MASK
        from queerbench.models.spec import ModelSpec

        self.model_id, self.top_k = model, top_k
        spec = spec if spec is not None else ModelSpec()
        spec.check_endpoint(endpoint)
        owned = sorted({"concurrency", "requests_per_minute", "timeout"} & set(endpoint_options))
        if owned:
            raise ValueError(f"{', '.join(owned)}: pass them in spec=ModelSpec(...) (concurrency, rate, timeout)")
        if ref is None:  # a run's is resolved once
            ref = (
                model_ref(model, endpoint)
                if endpoint
                else model_ref(None if model == DEFAULT_MODEL else model, revision=revision)
            )
        served_only = [
            name
            for name, given in (("logprobs", logprobs), ("prompts_per_request", prompts_per_request))
            if given is not None
        ]
        if served_only and not ref.endpoint:  # a local model scores every token itself: they would be ignored
            raise ValueError(
                f"{', '.join(served_only)}: a completions endpoint's setting(s) of scored; {model} runs locally: drop "
                f"{'them' if len(served_only) > 1 else 'it'}"
            )
        if ref.endpoint:
            if cache_path is None:
                raise ValueError(f"scored on {model} at an endpoint keeps its calls in a reply cache: give cache_path")
            spec = dataclasses.replace(
                spec, batch_size=PROMPTS_PER_REQUEST if prompts_per_request is None else prompts_per_request
            )
        self.batch_size = spec.batch_size
        self.cache: ResponseCache | None = None
        # the model as tasks see it: the backend that answers top-k fill_mask requests (a causal LM's, local or
        # served; another kind of model is refused in one line before anything loads)
        backend = open_backend(
            ref,
            FILL_MASK,
            spec,
            loaded=loaded,
            log=log if ref.endpoint else _quiet,
            announce=False,
            model_kind="endpoint" if ref.endpoint else "causal",
            model_kind_for="scored",
            **endpoint_options,
        )
        if not isinstance(backend, BlanksBackend):
            backend.close()
            raise TypeError(f"{backend.name}: scored runs on a backend that answers top-k fill_mask requests")
        self.backend: BlanksBackend = backend
        try:
            # a served model is probed first, its replies in a file of their own (removed when the probe fails: a
            # refused server leaves nothing that would make the run folder look resumable); then its reply cache
            probe_path = None if cache_path is None else cache_path.with_name("probe.sqlite")
            backend.prepare_blanks(top_k, probe_path=probe_path, logprobs=logprobs)
            if ref.endpoint and cache_path is not None and isinstance(backend, GenerateBackend):
                self.cache = backend.reply_cache = ResponseCache(cache_path)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def preflight(options: RunSettings) -> None:
        """A local model's loading checks that need no weights (a model too large for the free memory is refused
        here); nothing for an endpoint (its probe comes first, when the predictor is made)."""
        preflight_local(options)

    @classmethod
    def from_options(
        cls, options: RunSettings, *, cache_path: Path, log: Callable[[str], None] = print, **_: Any
    ) -> ScoredPredictor:
        """The predictor for a run's ``options`` (nothing to resume from: a resume re-checks the fingerprint)."""
        return cls(
            str(options.model),
            top_k=options.top_k,
            spec=options.model_spec,
            endpoint=options.endpoint,
            revision=options.revision,
            ref=options.ref,
            cache_path=cache_path,
            log=log,
        )

    @classmethod
    def from_loaded(cls, loaded: tuple[Any, Any], options: RunSettings) -> ScoredPredictor:
        """The predictor of a run's ``options`` over a causal LM already loaded (``(model, tokenizer)``)."""
        return cls(
            str(options.model),
            top_k=options.top_k,
            spec=options.model_spec,
            revision=options.revision,
            loaded=loaded,
            ref=options.ref,
        )

    @property
    def fingerprint(self) -> dict[str, Any]:
        """The fingerprint the run records (a served model's with what its probe found)."""
        return dict(self.backend.blanks_metadata(self.top_k)["fingerprint"])

    def metadata(self) -> dict[str, Any]:
        """Method, model, and how the backend found the words: its fingerprint, settings and decoding."""
        return {"method": self.method, "model": self.model_id, **self.backend.blanks_metadata(self.top_k)}

    def _requests(self, ids: Sequence[str], sentences: Sequence[str]) -> list[Any]:
        """One top-k ``fill_mask`` request per sentence, for the item its id names (no ids: named by position); ids
        that are not one per sentence, or not distinct, are one line before any call."""
        from queerbench.models.requests import FillMask

        names = [str(i) for i in ids] if len(ids) else [str(i) for i in range(len(sentences))]
        if len(names) != len(sentences):
            raise ValueError(f"scored needs one distinct id per sentence, got {len(ids)} ids for {len(sentences)}")
        if len(set(names)) != len(names):
            raise ValueError(f"scored needs one distinct id per sentence, got {len(names) - len(set(names))} repeated")
        return [FillMask(s, top_k=self.top_k, item=i) for i, s in zip(names, sentences, strict=True)]

    def predict(self, ids: Sequence[str], sentences: Sequence[str], tick: Callable[[int], None]) -> dict[str, list]:
        """tokens (lowercased top-k words), probs (renormalised over candidates), logprobs, n_word_tokens (and an
        endpoint's n_proposed): one top-k ``fill_mask`` request per sentence."""
        return _columns(self.backend.fill_mask(self._requests(ids, sentences), tick))

    def stream(
        self, ids: Sequence[str], sentences: Sequence[str], tick: Callable[[int], None], pacing: Pacing
    ) -> Iterator[Rows]:
        """A backend whose calls go through concurrent slots (an endpoint's:
        :class:`~queerbench.models.backends.StreamingBlanksBackend`) hands out each sentence as its last reply
        arrives, so a slow or retried call holds up its own sentence only (``pacing`` is not needed: the run saves
        streamed rows every 64 sentences or 15 s); a local model answers a batch at a time
        (:func:`~queerbench.methods.base.predict_in_parts`)."""
        from queerbench.models.backends import StreamingBlanksBackend

        if not isinstance(self.backend, StreamingBlanksBackend):
            yield from predict_in_parts(self, ids, sentences, tick, pacing)
            return
        requests = self._requests(ids, sentences)
        for i, found in self.backend.stream_fill_mask(requests, tick):
            yield Rows([ids[i] if len(ids) else requests[i].item], _columns([found]))

    def close(self) -> None:
        """Close the backend and a served model's reply cache."""
        try:
            self.backend.close()
        finally:
            if self.cache is not None:
                self.cache.close()
