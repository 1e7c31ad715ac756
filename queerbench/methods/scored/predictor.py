"""``scored`` as a predictor: a local causal LM's top-k words for each blank, asked as top-k ``fill_mask`` requests
(:mod:`queerbench.models.requests`) that the causal-LM backend answers by proposing whole-word candidates and ranking
them by the whole sentence's probability (:class:`~queerbench.models.backends.causal.CausalBackend`, by the engine
:mod:`queerbench.models.causal_blanks.local`), the seam every task asks a model through.

It has the interface of :class:`queerbench.methods.registry.Predictor`: ``from_options`` builds one from a run's options,
``metadata()`` names the method, the model's fingerprint and the scoring settings (recorded in every output),
``predict(ids, sentences, tick)`` gives the prediction columns of those sentences, ``close()`` releases nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from queerbench.methods.base import Pacing, Rows, predict_in_parts
from queerbench.methods.common import preflight_local
from queerbench.models.generation.settings import DEFAULT_MODEL

if TYPE_CHECKING:
    from queerbench.methods.base import RunSettings
    from queerbench.models.registry import ModelRef
    from queerbench.models.spec import ModelSpec

__all__ = ["ScoredPredictor"]


def _quiet(_: str) -> None:
    """The backend's notes are not shown: ``scored`` asks only ``fill_mask``, whose engine says nothing."""


class ScoredPredictor:
    """``scored`` on a local causal LM (see :mod:`queerbench.models.causal_blanks.local`)."""

    method: ClassVar[str] = "scored"

    def __init__(
        self,
        model: str,
        *,
        top_k: int,
        spec: ModelSpec,
        revision: str | None = None,
        loaded: tuple[Any, Any] | None = None,
        ref: ModelRef | None = None,
    ) -> None:
        from queerbench.models.backends import open_backend
        from queerbench.models.backends.causal import CausalBackend
        from queerbench.models.registry import model_ref
        from queerbench.models.requests import FILL_MASK

        self.model_id, self.top_k, self.batch_size = model, top_k, spec.batch_size
        ref = ref or model_ref(None if model == DEFAULT_MODEL else model, revision=revision)  # a run's: resolved once
        # the model as tasks see it: the backend that answers top-k fill_mask requests (a causal LM's, loaded to
        # score text; another kind of model is refused in one line before anything loads)
        backend = open_backend(
            ref,
            FILL_MASK,
            spec,
            loaded=loaded,
            log=_quiet,
            announce=False,
            model_kind="causal",
            model_kind_for="scored",
        )
        if not isinstance(backend, CausalBackend):  # a local reference that answers fill_mask top-k: a causal LM's
            backend.close()
            raise TypeError(f"{backend.name}: scored runs on a local causal LM, got {type(backend).__name__}")
        self.backend = backend
        self.device_map = backend.runner.device_map  # a loaded model was placed by whoever loaded it
        self.fingerprint = backend.fingerprint()  # what was loaded: a Hub model's commit at --revision, else the files
        self.lm = backend.blank_filler()

    @staticmethod
    def preflight(options: RunSettings) -> None:
        """The loading checks that need no weights (a model too large for the free memory is refused here)."""
        preflight_local(options)

    @classmethod
    def from_options(cls, options: RunSettings, **_: Any) -> ScoredPredictor:
        """The predictor for a run's ``options`` (nothing to resume from: a resume re-checks the fingerprint)."""
        return cls(
            str(options.model),
            top_k=options.top_k,
            spec=options.model_spec,
            revision=options.revision,
            ref=options.ref,
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

    def metadata(self) -> dict[str, Any]:
        """Method, model and its fingerprint, and the scoring settings."""
        import torch
        import transformers

        from queerbench.models.causal_blanks.local import CANDIDATES_PER_K, MAX_WORD_TOKENS

        return {
            "method": self.method,
            "model": self.model_id,
            "fingerprint": self.fingerprint,
            **self.lm.metadata(),
            "device_map": self.device_map,
            "params": int(sum(p.numel() for p in self.lm.model.parameters())),
            "decoding": {
                "candidates": CANDIDATES_PER_K * self.top_k,
                "candidates_per_k": CANDIDATES_PER_K,
                "max_word_tokens": MAX_WORD_TOKENS,
                "ranking": "log P(word + text after the blank | start token + text before the blank), summed",
                "prompt_format": "raw",
            },
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__,
        }

    def predict(self, ids: Sequence[str], sentences: Sequence[str], tick: Callable[[int], None]) -> dict[str, list]:
        """tokens (lowercased top-k words), probs (renormalised over candidates), logprobs, n_word_tokens: one top-k
        ``fill_mask`` request per sentence."""
        from queerbench.models.requests import FillMask

        found = self.backend.fill_mask([FillMask(s, top_k=self.top_k) for s in sentences], tick)
        return {
            "tokens": [list(r.words) for r in found],
            "probs": [list(r.probs) for r in found],
            "logprobs": [list(r.logprobs) for r in found],
            "n_word_tokens": [list(r.n_tokens) for r in found],
        }

    def stream(
        self, ids: Sequence[str], sentences: Sequence[str], tick: Callable[[int], None], pacing: Pacing
    ) -> Iterator[Rows]:
        """A batch of sentences at a time (:func:`~queerbench.methods.base.predict_in_parts`)."""
        return predict_in_parts(self, ids, sentences, tick, pacing)

    def close(self) -> None:
        """Nothing to release (the model goes with the predictor)."""
