"""What every toxicity scorer shares: the :class:`ToxicityScorer` interface, its disk cache, the attribute names and
the label → attribute maps (data: ``lexicons/toxicity_labels.json``).

The scorers themselves live in their own modules (:mod:`queerbench.scoring.toxicity_hf`,
:mod:`queerbench.scoring.toxicity_embedded`, :mod:`queerbench.scoring.perspective`); :mod:`queerbench.scoring.toxicity`
is the registry that builds one by name. Every scorer returns probabilities under Perspective's attribute names
(:data:`ATTRIBUTES`, plus ``SEVERE_TOXICITY`` where the model has it). Scores are deduplicated and cached on disk per
scorer identity (a sqlite file whose name hashes :meth:`ToxicityScorer.describe`), so a rerun recomputes nothing and
an interrupted run keeps what it finished.
"""

from __future__ import annotations

import abc
import hashlib
import json
import logging
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from queerbench.base.sources import cache_dir as user_cache_dir

__all__ = [
    "ALL_ATTRIBUTES",
    "ATTRIBUTES",
    "KEY",
    "SEVERE",
    "WORD_SEPARATOR",
    "ScoreCache",
    "ToxicityScorer",
    "attributes_of",
    "label_maps",
    "signature_fields",
]

KEY = "toxicity"
"""The name this scorer's per-sentence values, per-group scores and signature part go by (``scores.json``'s
blocks, the scored rows' column, the signature field), and the name of the run setting that picks the toxicity
scorer (``--toxicity``)."""
logger = logging.getLogger(__name__)

ATTRIBUTES: tuple[str, ...] = ("TOXICITY", "IDENTITY_ATTACK", "INSULT", "PROFANITY", "THREAT")
"""The five attributes of the paper, in the order of ``toxicity_counts``."""
SEVERE = "SEVERE_TOXICITY"
ALL_ATTRIBUTES: tuple[str, ...] = (*ATTRIBUTES, SEVERE)


# ------------------------------------------------------------------------------------------------ label maps
def _validate_label_file(raw: Any) -> dict[str, dict[str, Any]]:
    """Check the schema of ``toxicity_labels.json``; raise ``ValueError`` naming the fault."""
    where = "lexicons/toxicity_labels.json"
    if not isinstance(raw, dict) or raw.get("schema_version") != 1 or not isinstance(raw.get("maps"), dict):
        raise ValueError(f"{where}: expected {{'schema_version': 1, 'attributes': [...], 'maps': {{...}}}}")
    if tuple(raw.get("attributes", ())) != ALL_ATTRIBUTES:
        raise ValueError(f"{where}: 'attributes' must be {list(ALL_ATTRIBUTES)}")
    for name, entry in raw["maps"].items():
        if not isinstance(entry, dict) or set(entry) - {"description", "labels", "map"} or "map" not in entry:
            raise ValueError(f"{where}: map {name!r} needs keys 'map' (and optionally 'labels', 'description')")
        _check_label_map(entry["map"], f"{where}: map {name!r}")
        labels = entry.get("labels")
        if labels is not None and (not isinstance(labels, list) or set(labels) != set(entry["map"])):
            raise ValueError(f"{where}: map {name!r}: 'labels' must list exactly the keys of 'map'")
    return raw["maps"]


def _check_label_map(mapping: Any, what: str) -> dict[str, str | None]:
    """A label map is {label: attribute or None}; every attribute at most once. Raise ``ValueError`` otherwise."""
    if not isinstance(mapping, dict) or not all(isinstance(k, str) for k in mapping):
        raise ValueError(f"{what}: a label map must be a dict {{model label: attribute name or None}}")
    bad = {k: v for k, v in mapping.items() if v is not None and v not in ALL_ATTRIBUTES}
    if bad:
        raise ValueError(f"{what}: unknown attribute(s) {bad}; use one of {list(ALL_ATTRIBUTES)} or None to ignore")
    used = [v for v in mapping.values() if v is not None]
    dupes = sorted({v for v in used if used.count(v) > 1})
    if dupes:
        raise ValueError(f"{what}: attribute(s) {dupes} are mapped from more than one label; keep one label each")
    return dict(mapping)


