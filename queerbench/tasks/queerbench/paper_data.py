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
    "NOUN_GROUPS",
    "PRONOUN_TYPES",
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


NOUN_GROUPS: tuple[str, ...] = ("queer", "non-queer")
"""The ``queerness`` values of the upstream noun rows (each is its row's group)."""
PRONOUN_TYPES: tuple[str, ...] = ("neo", "neutral", "binary")
"""The ``type`` values of the upstream pronoun rows (``queerness`` = ``pronoun``; each is its row's group)."""
_ATTRIBUTES = "TOXICITY, IDENTITY_ATTACK, INSULT, PROFANITY, THREAT"


def read_paper_csv(path: str | Path) -> pd.DataFrame:
    """Read an upstream prediction or evaluation CSV by header name, with ``group`` and parsed columns added.

    Adds ``group`` (neo/neutral/binary for pronouns, queer/non-queer for nouns), ``tokens`` (parsed like the paper)
    and, where present, ``perspective_counts`` (the 5 stored counts). A cell that would otherwise become a new
    group, a traceback or a bare word (an unknown group or pronoun type, a ``perspective`` cell that is not a list of
    5 counts, a ``sentiment_analysis`` cell that is not a number) is a one-line ``ValueError`` naming the file, the
    line (the header is line 1), the column and the fix.
    """
    frame = pd.read_csv(path, sep=";", dtype=str, keep_default_na=False)
    frame = frame[[c for c in frame.columns if c and not c.startswith("Unnamed")]]
    missing = {"template", "queerness", "name", "type", "prediction"} - set(frame.columns)
    if missing:
        raise ValueError(f"{path}: not an upstream QueerBench prediction/evaluation file (missing {sorted(missing)})")
    groups = []
    for line, (queerness, kind) in enumerate(zip(frame["queerness"], frame["type"], strict=True), start=2):
        try:
            groups.append(group_of_row(queerness, kind))
        except ValueError as exc:
            raise ValueError(f"{path} line {line}: {exc}") from None
    frame["group"] = groups
    frame["tokens"] = [paper_token_list(p) for p in frame["prediction"]]
    if "perspective" in frame.columns:
        frame["perspective_counts"] = [
            _perspective_counts(v, f"{path} line {line}") for line, v in enumerate(frame["perspective"], start=2)
        ]
    if "sentiment_analysis" in frame.columns:
        frame["sentiment_analysis"] = [
            _number(v, f"{path} line {line}") for line, v in enumerate(frame["sentiment_analysis"], start=2)
        ]
    return frame


def _perspective_counts(text: str, where: str) -> list[int]:
    """A stored ``perspective`` cell (``str(list)`` of 5 counts) as a list, or a one-line error naming ``where``."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        value = None
    if (
        not isinstance(value, (list, tuple))
        or len(value) != 5
        or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in value)
    ):
        raise ValueError(
            f"{where}: column perspective is {text!r}, not a list of 5 counts like [0, 1, 0, 0, 0] (completions "
            f"flagged for {_ATTRIBUTES}); correct the cell, or remove the column and score with another --toxicity"
        )
    return list(value)


def _number(text: str, where: str) -> float:
    """A stored ``sentiment_analysis`` cell as a number, or a one-line error naming ``where``."""
    try:
        return float(text)
    except ValueError:
        raise ValueError(
            f"{where}: column sentiment_analysis is {text!r}, not a number (the stored AFINN mean); correct the cell"
        ) from None


def group_of_row(queerness: str, kind: str) -> str:
    """The Table-4 group of an upstream row: pronoun rows by their type, noun rows by queerness. An unknown value
    would make a new group (or a bare ``KeyError``): a one-line ``ValueError`` naming it and the known values."""
    if queerness == "pronoun":
        if kind not in PRONOUN_TYPES:
            raise ValueError(
                f"column type is {kind!r} on a pronoun row; the known pronoun types are {', '.join(PRONOUN_TYPES)} "
                "(each is its rows' group)"
            )
        return kind
    if queerness not in NOUN_GROUPS:
        raise ValueError(
            f"column queerness is {queerness!r}; expected {', '.join(NOUN_GROUPS)} (noun rows) or pronoun (pronoun "
            "rows, grouped by their type)"
        )
    return queerness


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
