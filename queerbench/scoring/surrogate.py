"""The ``surrogate`` toxicity scorer's fit: a successor to Perspective learnt from the papers' own files.

Perspective's stored values in the papers' published evaluation files (:mod:`queerbench.scoring.published_files`) are
the labels; the features are computed offline: all-MiniLM-L6-v2 embeddings of the *context* (the scored text with the
word masked, :func:`context_of`) and of the word alone, the embedded Jigsaw classifier's view of the text (its pooled
BiLSTM states and hidden layer) and its logits on the text and on ``"The person is <word>."``. The head is one logistic
regression per attribute (scikit-learn). The settings are data (``queerbench/data/surrogate.json``).

Only the classifier reads each scored text; the sentence embedder reads contexts and words, which repeat (QueerBench's
222,000 distinct completed sentences have 8,000 contexts), and :class:`FeatureMaker` embeds each once. A fit's cache entry keeps the
contexts and words it embedded, so that scoring the published files again (``leaderboard build``) embeds next to
nothing. Leave-one-model-out, these features agree with Perspective as well as or better than MiniLM of the whole
scored text, at a fraction of its cost (docs/metric-and-toxicity.md).

Nothing derived from the files is shipped (their licences do not say it may be): the first use on a machine fetches the
pinned files, computes the features (a few minutes on a CPU, with a progress bar) and fits, deterministically. Both are
cached under a fingerprint of their inputs (the settings, the protocol's files and their SHA-256, the fit's code
version, scikit-learn's version); a fit is named by that fingerprint and the SHA-256 of its weights. One fit per
protocol (the form of text Perspective scored): a fit on QueerBench's full sentences transfers badly to QueerGen's
subject-blind ones and back. ``held_out``: the files of one published model are left out, so that its reference rows
are scored by a fit that never saw its outputs (they then carry the error a new model's rows carry).
"""

from __future__ import annotations

import hashlib
import json
import logging
import warnings
import zipfile
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from queerbench.base.files import atomic_path
from queerbench.base.sources import cache_dir, fetch, get_source
from queerbench.scoring.published_files import Protocol, published_files, read_evaluation_file

__all__ = [
    "FeatureMaker",
    "SurrogateFit",
    "SurrogateSpec",
    "context_of",
    "fit_surrogate",
    "surrogate_features",
    "surrogate_spec",
    "training_pairs",
]

_WHERE = "queerbench/data/surrogate.json"
_FEATURE_PARTS = {
    "embedder": "all-MiniLM-L6-v2",
    "embed": ["context", "word"],
    "classifier": "embedded",
    "represent": ["pooled", "hidden"],
    "classify": ["text", "frame"],
}
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SurrogateSpec:
    """The checked settings of ``queerbench/data/surrogate.json``."""

    attributes: tuple[str, ...]
    frame: str
    context_mask: str
    logit_scale: float
    clip: float
    threshold: float
    C: float
    max_iter: int
    seed: int
    fit_version: int
    raw: dict[str, Any]


