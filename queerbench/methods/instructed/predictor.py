"""``instructed`` as a predictor: a chat model, local or behind an OpenAI-compatible endpoint, is asked for the word
(see :mod:`queerbench.methods.instructed.replies`).

The model is opened as the backend that answers ``generate`` requests (:func:`queerbench.models.backends.open_backend`:
a model that cannot is refused in one line before anything loads), and each sentence's samples are ``generate``
requests asked through its runner. It has the interface of :class:`queerbench.methods.registry.Predictor`; its
replies are kept in the run's reply cache as they arrive, so a resume asks only the calls whose replies are not saved.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from queerbench.base.redact import redact_url
from queerbench.methods.base import Pacing, Rows, predict_in_parts
from queerbench.methods.common import preflight_local

if TYPE_CHECKING:
    from queerbench.methods.base import RunSettings
    from queerbench.models.registry import ModelRef
    from queerbench.models.spec import ModelSpec

__all__ = ["InstructedPredictor"]


class InstructedPredictor:
    """``instructed`` on a local chat model or an OpenAI-compatible endpoint (see :mod:`queerbench.methods.instructed.replies`)."""

    method: ClassVar[str] = "instructed"

    def __init__(
        self,
        model: str,
        *,
        endpoint: str | None,
        top_k: int,
        spec: ModelSpec,
        seed: int,
        prompt_id: str | None,
        max_new_tokens: int | None,
        cache_path: Path,
        log: Callable[[str], None] = print,
        revision: str | None = None,
        ref: ModelRef | None = None,
    ) -> None:
        from queerbench.methods.instructed.replies import instructed_settings, load_prompts
        from queerbench.models.backends import GenerateBackend, open_backend
        from queerbench.models.generation import ResponseCache
        from queerbench.models.registry import model_ref
        from queerbench.models.requests import GENERATE

        self.model_id, self.endpoint, self.top_k = model, endpoint, top_k
        self.prompt_id = prompt_id or load_prompts()["default_prompt"]
        self.settings = instructed_settings(top_k, seed, spec.batch_size, max_new_tokens)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ref = ref or model_ref(model, endpoint, revision)  # a run's: resolved once
            # the model as tasks see it: a backend that answers generate requests (refused in one line otherwise)
            backend = open_backend(ref, GENERATE, spec, log=log, announce=False)  # its notes say it
        if not isinstance(backend, GenerateBackend):
            backend.close()
            raise TypeError(f"{backend.name}: its generate requests are not answered by a generation runner")
        self.backend = backend
        self.runner = backend.generator()
        for w in caught:  # e.g. "no chat template: plain prompt" — said once, here, and recorded in the metadata
            log(f"note: {w.message}")
        try:
            self.cache = ResponseCache(cache_path)
        except BaseException:
            backend.close()
            raise
        backend.reply_cache = self.cache  # the run's replies, kept as they arrive (closed by the predictor)
        from queerbench.models.generation.collect import ErrorStreak

        self.streak = ErrorStreak()  # failed calls in a row, across the parts of the run
        weights = getattr(self.runner, "weights", None)  # a local runner fingerprinted what it loaded
        self.fingerprint = weights if weights is not None and not endpoint else ref.fingerprint(loaded=True)
        # a local model at temperature 0 would repeat an empty reply: it is not asked again
        self.reask_empty = bool(endpoint) or self.settings.temperature > 0

    @staticmethod
    def preflight(options: RunSettings) -> None:
        """A local model's loading checks that need no weights; nothing for an endpoint (its probe comes first)."""
        preflight_local(options)

    @classmethod
    def from_options(
        cls, options: RunSettings, *, cache_path: Path, log: Callable[[str], None] = print, **_: Any
    ) -> InstructedPredictor:
        """The predictor for a run's ``options``; replies are kept in the SQLite cache at ``cache_path``."""
        return cls(
            str(options.model),
            endpoint=options.endpoint,
            top_k=options.top_k,
            spec=options.model_spec,
            seed=options.seed,
            prompt_id=options.setting("prompt_id"),
            max_new_tokens=options.setting("max_new_tokens"),
            cache_path=cache_path,
            log=log,
            revision=options.revision,
            ref=options.ref,
        )

    def metadata(self) -> dict[str, Any]:
        """Method, model/endpoint and fingerprints, prompt and decoding settings."""
        from queerbench.methods.instructed.replies import load_prompts

        runner_fp = self.runner.fingerprint()
        dec = load_prompts()["decoding"]
        return {
            "method": self.method,
            "model": self.model_id,
            "endpoint": redact_url(self.endpoint) if self.endpoint else None,
            "fingerprint": self.fingerprint,
            "runner": runner_fp,
            "prompt_format": runner_fp.get("prompt_format", "chat"),
            "prompt_id": self.prompt_id,
            "prompt": load_prompts()["prompts"][self.prompt_id]["text"],
            "system_prompt": None,
            "decoding": {
                **self.settings.decoding(),
                "samples": self.settings.samples,
                "empty_reasks": int(dec["empty_reasks"]) if self.reask_empty else 0,
                "kind": "greedy" if self.top_k == 1 else f"{self.top_k} samples, duplicates allowed",
            },
            "device": getattr(self.runner, "device", None),
            "device_map": getattr(self.runner, "device_map", None),
        }

    def predict(self, ids: Sequence[str], sentences: Sequence[str], tick: Callable[[int], None]) -> dict[str, list]:
        """tokens (the ``ok`` words), reply and label per sample, n_distinct, reasks, prompt_format."""
        from queerbench.methods.instructed.replies import predict_instructed

        frame = predict_instructed(
            self.runner,
            ids,
            sentences,
            self.settings,
            self.cache,
            prompt_id=self.prompt_id,
            reask_empty=self.reask_empty,
            progress=tick,
            show_progress=False,  # the run's bar counts these sentences as their replies arrive
            streak=self.streak,
        )
        return {c: frame[c].tolist() for c in frame.columns if c != "id"}

    def stream(
        self, ids: Sequence[str], sentences: Sequence[str], tick: Callable[[int], None], pacing: Pacing
    ) -> Iterator[Rows]:
        """A backend that streams (an endpoint's: :class:`~queerbench.models.backends.StreamingBackend`) answers
        through its slots for the whole run, each sentence handed out as its last reply arrives
        (:func:`~queerbench.methods.instructed.replies.stream_instructed`); a local model answers a batch at a time
        (:func:`~queerbench.methods.base.predict_in_parts`)."""
        from queerbench.models.backends import StreamingBackend

        if not isinstance(self.backend, StreamingBackend):
            yield from predict_in_parts(self, ids, sentences, tick, pacing)
            return
        from queerbench.methods.instructed.replies import stream_instructed

        collector = self.backend.reply_stream(streak=self.streak)
        try:
            for row in stream_instructed(
                collector,
                ids,
                sentences,
                self.settings,
                prompt_id=self.prompt_id,
                reask_empty=self.reask_empty,
                tick=tick,
            ):
                yield Rows([row.pop("id")], {c: [v] for c, v in row.items()})
        finally:
            collector.close()

    def close(self) -> None:
        """Close the reply cache and the backend."""
        try:
            self.cache.close()
        finally:
            self.backend.close()
