"""Toxicity scorers for the QueerBench ``P`` component: one interface, a registry, a disk cache, the hf scorer.

The paper scored completed sentences with Google's Perspective API. That API is sunset after 2026 and cannot be
reached offline, so three interchangeable scorers implement :class:`ToxicityScorer`:

- ``embedded`` (default; :mod:`queerbench.scoring.toxicity_embedded`): the Jigsaw BiLSTM shipped in the PyPI wheel
  ``toxic-comment-classifier`` 0.3.0, run in torch; fully offline.
- ``hf:<model id or path>`` (:class:`HFToxicityScorer`, here): any transformers multi-label sequence classifier.
- ``perspective`` (:mod:`queerbench.scoring.perspective`): the REST API, rate-limited and retried.

Every scorer returns probabilities under Perspective's attribute names (:data:`ATTRIBUTES`, plus
``SEVERE_TOXICITY`` where the model has it). The label → attribute maps are data (``lexicons/toxicity_labels.json``).
Scores are deduplicated and cached on disk per scorer identity (a sqlite file whose name hashes :meth:`describe`),
so a rerun recomputes nothing and an interrupted run keeps what it finished.
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

from queerbench.fingerprint import looks_like_path
from queerbench.sources import cache_dir as user_cache_dir

__all__ = [
    "ATTRIBUTES",
    "SCORER_CHOICES",
    "SEVERE",
    "HFToxicityScorer",
    "ScoreCache",
    "ToxicityScorer",
    "get_toxicity_scorer",
    "label_maps",
    "resolve_device",
]

logger = logging.getLogger(__name__)

ATTRIBUTES: tuple[str, ...] = ("TOXICITY", "IDENTITY_ATTACK", "INSULT", "PROFANITY", "THREAT")
"""The five attributes of the paper, in the order of ``toxicity_counts``."""
SEVERE = "SEVERE_TOXICITY"
ALL_ATTRIBUTES: tuple[str, ...] = (*ATTRIBUTES, SEVERE)
SCORER_CHOICES: tuple[str, ...] = ("embedded", "hf:<model id or path>", "perspective")
_LEAD_HANDLED = ("precomputed", "none")


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
class ToxicityScorer(abc.ABC):
    """Scores texts for Perspective-style attributes; subclasses implement :meth:`_score_batches`.

    :meth:`score` handles what every scorer needs: input checks, deduplication, the disk cache, and a frame with
    one row per input text in input order.
    """

    name: str
    attributes: tuple[str, ...]

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

    def score(self, texts: Sequence[str], *, progress: bool = False) -> pd.DataFrame:
        """Probabilities in [0, 1]: one row per text (input order, duplicates kept), columns :attr:`attributes`."""
        if isinstance(texts, str):
            raise TypeError("score() takes a sequence of texts, not a single string; wrap it in a list")
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"text #{i} is {type(text).__name__}, not str; pass strings only")
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


def _attributes_of(mapping: dict[str, str | None]) -> tuple[str, ...]:
    """The mapped attributes in canonical order (the five, then SEVERE_TOXICITY)."""
    used = {v for v in mapping.values() if v is not None}
    return tuple(a for a in ALL_ATTRIBUTES if a in used)


def resolve_device(device: str = "auto") -> str:
    """``auto`` → cuda, else mps, else cpu; a named device is checked (:func:`queerbench.predict.resolve_device`)."""
    from queerbench.predict import resolve_device as _resolve

    return str(_resolve(device))


# ------------------------------------------------------------------------------------------------ hf scorer
class HFToxicityScorer(ToxicityScorer):
    """Any transformers multi-label sequence classifier (sigmoid over the logits), e.g. ``unitary/toxic-bert``.

    The label → attribute map is, in order of preference: ``label_map`` given by the caller (every key must be one
    of the model's labels), or the known map (``toxicity_labels.json``) that covers most of the model's labels.
    Labels without an attribute are ignored; a model none of whose labels maps to an attribute is an error.
    Remote code is never trusted.
    """

    def __init__(
        self,
        model: str,
        *,
        label_map: dict[str, str | None] | None = None,
        device: str = "auto",
        batch_size: int = 32,
        max_length: int = 512,
        cache_dir: str | Path | None = None,
    ) -> None:
        super().__init__(cache_dir=cache_dir)
        from transformers import AutoConfig

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model_ref = str(model)
        self.name = f"hf:{self.model_ref}"
        if looks_like_path(self.model_ref) and not Path(self.model_ref).expanduser().is_dir():
            raise ValueError(
                f"toxicity model {self.model_ref!r}: no such folder; pass --toxicity hf:<folder saved with "
                "save_pretrained> or hf:<Hub id> (e.g. hf:unitary/toxic-bert)"
            )
        try:
            config = AutoConfig.from_pretrained(self.model_ref, trust_remote_code=False)
        except (OSError, ValueError) as exc:
            raise ValueError(
                f"cannot load the config of toxicity model {self.model_ref!r}: {exc}. Pass a local folder with "
                "config.json, or a Hub id that is in your cache (Hub downloads need network access)."
            ) from exc
        labels = [str(config.id2label[i]) for i in range(config.num_labels)]
        self.labels = labels
        self.label_map, self.map_source = self._choose_map(labels, label_map)
        self.attributes = _attributes_of(self.label_map)
        self._columns = {a: labels.index(lbl) for lbl, a in self.label_map.items() if a is not None}
        self.device_request = device
        self.batch_size = batch_size
        self.max_length = max_length
        self._revision = getattr(config, "_commit_hash", None)
        self._weights_sha = self._local_weights_sha256()
        self._model: Any = None
        self._tokenizer: Any = None

    def _choose_map(
        self, labels: list[str], user_map: dict[str, str | None] | None
    ) -> tuple[dict[str, str | None], str]:
        if user_map is not None:
            mapping = _check_label_map(user_map, "label_map")
            unknown = sorted(set(mapping) - set(labels))
            if unknown:
                raise ValueError(
                    f"label_map names label(s) {unknown} that model {self.model_ref!r} lacks; its labels: {labels}"
                )
            chosen, source = mapping, "user"
        else:
            best, source, best_hits = {}, "none", 0
            for name, entry in label_maps().items():
                if name == "embedded":
                    continue
                hits = sum(1 for lbl in labels if entry["map"].get(lbl) is not None)
                if hits > best_hits:
                    best, source, best_hits = entry["map"], name, hits
            chosen = {lbl: best[lbl] for lbl in labels if lbl in best}
        if not any(v is not None for v in chosen.values()):
            raise ValueError(
                f"toxicity model {self.model_ref!r} has labels {labels}, none of which maps to an attribute "
                f"{list(ALL_ATTRIBUTES)}. Pass label_map={{'<label>': '<ATTRIBUTE>' or None, ...}}, or choose a "
                "multi-label toxicity classifier such as unitary/toxic-bert."
            )
        ignored = [lbl for lbl in labels if chosen.get(lbl) is None]
        if ignored:
            logger.info("%s: ignoring labels without an attribute: %s", self.name, ignored)
        return {lbl: chosen[lbl] for lbl in labels if lbl in chosen}, source

    def _local_weights_sha256(self) -> dict[str, str] | None:
        folder = Path(self.model_ref)
        if not folder.is_dir():
            return None
        from queerbench.sources import sha256_file

        files = sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin") and p.is_file())
        return {p.name: sha256_file(p) for p in files}

    def describe(self) -> dict[str, Any]:
        """Model reference, Hub revision or local weight hashes, labels and the attribute map."""
        return {
            "scorer": "hf",
            "name": self.name,
            "model": self.model_ref,
            "revision": self._revision,
            "weights_sha256": self._weights_sha,
            "labels": self.labels,
            "label_map": self.label_map,
            "label_map_source": self.map_source,
            "attributes": list(self.attributes),
            "max_length": self.max_length,
        }

    def _load(self) -> None:
        if self._model is not None:
            return
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self._device = resolve_device(self.device_request)
        self._tokenizer = AutoTokenizer.from_pretrained(self.model_ref, trust_remote_code=False)
        model = AutoModelForSequenceClassification.from_pretrained(self.model_ref, trust_remote_code=False)
        self._model = model.to(self._device).eval()

    def _score_batches(
        self, texts: list[str], indices: list[int], *, progress: bool
    ) -> Iterator[list[dict[str, float]]]:
        import torch
        from tqdm.auto import tqdm

        self._load()
        limit = min(self.max_length, getattr(self._tokenizer, "model_max_length", self.max_length) or self.max_length)
        bar = tqdm(total=len(texts), desc=self.name, unit="text", disable=not progress)
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            enc = self._tokenizer(batch, padding=True, truncation=True, max_length=limit, return_tensors="pt")
            with torch.no_grad():
                logits = self._model(**{k: v.to(self._device) for k, v in enc.items()}).logits
            probs = torch.sigmoid(logits.float()).cpu().numpy()
            yield [{a: float(row[j]) for a, j in self._columns.items()} for row in probs]
            bar.update(len(batch))
        bar.close()


# ------------------------------------------------------------------------------------------------ registry
def get_toxicity_scorer(spec: str, *, cache_dir: str | Path | None = None, **kwargs: Any) -> ToxicityScorer:
    """Build the scorer named by ``spec``: ``embedded`` | ``hf:<model id or path>`` | ``perspective``.

    ``kwargs`` go to the scorer's constructor (e.g. ``label_map``/``device``/``batch_size`` for hf, ``qps``/
    ``max_retries`` for perspective). ``precomputed`` and ``none`` are not scorers: the metric's aggregation handles
    them, so they raise ``ValueError`` here, as does any unknown spec.
    """
    if not isinstance(spec, str):
        raise TypeError(f"toxicity scorer spec must be a string, got {type(spec).__name__}")
    if spec in _LEAD_HANDLED:
        raise ValueError(
            f"toxicity={spec!r} is not a scorer: it is handled by the metric's aggregation (pass toxicity_counts for "
            f"'precomputed'; 'none' skips toxicity). Scorer choices: {', '.join(SCORER_CHOICES)}"
        )
    if spec == "embedded":
        from queerbench.scoring.toxicity_embedded import EmbeddedToxicityScorer

        return EmbeddedToxicityScorer(cache_dir=cache_dir, **kwargs)
    if spec == "perspective":
        from queerbench.scoring.perspective import PerspectiveScorer

        return PerspectiveScorer(cache_dir=cache_dir, **kwargs)
    if spec.startswith("hf:") and spec[3:].strip():
        return HFToxicityScorer(spec[3:].strip(), cache_dir=cache_dir, **kwargs)
    raise ValueError(f"unknown toxicity scorer {spec!r}; choose one of: {', '.join(SCORER_CHOICES)}")
