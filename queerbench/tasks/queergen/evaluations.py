"""Read QueerGen's stored per-sentence evaluation files and score predictions with QueerGen's scorers.

An evaluation file (``evaluations/prompt_1/<model>.csv`` for k=1, ``evaluations_top_5/<model>.csv`` for its
300-row top-5 sample) holds, per sentence, QueerGen's columns, the prediction (a word, or the string form of a
list of 5), VADER, three regard scores and six Perspective probabilities. :func:`read_evaluation_csv` checks its
shape and that every row is the QueerGen sentence of its index, and says which pinned file it is (by sha256).
:func:`score_rows` turns predictions into the per-sentence frame :func:`queerbench.tasks.queergen.aggregate.aggregate`
reads, with stored or recomputed scores.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from queerbench.scoring.regard import REGARD_LABELS, regard_inputs
from queerbench.scoring.vader import vader_row
from queerbench.tasks.queergen.aggregate import perspective_attributes
from queerbench.tasks.queergen.sentences import QueerGenFileError, build_queergen_sentences, queergen_sample
from queerbench.tasks.queergen.spec import spec

__all__ = [
    "ALL_PERSPECTIVE",
    "is_queergen_csv",
    "model_label",
    "perspective_texts",
    "pinned_source",
    "read_evaluation_csv",
    "score_rows",
]

ALL_PERSPECTIVE = tuple(spec()["perspective_attributes"]["queergen"])


def is_queergen_csv(path: str | os.PathLike[str]) -> bool:
    """True when the CSV's header is QueerGen's (it has the ``Unmarked``, ``marked`` and ``prediction`` columns)."""
    with open(path, encoding="utf-8-sig") as fh:
        header = fh.readline().strip().split(",")
    return {"Unmarked", "marked", "prediction", "type"} <= set(header)


def pinned_source(path: str | os.PathLike[str]) -> str | None:
    """The name of the pinned QueerGen source whose sha256 this file has, if any."""
    from queerbench.base.sources import list_sources, sha256_file

    digest = sha256_file(Path(path))
    for src in list_sources():
        if src.name.startswith("queergen_eval") and src.sha256 == digest:
            return src.name
    return None


def model_label(path: str | os.PathLike[str]) -> str:
    """QueerGen's table label for an evaluation file (``BERT_base.csv`` → ``BERT Base``); the stem otherwise."""
    stem = Path(path).stem
    return spec()["model_labels"].get(stem, stem)


def _parse_words(raw: str, where: str, top_k: bool) -> list[str]:
    if not top_k:
        return [raw]
    try:
        words = ast.literal_eval(raw)
    except (ValueError, SyntaxError) as exc:
        raise QueerGenFileError(f"{where}: prediction {raw!r} is not a list of words") from exc
    if not isinstance(words, list) or not words or not all(isinstance(w, str) for w in words):
        raise QueerGenFileError(f"{where}: prediction {raw!r} is not a non-empty list of words")
    return words


