"""Compare a run's top-k tokens with the paper's published prediction files.

The upstream ``data/prediction/<model>_template_<k>.csv`` files are ``;``-separated with a ``template`` column
(the full sentence with ``[MASK]``) and ``prediction`` (``str(list)`` of tokens), in the order of the paper
dataset. A ``paper``-config run with the same weights should reproduce them; this module measures how closely.
Rows are matched by sentence text (duplicates in order), so partial runs (``--limit``) can be checked too.
"""

from __future__ import annotations

import ast
import json
import re
from collections import defaultdict, deque
from pathlib import Path
from typing import Any

import pandas as pd

from queerbench.base.files import read_parquet

__all__ = ["check_predictions", "read_run_settings", "read_upstream_predictions"]

_RUN_COLUMNS = ("id", "masked_sentence", "tokens")
_UPSTREAM_NAME = re.compile(r"_template_(\d+)\.csv$")


def read_csv_or_explain(path: Path, what: str, **kwargs: Any) -> pd.DataFrame:
    """``pd.read_csv(path, **kwargs)``, with pandas' parser errors (an empty file, a binary or Parquet file, a
    broken quote) turned into one ``ValueError`` that names the file and what was expected."""
    try:
        return pd.read_csv(path, **kwargs)
    except pd.errors.EmptyDataError:
        raise ValueError(f"{path} is empty; expected {what}") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        reason = " ".join(str(exc).split())[:120]
        raise ValueError(f"{path} is not a readable CSV ({type(exc).__name__}: {reason}); expected {what}") from None


def read_upstream_predictions(path: str | Path) -> pd.DataFrame:
    """An upstream prediction CSV as ``template`` + ``tokens`` (the stored lists parsed exactly, not like
    the paper's lossy ``get_list``), columns read by header name."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"upstream prediction file {path} does not exist")
    frame = read_csv_or_explain(
        path,
        "an upstream data/prediction/<model>_template_<k>.csv (';'-separated)",
        sep=";",
        dtype=str,
        keep_default_na=False,
    )
    missing = {"template", "prediction"} - set(frame.columns)
    if missing:
        raise ValueError(
            f"{path} is not an upstream QueerBench prediction file: missing column(s) {sorted(missing)} "
            "(expected a ';'-separated file with 'template' and 'prediction')"
        )
    tokens = []
    for row, text in enumerate(frame["prediction"], start=2):
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError) as exc:
            raise ValueError(f"{path} line {row}: prediction {text!r} is not a Python list literal") from exc
        tokens.append([str(t) for t in value])
    return pd.DataFrame({"template": frame["template"], "tokens": tokens})


def _read_run(predictions: pd.DataFrame | str | Path) -> pd.DataFrame:
    if isinstance(predictions, (str, Path)):
        path = Path(predictions)
        if not path.is_file():
            raise FileNotFoundError(f"predictions file {path} does not exist (expected a run's predictions.parquet)")
        frame = read_parquet(
            path, fix="if it is a run's predictions.parquet, delete it and rerun `queerbench run` for that folder"
        )
    else:
        frame = predictions
    missing = [c for c in _RUN_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"predictions lack the column(s) {missing}; expected {list(_RUN_COLUMNS)}")
    return frame


def read_run_settings(predictions_path: str | Path) -> dict[str, Any]:
    """``{"config": ..., "top_k": ...}`` of the run a ``predictions.parquet`` belongs to (from the ``run.json`` or
    ``scores.json`` next to it); ``{}`` when neither is there (or cannot be read: the scorer reads no more of them).
    One that holds another JSON value than an object is one line naming it."""
    folder = Path(predictions_path).parent
    for name, config_key, k_key in (("run.json", "config", "top_k"), ("scores.json", "config", "k")):
        try:
            doc = json.loads((folder / name).read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict):
            raise ValueError(
                f"{folder / name} must hold a JSON object (the run's record), not a JSON {type(doc).__name__}; delete it "
                "and rerun `queerbench run` for that folder"
            )
        if doc.get(config_key) is not None:
            return {"config": doc.get(config_key), "top_k": doc.get(k_key)}
    return {}


def _published(config: str) -> bool:
    """Whether the task ``config`` predicts the paper's sentences as published (what the prediction files hold)."""
    from queerbench.tasks.queerbench.templates import published_sentences

    try:
        return published_sentences(config)
    except ValueError:  # another benchmark's task
        return False


