"""``mlm``: a masked LM fills the ``[MASK]`` of each sentence: top-k ``fill_mask`` requests
(:mod:`queerbench.models.requests`) that the masked-LM backend answers (:class:`~queerbench.models.backends.masked.
MaskedBackend`, by the engine :mod:`queerbench.models.masked.predict`), the seam every task asks a model through.

:data:`MLM` is the method's registry entry; :class:`MaskedLMPredictor` has the interface every method's predictor has
(:class:`queerbench.methods.base.Predictor`): built from a run's options with :meth:`MaskedLMPredictor.from_options`,
checked cheaply before anything is claimed with :meth:`MaskedLMPredictor.preflight`, then ``metadata()`` and
``predict(ids, sentences, tick)``. How the top-k is read (whole words or raw tokens) is the task's ``mlm_mode``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from queerbench.methods.base import Method, Pacing, Rows, predict_in_parts

if TYPE_CHECKING:
    from queerbench.methods.base import RunSettings
    from queerbench.models.registry import ModelRef
    from queerbench.models.spec import ModelSpec

__all__ = ["MLM", "MaskedLMPredictor"]


def _mode(config: str) -> str:
    """The masked-LM mode of the task ``config`` (its ``mlm_mode``)."""
    from queerbench.tasks import get_task

    return str(get_task(config).spec.mlm_mode)


class MaskedLMPredictor:
    """``mlm`` on a masked LM: top-k words at the mask, in the task's mode (whole words or raw tokens)."""

    method: ClassVar[str] = "mlm"

    def __init__(
        self,
        model: str,
        *,
        config: str,
        top_k: int,
        spec: ModelSpec,
        revision: str | None = None,
        fingerprint: dict[str, Any] | None = None,
        lm: Any = None,
        mode: str | None = None,
        ref: ModelRef | None = None,
    ) -> None:
        from queerbench.models.backends import open_backend
        from queerbench.models.backends.masked import MaskedBackend
        from queerbench.models.registry import model_ref
        from queerbench.models.requests import FILL_MASK

        self.config, self.top_k, self.batch_size = config, top_k, spec.batch_size
        self.mode = mode or _mode(config)  # the task's (given by a run's options, which looked it up once)
        ref = ref or model_ref(model, revision=revision, check_paths=lm is None)
        # the model as tasks see it: the backend that answers fill_mask requests (on a masked LM already loaded too)
        backend = open_backend(
            ref, FILL_MASK, spec, loaded=lm, announce=False, model_kind="masked", model_kind_for="mlm"
        )
        if not isinstance(backend, MaskedBackend):  # a causal LM answers top-k fill_mask only: mlm needs a masked LM
            backend.close()
            raise TypeError(f"{backend.name}: mlm runs on a masked LM, got {type(backend).__name__}")
        self.backend = backend
        self.lm = backend.lm
        self.fingerprint = fingerprint

    @classmethod
    def from_loaded(cls, lm: Any, options: RunSettings) -> MaskedLMPredictor:
        """The predictor of a run's ``options`` over a masked LM already loaded (the Space's cached models)."""
        return cls(
            options.model_id,
            config=options.config,
            top_k=options.top_k,
            spec=options.model_spec,
            lm=lm,
            mode=options.mlm_mode,
        )

    @classmethod
    def from_options(
        cls,
        options: RunSettings,
        *,
        cache_path: Path,
        log: Callable[[str], None] = print,
        fingerprint: dict[str, Any] | None = None,
        stored: dict[str, Any] | None = None,
    ) -> MaskedLMPredictor:
        """The predictor for a run's ``options``. A resume (``stored``: the metadata of its saved chunks) loads the
        very commit its first chunks came from, so that a Hub model that moved on is caught, not mixed in."""
        revision = options.revision or (stored or {}).get("commit_hash")
        return cls(
            options.model_id,
            config=options.config,
            top_k=options.top_k,
            spec=options.model_spec,
            revision=revision,
            fingerprint=fingerprint,
            mode=options.mlm_mode,
            ref=options.ref if revision == options.revision else None,  # a resume's stored commit: resolved anew
        )

    @staticmethod
    def preflight(options: RunSettings) -> None:
        """Check the device, then load the masked LM's config and tokenizer only (not its weights) and check
        ``--top-k`` against the vocabulary it may predict from, so that a bad ``--top-k`` fails before the model
        loads."""
        from queerbench.models.device import resolve_device
        from queerbench.models.masked.predict import load_masked_lm_tokenizer, max_top_k
        from queerbench.models.memory import check_fits

        spec = options.model_spec  # checked when made: dtype, device map, batch size
        device = resolve_device(spec.device)  # --device cuda on a machine without CUDA fails here, not after the claim
        if Path(options.model_id).expanduser().is_file():
            raise ValueError(f"--model {options.model} is a file; a masked LM is a folder saved with save_pretrained")
        config, tokenizer = load_masked_lm_tokenizer(options.model_id, revision=options.revision)
        mode = options.mlm_mode
        limit = max_top_k(config, tokenizer, mode)
        if options.top_k > limit:
            what = "whole-word vocabulary entries" if mode == "whole_word" else "vocabulary entries"
            raise ValueError(
                f"--top-k {options.top_k} exceeds the {limit} {what} of {options.model}; choose --top-k <= {limit}"
            )
        check_fits(
            options.model_id, config, spec.dtype, device, spec.device_map, causal=False, revision=options.revision
        )

    def metadata(self) -> dict[str, Any]:
        """The loaded model's metadata (commit, architecture, tokenizer, device, ...) and the run's fingerprint."""
        return {**self.lm.metadata(), "fingerprint": self.fingerprint}

    def predict(self, ids: Sequence[str], sentences: Sequence[str], tick: Callable[[int], None]) -> dict[str, list]:
        """tokens, token_ids and probs of the top-k words per sentence: one top-k ``fill_mask`` request each."""
        from queerbench.models.requests import FillMask

        found = self.backend.fill_mask([FillMask(s, top_k=self.top_k, mode=self.mode) for s in sentences], tick)
        return {
            "tokens": [list(r.words) for r in found],
            "token_ids": [list(r.token_ids) for r in found],
            "probs": [list(r.probs) for r in found],
        }

    def stream(
        self, ids: Sequence[str], sentences: Sequence[str], tick: Callable[[int], None], pacing: Pacing
    ) -> Iterator[Rows]:
        """A batch of sentences at a time (:func:`~queerbench.methods.base.predict_in_parts`)."""
        return predict_in_parts(self, ids, sentences, tick, pacing)

    def close(self) -> None:
        """Nothing to release (the model goes with the predictor)."""


MLM = Method(
    "mlm",
    default_model="bert-base-uncased",
    backends={"masked_lm": "queerbench.methods.mlm:MaskedLMPredictor"},
    description="a masked LM fills the blank",
    hub_task="fill-mask",
    auto_on=("masked_lm",),
    predates_methods=True,  # runs and tables of the masked-LM benchmark from before there were methods name none
)
