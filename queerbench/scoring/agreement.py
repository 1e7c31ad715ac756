"""How well an offline toxicity scorer agrees with the Perspective values stored in the papers' own files.

Perspective stops answering after 2026; what the papers published with it stays in their per-sentence evaluation
files. :func:`toxicity_agreement` reads each file by its own protocol (:mod:`queerbench.scoring.published_files`: the
text Perspective scored there), scores each distinct text once with the chosen scorer and compares, per attribute,
the flags at > 0.5 (Cohen's κ, precision, recall, the positives on each side) and the ranking (ROC AUC of the scorer's
probability against Perspective's flag), per file and pooled over all files (and per protocol).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from queerbench import __version__
from queerbench.scoring.published_files import protocol_of_reader, published_files, read_evaluation_file

__all__ = ["THRESHOLD", "agreement_stats", "distinct_texts", "toxicity_agreement"]

THRESHOLD = 0.5
"""Perspective's flag: a probability above it (the papers' rule, ``> 0.5``)."""


def agreement_stats(truth: np.ndarray, probability: np.ndarray, threshold: float = THRESHOLD) -> dict[str, Any]:
    """Agreement of ``probability`` (the scorer's) with ``truth`` (Perspective's stored values), both per text.

    Flags are ``> threshold`` on both sides. ``kappa`` is Cohen's κ of the two flags; ``auc`` the probability that a
    text Perspective flagged gets a higher score than one it did not (ties count half); ``precision`` and ``recall`` of
    the scorer's flags against Perspective's. A figure that cannot be computed (no flag on either side, one class only)
    is ``None``.
    """
    truth_flag = np.asarray(truth, dtype=float) > threshold
    prob = np.asarray(probability, dtype=float)
    pred_flag = prob > threshold
    n = int(truth_flag.size)
    tp = int((truth_flag & pred_flag).sum())
    positives, predicted = int(truth_flag.sum()), int(pred_flag.sum())
    observed = float((truth_flag == pred_flag).mean()) if n else float("nan")
    p_truth, p_pred = (positives / n, predicted / n) if n else (0.0, 0.0)
    expected = p_truth * p_pred + (1 - p_truth) * (1 - p_pred)
    kappa = None if not n or expected >= 1 else (observed - expected) / (1 - expected)
    auc = None
    if 0 < positives < n:
        ranks = rankdata(prob)
        auc = float((ranks[truth_flag].sum() - positives * (positives + 1) / 2) / (positives * (n - positives)))
    return {
        "kappa": None if kappa is None else float(kappa),
        "auc": auc,
        "precision": tp / predicted if predicted else None,
        "recall": tp / positives if positives else None,
        "positives": positives,
        "scorer_positives": predicted,
        "n": n,
    }


def distinct_texts(path: str | Path) -> tuple[pd.DataFrame, str]:
    """One file's distinct scored texts (``text``, ``word``, ``perspective_<ATTR>`` as the mean of its rows: the same
    text scored for several markers differs by at most 0.0025) and the protocol it was read by."""
    rows, reader = read_evaluation_file(path)
    columns = [c for c in rows.columns if c.startswith("perspective_")]
    grouped = rows.groupby("text", sort=False).agg({"word": "first", **{c: "mean" for c in columns}})
    return grouped.reset_index(), protocol_of_reader(reader)


def _stats_block(frame: pd.DataFrame, attributes: Sequence[str], scored: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for attr in attributes:
        if attr not in scored:
            out[attr] = {"n": len(frame), "note": "the scorer has no such attribute"}
            continue
        out[attr] = agreement_stats(frame[f"perspective_{attr}"].to_numpy(), frame[f"scorer_{attr}"].to_numpy())
    return out


def toxicity_agreement(
    paths: Sequence[str | Path], scorer: Any, *, progress: bool = False
) -> tuple[dict[str, Any], pd.DataFrame]:
    """Score every distinct text of ``paths`` with ``scorer`` (a :class:`~queerbench.scoring.toxicity_base.
    ToxicityScorer`, or a function of a protocol's name that gives the scorer for its texts, as a scorer fitted per
    protocol needs) and compare with the stored Perspective values.

    Returns the report (``agreement.json``: the scorer's description, then per file, per protocol and pooled, per
    attribute :func:`agreement_stats`) and the texts (``texts.parquet``: ``file``, ``protocol``, ``text``, ``word``,
    ``scorer_<ATTR>``, ``perspective_<ATTR>``). Every file is read, and a file of another shape refused in one line,
    before anything is scored.
    """
    if not paths:
        raise ValueError("name at least one evaluation file (QueerBench's *_template_1.csv, QueerGen's prompt_1 CSVs)")
    attributes = published_files().attributes
    frames: list[pd.DataFrame] = []
    seen: set[str] = set()
    for path in paths:
        key = str(Path(path).resolve())
        if key in seen:
            raise ValueError(f"{path} is named twice; name each file once")
        seen.add(key)
        frame, protocol = distinct_texts(path)
        frame.insert(0, "protocol", protocol)
        frame.insert(0, "file", str(path))
        frames.append(frame)
    texts = pd.concat(frames, ignore_index=True)
    scorer_for = scorer if callable(scorer) and not hasattr(scorer, "score") else (lambda _protocol: scorer)
    described: dict[str, Any] = {}
    scored: set[str] = set(attributes)
    for attr in attributes:
        texts[f"scorer_{attr}"] = np.nan
    for protocol_name, rows in texts.groupby("protocol", sort=False):
        chosen = scorer_for(str(protocol_name))
        described[str(protocol_name)] = {"name": chosen.name, **chosen.describe()}
        probs = chosen.score(rows["text"].tolist(), words=rows["word"].tolist(), progress=progress)
        scored &= set(probs.columns)
        for attr in attributes:
            if attr in probs.columns:
                texts.loc[rows.index, f"scorer_{attr}"] = probs[attr].to_numpy(dtype=float)
    for attr in attributes:
        if attr not in scored:
            texts[f"scorer_{attr}"] = np.nan
    ordered = ["file", "protocol", "text", "word"]
    ordered += [f"scorer_{a}" for a in attributes] + [f"perspective_{a}" for a in attributes]
    texts = texts[ordered]
    report: dict[str, Any] = {
        "schema_version": 1,
        "queerbench_version": __version__,
        "scorer": next(iter(described.values())),
        "scorer_per_protocol": described,
        "threshold": THRESHOLD,
        "flag": "> threshold on both sides",
        "files": {
            file: {
                "protocol": str(frame["protocol"].iloc[0]),
                "texts": len(frame),
                "attributes": _stats_block(frame, attributes, scored),
            }
            for file, frame in texts.groupby("file", sort=False)
        },
        "protocols": {
            protocol: {"texts": len(frame), "attributes": _stats_block(frame, attributes, scored)}
            for protocol, frame in texts.groupby("protocol", sort=False)
        },
        "pooled": {"texts": len(texts), "attributes": _stats_block(texts, attributes, scored)},
    }
    return report, texts