def _setting_warnings(run: dict[str, Any], against: Path, file_k: int) -> list[str]:
    """Say when the run and the paper's file were not made the same way (their agreement then means little)."""
    warnings = []
    if run.get("config") is not None and not _published(str(run["config"])):
        warnings.append(
            f"the run used config {run['config']!r}, but the paper's prediction files hold the 'paper' config's raw "
            "tokens for the paper's sentences: agreement is not meaningful; compare a run made with --config paper"
        )
    match = _UPSTREAM_NAME.search(against.name)
    theirs = int(match.group(1)) if match else file_k
    if run.get("top_k") is not None and int(run["top_k"]) != theirs:
        warnings.append(
            f"the run has top-{run['top_k']} lists and {against.name} top-{theirs}: only the first "
            f"{min(int(run['top_k']), theirs)} of each are compared; rerun with --top-k {theirs} to match the file"
        )
    return warnings


def check_predictions(
    predictions: pd.DataFrame | str | Path,
    against_csv: str | Path,
    *,
    max_mismatches: int = 5,
    run_settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Agreement between a run's top-k tokens and an upstream prediction CSV.

    Returns ``n_compared``, ``n_unmatched`` (run rows whose sentence is not in the CSV), ``k`` (the common list
    length compared), ``top1_agreement``, ``topk_overlap`` (mean share of the CSV's k tokens also in ours),
    ``exact_list_agreement``, the first ``max_mismatches`` rows whose lists differ, and ``warnings`` when the run's
    config or k (``run_settings``, read from the run folder when ``predictions`` is a path) differ from the file's.
    Raises ``ValueError`` when no sentence matches (e.g. a ``default``-config run compared with the paper's sentences).
    """
    if run_settings is None:
        run_settings = read_run_settings(predictions) if isinstance(predictions, (str, Path)) else {}
    run = _read_run(predictions)
    upstream = read_upstream_predictions(against_csv)
    rows: dict[str, deque[int]] = defaultdict(deque)
    for i, text in enumerate(upstream["template"]):
        rows[text].append(i)
    pairs: list[tuple[str, str, list[str], list[str]]] = []
    unmatched = 0
    for rid, sentence, tokens in zip(run["id"], run["masked_sentence"], run["tokens"], strict=True):
        if not rows.get(sentence):
            unmatched += 1
            continue
        pairs.append((str(rid), sentence, [str(t) for t in tokens], upstream["tokens"][rows[sentence].popleft()]))
    if not pairs:
        raise ValueError(
            f"none of the {len(run)} run sentences occurs in {against_csv}; compare a run made with --config paper "
            "against the paper's prediction file"
        )
    k = min(min(len(ours), len(theirs)) for _, _, ours, theirs in pairs)
    if k < 1:
        raise ValueError("a prediction list is empty; nothing to compare")
    top1 = overlap = exact = 0.0
    mismatches: list[dict[str, Any]] = []
    for rid, sentence, ours, theirs in pairs:
        a, b = ours[:k], theirs[:k]
        top1 += a[0] == b[0]
        overlap += len(set(a) & set(b)) / len(set(b))
        exact += a == b
        if a != b and len(mismatches) < max_mismatches:
            mismatches.append({"id": rid, "sentence": sentence, "ours": a, "theirs": b})
    n = len(pairs)
    file_k = max(len(t) for t in upstream["tokens"])
    return {
        "against": str(against_csv),
        "run_config": run_settings.get("config"),
        "run_top_k": run_settings.get("top_k"),
        "warnings": _setting_warnings(run_settings, Path(against_csv), file_k),
        "n_compared": n,
        "n_unmatched": unmatched,
        "k": k,
        "top1_agreement": top1 / n,
        "topk_overlap": overlap / n,
        "exact_list_agreement": exact / n,
        "mismatches": mismatches,
    }