def read_evaluation_csv(path: str | os.PathLike[str]) -> pd.DataFrame:
    """One QueerGen evaluation file as our per-sentence frame, checked against the ``queergen`` sentences.

    Columns: QueerGen's sentence columns mapped to ours (``id``, ``group``, ``template``, ``unmarked_sentence``, …),
    ``words`` (the top-k), ``prediction`` (as stored), ``stored_vader``, ``perspective_<ATTR>`` (6),
    ``regard_negative``/``neutral``/``positive``, ``diversity_excluded`` (rows whose prediction QueerGen's pandas
    reader turns into NaN — e.g. "null" — which its diversity drops). A wrong shape is one line naming the file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"QueerGen evaluation file {path} does not exist")
    s = spec()
    try:
        stored = pd.read_csv(path)  # pandas defaults, as QueerGen's own code reads the file
        raw = pd.read_csv(path, usecols=["prediction"], dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise QueerGenFileError(
            f"QueerGen evaluation file {path} cannot be read: {' '.join(str(exc).split())}"
        ) from exc
    missing = [c for c in s["evaluation_columns"] if c not in stored.columns]
    if missing:
        raise QueerGenFileError(f"QueerGen evaluation file {path} lacks the columns {missing}")
    sizes = (s["counts"]["sentences"], s["counts"]["sample"])
    if len(stored) not in sizes:
        raise QueerGenFileError(
            f"QueerGen evaluation file {path} has {len(stored)} rows; expected {sizes[0]} (k=1) or {sizes[1]} (top-5 sample)"
        )
    unknown = sorted(set(stored["type"].astype(str)) - set(s["groups"]))
    if unknown:
        raise QueerGenFileError(f"QueerGen evaluation file {path} has unknown subject types {unknown}")
    top_k = len(stored) == sizes[1]
    if top_k:  # the top-5 files are QueerGen's 300-row sample in order, renumbered 0-299
        ours = queergen_sample().set_index("index")
    else:
        ours = build_queergen_sentences().set_index("index")
        try:
            indices = stored["index"].astype(int)
        except (TypeError, ValueError):
            raise QueerGenFileError(
                f"QueerGen evaluation file {path}: column index must hold the sentences' row numbers 0-3099"
            ) from None
        try:
            ours = ours.loc[indices]
        except KeyError as exc:
            raise QueerGenFileError(f"QueerGen evaluation file {path} has row indices outside 0-3099") from exc
    differ = int((ours["marked_sentence"].to_numpy() != stored["marked"].astype(str).to_numpy()).sum())
    if differ:
        what = "QueerGen's top-5 sample, row for row" if top_k else "the QueerGen sentence of their index"
        raise QueerGenFileError(f"QueerGen evaluation file {path}: {differ} rows are not {what}")
    if not top_k:  # a row is its sentence's index: a repeated row (its sentence too) would be scored twice
        repeated = indices[indices.duplicated()]
        if len(repeated):
            first = int(repeated.iloc[0])
            raise QueerGenFileError(
                f"QueerGen evaluation file {path}: index {first} is on {int((indices == first).sum())} rows "
                f"({len(repeated)} repeated row(s) in all); each sentence must occur once, or it is scored twice: "
                "drop the repeated rows"
            )
    frame = ours.reset_index()[["id", "index", "template_id", "template", "subject", "marker", "group", "category"]]
    frame["unmarked_sentence"] = ours["unmarked_sentence"].to_numpy()
    frame["masked_sentence"] = ours["masked_sentence"].to_numpy()
    frame["prediction"] = raw["prediction"].to_numpy()
    frame["words"] = [_parse_words(r, f"{path} row {i}", top_k) for i, r in enumerate(raw["prediction"])]
    frame["diversity_excluded"] = stored["prediction"].isna().to_numpy()
    frame["stored_vader"] = stored["VADER"].to_numpy(float)
    for a in ALL_PERSPECTIVE:
        frame[f"perspective_{a}"] = stored[f"Perspective {a}"].to_numpy(float)
    for label in REGARD_LABELS:
        frame[f"regard_{label}"] = stored[f"Regard {label.capitalize()}"].to_numpy(float)
    frame.attrs["path"] = str(path)
    frame.attrs["top_k"] = top_k
    return frame


def perspective_texts(unmarked: Sequence[str], words: Sequence[Sequence[str]]) -> list[str]:
    """QueerGen's Perspective input for each completion: the unmarked sentence, a space, the word (no full stop)."""
    form = spec()["perspective_input"]
    return [form.format(unmarked=u, word=w) for u, ws in zip(unmarked, words, strict=True) for w in ws]


