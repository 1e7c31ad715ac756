"""The ``mlm`` method as a predictor: a masked LM fills the ``[MASK]`` of each sentence (see :mod:`.predict`).

It has the interface every method's predictor has (:class:`queerbench.methods.registry.Predictor`): built from a run's options
with :meth:`MaskedLMPredictor.from_options`, checked cheaply before anything is claimed with
:meth:`MaskedLMPredictor.preflight`, then ``metadata()`` and ``predict(ids, sentences, tick)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["MaskedLMPredictor"]


class MaskedLMPredictor:
    """``mlm`` on a masked LM: top-k words at the mask, the engine's ``default`` or ``paper`` mode."""

    method = "mlm"

    def __init__(
        self,
        model: str,
        *,
        config: str,
        top_k: int,
        device: str,
        dtype: str,
        batch_size: int,
        revision: str | None = None,
        fingerprint: dict[str, Any] | None = None,
        device_map: str | None = None,
    ) -> None:
        from queerbench.models.masked.predict import load_masked_lm

        self.config, self.top_k, self.batch_size = config, top_k, batch_size
        self.lm = load_masked_lm(model, device=device, dtype=dtype, revision=revision, device_map=device_map)
        self.fingerprint = fingerprint

    @classmethod
    def from_options(
        cls,
        options: Any,
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
            options.model,
            config=options.config,
            top_k=options.top_k,
            device=options.device,
            dtype=options.dtype,
            batch_size=options.batch_size,
            revision=revision,
            fingerprint=fingerprint,
            device_map=getattr(options, "device_map", None),
        )

    @staticmethod
    def preflight(options: Any) -> None:
        """Check the device, then load the masked LM's config and tokenizer only (not its weights) and check
        ``--top-k`` against the vocabulary it may predict from, so that a bad ``--top-k`` fails before the model
        loads."""
        from queerbench.models.device import resolve_device
        from queerbench.models.masked.predict import load_masked_lm_tokenizer, max_top_k
        from queerbench.models.memory import check_device_map, check_fits

        device = resolve_device(
            options.device
        )  # --device cuda on a machine without CUDA fails here, not after the claim
        check_device_map(getattr(options, "device_map", None))
        if Path(options.model).expanduser().is_file():
            raise ValueError(f"--model {options.model} is a file; a masked LM is a folder saved with save_pretrained")
        config, tokenizer = load_masked_lm_tokenizer(options.model, revision=options.revision)
        limit = max_top_k(config, tokenizer, options.config)
        if options.top_k > limit:
            what = "whole-word vocabulary entries" if options.config == "default" else "vocabulary entries"
            raise ValueError(
                f"--top-k {options.top_k} exceeds the {limit} {what} of {options.model}; choose --top-k <= {limit}"
            )
        device_map = getattr(options, "device_map", None)
        check_fits(options.model, config, options.dtype, device, device_map, causal=False, revision=options.revision)

    def metadata(self) -> dict[str, Any]:
        """The loaded model's metadata (commit, architecture, tokenizer, device, ...) and the run's fingerprint."""
        return {**self.lm.metadata(), "fingerprint": self.fingerprint}

    def predict(self, ids: Sequence[str], sentences: Sequence[str], tick: Callable[[int], None]) -> dict[str, list]:
        """tokens, token_ids and probs of the top-k words per sentence."""
        from queerbench.models.masked.predict import predict

        result = predict(
            self.lm,
            list(sentences),
            self.top_k,
            mode="paper" if self.config == "queergen" else self.config,  # QueerGen: raw top-k
            batch_size=self.batch_size,
            progress=tick,
        )
        return {"tokens": result.tokens, "token_ids": result.ids, "probs": result.probs}

    def close(self) -> None:
        """Nothing to release (the model goes with the predictor)."""