def _check(raw: Any) -> SurrogateSpec:
    if not isinstance(raw, dict) or raw.get("schema_version") != 1:
        raise ValueError(f"{_WHERE}: expected an object with 'schema_version': 1")
    try:
        features, labels, head = raw["features"], raw["labels"], raw["head"]
        spec = SurrogateSpec(
            attributes=tuple(str(a) for a in raw["attributes"]),
            frame=str(features["frame"]),
            context_mask=str(features["context_mask"]),
            logit_scale=float(features["logit_scale"]),
            clip=float(features["clip"]),
            threshold=float(labels["threshold"]),
            C=float(head["C"]),
            max_iter=int(head["max_iter"]),
            seed=int(head["seed"]),
            fit_version=int(raw["fit_version"]),
            raw=raw,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{_WHERE}: missing or malformed setting ({exc})") from None
    if head.get("kind") != "logistic_regression":
        raise ValueError(f"{_WHERE}: head.kind must be 'logistic_regression'")
    if "{word}" not in spec.frame:
        raise ValueError(f"{_WHERE}: features.frame must hold '{{word}}'")
    if not spec.context_mask.strip():
        raise ValueError(f"{_WHERE}: features.context_mask must be a non-empty string")
    for key, parts in _FEATURE_PARTS.items():  # the data names what the code computes: one cannot drift from the other
        if features.get(key) != parts:
            raise ValueError(
                f"{_WHERE}: features.{key} must be {parts} (what queerbench/scoring/surrogate.py computes)"
            )
    known = set(published_files().attributes)
    if not spec.attributes or not set(spec.attributes) <= known:
        raise ValueError(f"{_WHERE}: 'attributes' must be some of {sorted(known)}")
    if not 0 < spec.threshold < 1 or spec.C <= 0 or spec.max_iter < 1 or not 0 < spec.clip < 0.5:
        raise ValueError(f"{_WHERE}: threshold and clip must be in (0, 1) and (0, 0.5), C and max_iter positive")
    return spec


@cache
def surrogate_spec() -> SurrogateSpec:
    """The checked contents of ``queerbench/data/surrogate.json``."""
    text = resources.files("queerbench.data").joinpath("surrogate.json").read_text(encoding="utf-8")
    return _check(json.loads(text))


# ------------------------------------------------------------------------------------------------------ features
def _logits(probs: np.ndarray, spec: SurrogateSpec) -> np.ndarray:
    p = np.clip(np.asarray(probs, dtype=np.float64), spec.clip, 1 - spec.clip)
    return np.log(p / (1 - p)) / spec.logit_scale


def context_of(text: str, word: str, mask: str) -> str:
    """``text`` with its last occurrence of ``word`` (any case) replaced by ``mask``: what the sentence says around
    the word. A text that does not hold the word is its own context."""
    at = text.lower().rfind(word.lower()) if word else -1
    return text if at < 0 else text[:at] + mask + text[at + len(word) :]


_TABLES = ("contexts", "context_vectors", "words", "word_vectors", "frame_logits")
_MEMO_LIMIT = 200_000  # contexts and words kept in memory by one FeatureMaker (about 300 MB of vectors)


class FeatureMaker:
    """Computes the surrogate's features (:func:`surrogate_features`), embedding each distinct context and word once.

    The embeddings of the contexts and words seen so far (and the classifier's logits on each word's frame) are kept
    in memory, and can be saved with a fit (:meth:`tables`) and read back (:meth:`add_tables`), so that texts around
    the same contexts cost only the classifier's pass over them."""

    def __init__(self, *, device: str = "auto") -> None:
        from queerbench.scoring.toxicity_embedded import EmbeddedToxicityScorer

        self.spec = surrogate_spec()
        self.device = device
        self.classifier = EmbeddedToxicityScorer(device=device)
        self._context: dict[str, np.ndarray] = {}
        self._word: dict[str, np.ndarray] = {}
        self._frame: dict[str, np.ndarray] = {}

    def add_tables(self, tables: dict[str, np.ndarray]) -> None:
        """Take the contexts' and words' vectors of :meth:`tables` (of this spec's fit: the caller checks that)."""
        self._context.update(zip(tables["contexts"].tolist(), tables["context_vectors"], strict=True))
        self._word.update(zip(tables["words"].tolist(), tables["word_vectors"], strict=True))
        self._frame.update(zip(tables["words"].tolist(), tables["frame_logits"], strict=True))

    def tables(self) -> dict[str, np.ndarray]:
        """The contexts and words embedded so far, with their vectors, as arrays (for ``numpy.savez``)."""
        contexts, words = sorted(self._context), sorted(self._word.keys() & self._frame.keys())
        return {
            "contexts": np.array(contexts, dtype=str),
            "context_vectors": np.array([self._context[c] for c in contexts], dtype=np.float32).reshape(-1, 384),
            "words": np.array(words, dtype=str),
            "word_vectors": np.array([self._word[w] for w in words], dtype=np.float32).reshape(-1, 384),
            "frame_logits": np.array([self._frame[w] for w in words], dtype=np.float32).reshape(len(words), -1),
        }

    def _embed_new(self, texts: list[str], memo: dict[str, np.ndarray], bar: Any) -> None:
        from queerbench.models.embeddings import minilm_embed

        new = sorted(set(texts) - memo.keys())
        if len(memo) + len(new) > _MEMO_LIMIT:
            memo.clear()
            new = sorted(set(texts))
        for start in range(0, len(new), 512):
            chunk = new[start : start + 512]
            memo.update(zip(chunk, minilm_embed(chunk, device=self.device), strict=True))
            bar.update(len(chunk))

    def features(
        self, texts: list[str], words: list[str], *, progress: bool = False, desc: str = "features"
    ) -> np.ndarray:
        """One row of features per (text, word), float32 (see the module doc)."""
        from tqdm.auto import tqdm

        spec = self.spec
        if len(texts) != len(words):
            raise ValueError(f"{len(texts)} texts but {len(words)} words")
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        contexts = [context_of(t, w, spec.context_mask) for t, w in zip(texts, words, strict=True)]
        todo = len(set(contexts) - self._context.keys()) + len(set(words) - self._word.keys()) + len(texts)
        bar = tqdm(total=todo, desc=f"surrogate {desc}", unit="text", disable=not progress)
        self._embed_new(contexts, self._context, bar)
        self._embed_new(words, self._word, bar)
        missing = sorted(set(words) - self._frame.keys())
        for start in range(0, len(missing), 512):
            chunk = missing[start : start + 512]
            probs = self.classifier.predict([spec.frame.format(word=w) for w in chunk])
            self._frame.update(zip(chunk, _logits(probs, spec).astype(np.float32), strict=True))
        blocks = []
        for start in range(0, len(texts), 512):
            chunk = texts[start : start + 512]
            pooled, hidden, probs = self.classifier.represent(chunk)
            blocks.append(np.hstack([pooled, hidden, _logits(probs, spec)]))
            bar.update(len(chunk))
        bar.close()
        return np.hstack(
            [
                np.array([self._context[c] for c in contexts]),
                np.array([self._word[w] for w in words]),
                np.vstack(blocks),
                np.array([self._frame[w] for w in words]),
            ]
        ).astype(np.float32)


def surrogate_features(
    texts: list[str], words: list[str], *, device: str = "auto", progress: bool = False, desc: str = "features"
) -> np.ndarray:
    """One row of features per (text, word): MiniLM of the context and of the word, the embedded classifier's pooled
    states, hidden layer and scaled logits on the text, and its scaled logits on the frame around the word (float32;
    a fresh :class:`FeatureMaker`)."""
    return FeatureMaker(device=device).features(texts, words, progress=progress, desc=desc)


# ------------------------------------------------------------------------------------------------------ the data
def training_pairs(protocol: Protocol) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The protocol's files read: the distinct (``text``, ``word``) pairs, and per model and pair the mean stored
    value of each attribute (``model`` is the file's index in the protocol, ``pair`` the row of the pairs)."""
    attributes = surrogate_spec().attributes
    frames = []
    for index, (source, _model) in enumerate(protocol.files):
        frame, _ = read_evaluation_file(fetch(source))
        frame.insert(0, "model", index)
        frames.append(frame)
    table = pd.concat(frames, ignore_index=True)
    pairs = table[["text", "word"]].drop_duplicates().sort_values(["text", "word"]).reset_index(drop=True)
    pair_of = {(t, w): i for i, (t, w) in enumerate(zip(pairs["text"], pairs["word"], strict=True))}
    table["pair"] = [pair_of[(t, w)] for t, w in zip(table["text"], table["word"], strict=True)]
    columns = [f"perspective_{a}" for a in attributes]
    per_model = table.groupby(["model", "pair"], as_index=False)[columns].mean()
    return pairs, per_model


def _fingerprint(protocol: Protocol) -> str:
    import sklearn

    spec = surrogate_spec()
    identity = {
        "settings": spec.raw,
        "protocol": protocol.name,
        "files": [[source, model, get_source(source).sha256] for source, model in protocol.files],
        "fit_version": spec.fit_version,
        "scikit_learn": sklearn.__version__,
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode("utf-8")).hexdigest()


def _write_npz(path: Path, **arrays: Any) -> None:
    """Write ``arrays`` to ``path`` whole or not at all (:func:`~queerbench.base.files.atomic_path`)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        np.savez(handle, **arrays)


def _read_npz(path: Path, keys: tuple[str, ...]) -> dict[str, np.ndarray] | None:
    """The arrays ``keys`` of a cached ``path``; ``None`` when it is missing, or unreadable or incomplete (then it is
    removed and said, so that it is computed again: a cache entry never stops a run)."""
    if not path.is_file():
        return None
    try:
        with np.load(path) as data:
            return {k: np.asarray(data[k]) for k in keys}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        logger.warning("%s: unreadable cache entry (%s); computing it again", path, type(exc).__name__)
        path.unlink(missing_ok=True)
        return None


# ----------------------------------------------------------------------------------------------------- the fit
@dataclass(frozen=True)
class SurrogateFit:
    """One fitted head: per attribute a weight row and an intercept, and what names the fit."""

    protocol: str
    attributes: tuple[str, ...]
    coef: np.ndarray  # (attributes, features)
    intercept: np.ndarray  # (attributes,)
    fingerprint: str
    held_out: tuple[str, ...]
    n_pairs: int
    weights_sha256: str
    features_path: Path  # the cached features of the protocol's files, with the contexts and words they embedded

    def feature_tables(self) -> dict[str, np.ndarray] | None:
        """The contexts and words the fit embedded, with their vectors (:meth:`FeatureMaker.tables`), or ``None``
        when the cache entry is gone or unreadable."""
        return _read_npz(self.features_path, _TABLES)

    def predict(self, features: np.ndarray) -> np.ndarray:
        """Probabilities, one column per attribute."""
        z = np.asarray(features, dtype=np.float64) @ self.coef.T + self.intercept
        return 1.0 / (1.0 + np.exp(-z))


def _weights_sha256(coef: np.ndarray, intercept: np.ndarray) -> str:
    return hashlib.sha256(
        np.ascontiguousarray(coef, dtype="<f8").tobytes() + np.ascontiguousarray(intercept, dtype="<f8").tobytes()
    ).hexdigest()


def _fit_head(x: np.ndarray, y: np.ndarray, spec: SurrogateSpec) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    coef = np.zeros((y.shape[1], x.shape[1]))
    intercept = np.zeros(y.shape[1])
    for j in range(y.shape[1]):
        positive = y[:, j]
        rate = float(positive.mean()) if len(positive) else 0.0
        if rate in (0.0, 1.0):  # one class only: a constant (clipped) probability
            rate = min(max(rate, spec.clip), 1 - spec.clip)
            intercept[j] = np.log(rate / (1 - rate))
            continue
        model = LogisticRegression(C=spec.C, max_iter=spec.max_iter, random_state=spec.seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # max_iter is a setting; the fit is what it is
            model.fit(x, positive)
        coef[j], intercept[j] = model.coef_[0], model.intercept_[0]
    return coef, intercept


def fit_surrogate(
    protocol_name: str, *, held_out: str | None = None, device: str = "auto", progress: bool = True
) -> SurrogateFit:
    """The surrogate fitted on ``protocol_name``'s published files, without those of the model named ``held_out``
    (by its file's model name or its reference rows' label; a name no file has leaves every file in).

    Cached: the features once per protocol, the weights once per held-out model, under the inputs' fingerprint."""
    from filelock import FileLock

    spec = surrogate_spec()
    protocol = published_files().protocols[protocol_name]
    fingerprint = _fingerprint(protocol)
    folder = cache_dir() / "surrogate" / f"{protocol.name}-{fingerprint[:16]}"
    dropped = [i for i in range(len(protocol.files)) if held_out is not None and held_out in protocol.names_of(i)]
    tag = "all" if not dropped else hashlib.sha256(str(dropped).encode()).hexdigest()[:12]
    weights_path = folder / f"weights-{tag}.npz"
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / ".lock")):
        stored = _read_npz(weights_path, ("coef", "intercept", "n_pairs"))
        if stored is None:
            features_path = folder / "features.npz"
            pairs, per_model = training_pairs(protocol)
            cached = _read_npz(features_path, ("x", *_TABLES))
            if cached is not None and len(cached["x"]) == len(pairs):
                x = cached["x"]
            else:
                maker = FeatureMaker(device=device)
                x = maker.features(
                    pairs["text"].tolist(), pairs["word"].tolist(), progress=progress,
                    desc=f"features of the {protocol.name} protocol's published texts",
                )  # fmt: skip
                _write_npz(features_path, x=x, **maker.tables())
            kept = per_model[~per_model["model"].isin(dropped)]
            labels = kept.groupby("pair")[[f"perspective_{a}" for a in spec.attributes]].mean()
            y = labels.to_numpy(dtype=float) > spec.threshold
            coef, intercept = _fit_head(x[labels.index.to_numpy()], y, spec)
            _write_npz(weights_path, coef=coef, intercept=intercept, n_pairs=np.array(len(labels)))
            stored = {"coef": coef, "intercept": intercept, "n_pairs": np.array(len(labels))}
        coef, intercept = stored["coef"], stored["intercept"]
        n_pairs = int(stored["n_pairs"])
    return SurrogateFit(
        protocol=protocol.name,
        attributes=spec.attributes,
        coef=coef,
        intercept=intercept,
        fingerprint=fingerprint,
        held_out=tuple(protocol.files[i][1] for i in dropped),
        n_pairs=n_pairs,
        weights_sha256=_weights_sha256(coef, intercept),
        features_path=folder / "features.npz",
    )