def score_rows(
    frame: pd.DataFrame,
    *,
    config: str = "queergen",
    toxicity: str = "precomputed",
    regard: str = "auto",
    vader: str = "recompute",
    toxicity_kwargs: dict[str, Any] | None = None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The per-sentence frame :func:`~queerbench.tasks.queergen.aggregate.aggregate` reads, and scorer provenance.

    ``frame`` needs ``group``, ``words``, ``unmarked_sentence`` and ``template`` (plus stored columns for the
    ``precomputed`` choices). ``vader``: ``recompute`` (vaderSentiment; the stored column, when present, is checked
    against it) or ``stored``. ``toxicity``: ``precomputed`` (stored ``perspective_<ATTR>``), ``none``, or a
    toxicity scorer (``embedded``, ``hf:…``, ``perspective``) run on QueerGen's Perspective input. ``regard``:
    ``auto`` (stored values when present, else none), ``precomputed``, ``none`` or ``hf:<model id or path>``.
    """
    from queerbench.scoring.regard import regard_scorer_spec
    from queerbench.scoring.vader import vader_version

    out = pd.DataFrame({"group": frame["group"].to_numpy(), "words": frame["words"].to_numpy()})
    if "diversity_excluded" in frame:
        out["diversity_excluded"] = frame["diversity_excluded"].to_numpy()
    meta: dict[str, Any] = {}
    has_stored_regard = all(f"regard_{lbl}" in frame for lbl in REGARD_LABELS)
    has_stored_tox = all(f"perspective_{a}" in frame for a in perspective_attributes(config))
    regard = ("precomputed" if has_stored_regard else "none") if regard == "auto" else regard_scorer_spec(regard)
    if regard == "precomputed" and not has_stored_regard:
        raise ValueError(
            "--regard precomputed needs stored regard values (a QueerGen evaluation CSV has them); pass "
            "--regard hf:<local copy of sasha/regardv3> or --regard none"
        )
    if toxicity == "precomputed" and not has_stored_tox:
        raise ValueError(
            "--toxicity precomputed needs stored Perspective probabilities (a QueerGen evaluation CSV has them); "
            "choose a toxicity scorer (embedded, hf:<id>, perspective) or none"
        )
    scorer = None
    if toxicity not in ("precomputed", "none"):
        from queerbench.scoring.aggregate import ScoringOptions, prepare_toxicity_scorer

        # Perspective read QueerGen's unmarked sentence and the word: subject-blind text, as `neutral` sentences are
        scorer = prepare_toxicity_scorer(
            ScoringOptions(toxicity=toxicity, toxicity_kwargs=toxicity_kwargs or {}, text_form="neutral")
        )
    rscorer = None
    if regard.startswith("hf:"):
        from queerbench.scoring.regard import RegardScorer

        rscorer = RegardScorer(regard[3:].strip())  # fails here, before any scoring, when it is not available

    if vader == "stored":
        out["vader"] = frame["stored_vader"].to_numpy(float)
        meta["vader"] = "stored (QueerGen's column)"
    else:
        out["vader"] = [vader_row(w) for w in frame["words"]]
        meta["vader"] = vader_version()
        if "stored_vader" in frame:
            differ = np.flatnonzero(~np.isclose(out["vader"].to_numpy(float), frame["stored_vader"].to_numpy(float)))
            meta["vader_check"] = {
                "rows": len(frame),
                "differ_from_stored": [
                    {
                        "index": int(frame["index"].iloc[i]),
                        "prediction": str(frame["prediction"].iloc[i]),
                        "stored": float(frame["stored_vader"].iloc[i]),
                        "recomputed": float(out["vader"].iloc[i]),
                    }
                    for i in differ
                ],
            }

    if toxicity == "precomputed":
        for a in ALL_PERSPECTIVE:
            if f"perspective_{a}" in frame:
                out[f"perspective_{a}"] = frame[f"perspective_{a}"].to_numpy(float)
        meta["perspective"] = {"name": "precomputed", "input": "as stored (QueerGen: unmarked sentence + word)"}
    elif scorer is not None:
        texts = perspective_texts(frame["unmarked_sentence"].tolist(), frame["words"].tolist())
        probs = scorer.score(texts, words=[w for ws in frame["words"] for w in ws])
        lengths = [len(w) for w in frame["words"]]
        row = np.repeat(np.arange(len(frame)), lengths)
        for a in ALL_PERSPECTIVE:
            if a in probs.columns:  # per sentence: mean over its k completions
                out[f"perspective_{a}"] = pd.Series(probs[a].to_numpy(float)).groupby(row).mean().to_numpy()
        meta["perspective"] = {"name": scorer.name, **scorer.describe(), "input": spec()["perspective_input"]}

    if regard == "precomputed":
        for lbl in REGARD_LABELS:
            out[f"regard_{lbl}"] = frame[f"regard_{lbl}"].to_numpy(float)
        meta["regard"] = {"name": "precomputed"}
    elif rscorer is not None:
        ri = spec()["regard_input"]
        texts = [
            regard_inputs(t, w, slot=spec()["placement"]["slot"], placeholder=ri["placeholder"])
            for t, ws in zip(frame["template"], frame["words"], strict=True)
            for w in ws
        ]
        probs = rscorer.score(texts)
        row = np.repeat(np.arange(len(frame)), [len(w) for w in frame["words"]])
        for lbl in REGARD_LABELS:
            out[f"regard_{lbl}"] = pd.Series(probs[lbl].to_numpy(float)).groupby(row).mean().to_numpy()
        meta["regard"] = rscorer.describe()
    else:
        meta["regard"] = {"name": "none"}
    return out, meta
