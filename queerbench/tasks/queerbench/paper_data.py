"""Read the paper's own published files (predictions, per-sentence evaluations, Table 4) for reproduction checks.

The upstream CSVs are ``;``-separated and their column order varies between files, so everything is read by header
name. Predictions are stored as ``str(list)``; :func:`paper_token_list` parses them exactly like the paper's
``get_list`` (delete ``'``, spaces, ``[`` and ``]``, split on ``,``), quirks included: a predicted ``,`` becomes two
empty tokens.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pandas as pd

__all__ = [
    "TABLE4_MODELS",
    "group_of_row",
    "paper_token_list",
    "read_paper_csv",
    "read_table4",
    "table4_column",
]

TABLE4_MODELS: dict[str, str] = {
    "albert-base-v2": "ALBERTbase",
    "albert-large-v2": "ALBERTlarge",
    "bert-base-uncased": "BERTbase",
    "bert-large-uncased": "BERTlarge",
    "roberta-base": "RoBERTabase",
    "roberta-large": "RoBERTalarge",
    "vinai/bertweet-base": "BERTweetbase",
    "vinai/bertweet-large": "BERTweetlarge",
}
"""Hub id → the model name used in the paper's Table 4 and result files."""


def paper_token_list(text: str) -> list[str]:
    """Parse a stored prediction list the way the paper's ``get_list`` did (bugs included)."""
    text = str(text)
    for ch in ("'", " ", "[", "]"):
        text = text.replace(ch, "")
    return text.split(",")


def read_paper_csv(path: str | Path) -> pd.DataFrame:
    """Read an upstream prediction or evaluation CSV by header name, with ``group`` and parsed columns added.

    Adds ``group`` (neo/neutral/binary for pronouns, queer/non-queer for nouns), ``tokens`` (parsed like the paper)
    and, where present, ``perspective_counts`` (the 5 stored counts).
    """
    frame = pd.read_csv(path, sep=";", dtype=str, keep_default_na=False)
    frame = frame[[c for c in frame.columns if c and not c.startswith("Unnamed")]]
    missing = {"template", "queerness", "name", "type", "prediction"} - set(frame.columns)
    if missing:
        raise ValueError(f"{path}: not an upstream QueerBench prediction/evaluation file (missing {sorted(missing)})")
    frame["group"] = [group_of_row(q, t) for q, t in zip(frame["queerness"], frame["type"], strict=True)]
    frame["tokens"] = [paper_token_list(p) for p in frame["prediction"]]
    if "perspective" in frame.columns:
        frame["perspective_counts"] = [list(ast.literal_eval(v)) for v in frame["perspective"]]
    if "sentiment_analysis" in frame.columns:
        frame["sentiment_analysis"] = frame["sentiment_analysis"].astype(float)
    return frame


def group_of_row(queerness: str, kind: str) -> str:
    """The Table-4 group of an upstream row: pronoun rows by their type, noun rows by queerness."""
    if queerness == "pronoun":
        return kind
    return {"queer": "queer", "non-queer": "non-queer"}[queerness]


def table4_column(path: str | Path) -> str:
    """``.../bert-base-uncased_template_5.csv`` → ``BERTbase[5]`` (the paper's column name)."""
    path = Path(path)
    match = re.fullmatch(r"(.+)_template_(\d+)\.csv", path.name)
    if not match:
        raise ValueError(f"{path.name}: expected <model>_template_<k>.csv")
    model = match.group(1)
    if path.parent.name == "vinai":
        model = f"vinai/{model}"
    return f"{TABLE4_MODELS[model]}[{match.group(2)}]"


def read_table4(results_dir: str | Path) -> pd.DataFrame:
    """The published Table 4 as a frame: rows = columns of the result files, columns = the five groups (QB)."""
    results_dir = Path(results_dir)
    pron = pd.read_csv(results_dir / "total_score_pronouns.csv", sep=";", index_col=0)
    term = pd.read_csv(results_dir / "total_score_term.csv", sep=";", index_col=0)
    table = pd.DataFrame(
        {
            "neo": pron.loc["Total Neo"],
            "neutral": pron.loc["Total Neutral"],
            "binary": pron.loc["Total Binary"],
            "queer": term.loc["Total queer"],
            "non-queer": term.loc["Total non queer"],
        }
    )
    return table.astype(float)