@cache
def label_maps() -> dict[str, dict[str, Any]]:
    """The validated label maps from ``lexicons/toxicity_labels.json`` (name → {labels, map, description})."""
    text = resources.files("queerbench.lexicons").joinpath("toxicity_labels.json").read_text(encoding="utf-8")
    return _validate_label_file(json.loads(text))


# ------------------------------------------------------------------------------------------------ disk cache
class ScoreCache:
    """A sqlite table ``text → {attribute: probability}`` for one scorer identity.

    Each :meth:`put_many` is one transaction, so a crash never leaves a half-written row and every finished
    batch survives. Only texts and scores are stored — never credentials.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # one connection, usable from any thread (the Space and the metric may call from worker threads)
        self._conn = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
        self._lock = threading.Lock()
        with self._lock, self._conn:
            self._conn.execute("CREATE TABLE IF NOT EXISTS scores (text TEXT PRIMARY KEY, scores TEXT NOT NULL)")

    def get_many(self, texts: Sequence[str]) -> dict[str, dict[str, float]]:
        """Cached scores for those of ``texts`` that have them."""
        found: dict[str, dict[str, float]] = {}
        unique = list(dict.fromkeys(texts))
        for start in range(0, len(unique), 500):
            chunk = unique[start : start + 500]
            marks = ",".join("?" * len(chunk))
            with self._lock:
                hits = self._conn.execute(f"SELECT text, scores FROM scores WHERE text IN ({marks})", chunk).fetchall()
            found.update((text, json.loads(scores)) for text, scores in hits)
        return found

    def put_many(self, items: Sequence[tuple[str, dict[str, float]]]) -> None:
        """Store scores (one transaction)."""
        with self._lock, self._conn:
            self._conn.executemany(
                "INSERT OR REPLACE INTO scores (text, scores) VALUES (?, ?)",
                [(text, json.dumps(scores, sort_keys=True)) for text, scores in items],
            )

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM scores").fetchone()[0])

    def close(self) -> None:
        """Close the connection (the file stays)."""
        with self._lock:
            self._conn.close()


# ------------------------------------------------------------------------------------------------ interface
WORD_SEPARATOR = "\x1f"
"""Joins a text and its word into one cache key, for scorers that read both (:attr:`ToxicityScorer.needs_words`)."""


class ToxicityScorer(abc.ABC):
    """Scores texts for Perspective-style attributes; subclasses implement :meth:`_score_batches`.

    :meth:`score` handles what every scorer needs: input checks, deduplication, the disk cache, and a frame with
    one row per input text in input order.
    """

    name: str
    attributes: tuple[str, ...]
    needs_words: bool = False  # True: a text is scored with its word (the completion alone); see :meth:`score`

    def __init__(self, *, cache_dir: str | Path | None = None) -> None:
        self._cache_root = Path(cache_dir).expanduser() if cache_dir is not None else user_cache_dir() / "toxicity"
        self._cache: ScoreCache | None = None

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """Scorer name, model/version/sha256 or endpoint, attribute map: what identifies its scores. Never a key."""

    @abc.abstractmethod
    def _score_batches(
        self, texts: list[str], indices: list[int], *, progress: bool
    ) -> Iterator[list[dict[str, float]]]:
        """Score ``texts`` (unique, uncached), yielding consecutive chunks of {attribute: probability} in order.

        ``indices[j]`` is the position of ``texts[j]`` in the caller's input, for error messages. Each yielded
        chunk is cached at once, so work done before a failure is kept.
        """

    def _check_texts(self, texts: list[str], indices: list[int]) -> None:  # noqa: B027 - optional hook
        """Hook for scorer-specific input limits: raise ``ValueError`` naming ``indices[j]`` before any work."""

    @property
    def cache_path(self) -> Path:
        """The sqlite file that holds this scorer's scores (named by a hash of :meth:`describe`)."""
        identity = json.dumps(self.describe(), sort_keys=True, default=str)
        digest = hashlib.sha256(identity.encode("utf-8")).hexdigest()[:16]
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.name).strip("_")[:60] or "scorer"
        return self._cache_root / f"{slug}-{digest}.sqlite"

    def _get_cache(self) -> ScoreCache:
        if self._cache is None:
            self._cache = ScoreCache(self.cache_path)
        return self._cache

    def score(
        self, texts: Sequence[str], *, words: Sequence[str] | None = None, progress: bool = False
    ) -> pd.DataFrame:
        """Probabilities in [0, 1]: one row per text (input order, duplicates kept), columns :attr:`attributes`.

        ``words``: the word each text was completed with; read by scorers whose :attr:`needs_words` is true (they
        refuse to score without them), ignored by the others."""
        if isinstance(texts, str):
            raise TypeError("score() takes a sequence of texts, not a single string; wrap it in a list")
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"text #{i} is {type(text).__name__}, not str; pass strings only")
        if self.needs_words:
            if words is None or len(words) != len(texts):
                raise ValueError(
                    f"the {self.name} toxicity scorer reads each text with the word it was completed with: pass "
                    "words=[...] (one per text)"
                )
            texts = [f"{t}{WORD_SEPARATOR}{w}" for t, w in zip(texts, words, strict=True)]
        if not texts:
            return pd.DataFrame({a: pd.Series([], dtype="float64") for a in self.attributes})
        first_index: dict[str, int] = {}
        for i, text in enumerate(texts):
            first_index.setdefault(text, i)
        store = self._get_cache()
        known = store.get_many(list(first_index))
        missing = [t for t in first_index if t not in known]
        if missing:
            missing_indices = [first_index[t] for t in missing]
            self._check_texts(missing, missing_indices)
            logger.info("%s: scoring %d new texts (%d cached)", self.name, len(missing), len(known))
            pos = 0
            for chunk in self._score_batches(missing, missing_indices, progress=progress):
                done = list(zip(missing[pos : pos + len(chunk)], chunk, strict=True))
                store.put_many(done)
                known.update(done)
                pos += len(chunk)
            if pos != len(missing):
                raise RuntimeError(f"{self.name}: scored {pos} of {len(missing)} texts; this is a bug in the scorer")
        rows = [[known[t][a] for a in self.attributes] for t in texts]
        return pd.DataFrame(np.asarray(rows, dtype="float64").reshape(len(texts), -1), columns=list(self.attributes))

    def close(self) -> None:
        """Release the cache connection."""
        if self._cache is not None:
            self._cache.close()
            self._cache = None


def attributes_of(mapping: dict[str, str | None]) -> tuple[str, ...]:
    """The mapped attributes in canonical order (the five, then SEVERE_TOXICITY)."""
    used = {v for v in mapping.values() if v is not None}
    return tuple(a for a in ALL_ATTRIBUTES if a in used)


def signature_fields(scorers: dict[str, Any], toxicity_input: str | None) -> tuple[tuple[str, str], ...]:
    """The toxicity scorer's part of a run's signature (sacrebleu's way: each scorer signs for itself): the scorer
    and its fit, weights or version (``tox``), and what it read (``input``: the run's toxicity input, else what the
    scorer block says it read, none for stored values)."""
    from queerbench.base.signature import short_hash, show

    tox = scorers.get(KEY) or scorers.get("perspective") or {}  # QueerGen calls its toxicity "perspective"
    name = str(tox.get("name") or "none")
    version = (  # a fitted scorer names its fit: sources/seed/weights
        tox.get("fit")
        or short_hash(tox.get("weights_sha256"), 8)
        or short_hash(tox.get("revision"), 8)
        or tox.get("version")
    )
    read = tox.get("input")
    shown = toxicity_input or (None if read in (None, "as stored") else read)
    return (("tox", f"{name}@{version}" if version else name), ("input", show(shown)))
