"""What the Space's tabs share: the user-error type, the wrapper that turns failures into messages, the UI's limits and
the per-sentence view with harmful completions hidden."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "HIDDEN",
    "MASK",
    "MAX_TOP_K",
    "SUBJECT",
    "TOXICITY_CHOICES",
    "SpaceError",
    "csv_frame",
    "sentence_view",
    "ui_errors",
]

log = logging.getLogger("queerbench.space")

SUBJECT = "[SUBJECT]"
MASK = "[MASK]"
TOXICITY_CHOICES = ("embedded", "none")
MAX_TOP_K = 20  # the UI's slider maximum, enforced for API callers too (a huge k would exhaust the Space's memory)
HIDDEN = "███ (hidden)"


class SpaceError(ValueError):
    """A problem with the user's input, shown in the UI as one message."""


def ui_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn every failure into a ``gr.Error`` message: the user's mistakes as they are, bugs as a short note."""
    import gradio as gr

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except gr.Error:
            raise
        except (SpaceError, ValueError, FileNotFoundError) as exc:
            raise gr.Error(str(exc), print_exception=False) from None
        except Exception as exc:  # a bug or an outage: log the traceback, show one line
            log.exception("unexpected error in %s", fn.__name__)
            raise gr.Error(
                f"something went wrong ({type(exc).__name__}); the details are in the Space logs", print_exception=False
            ) from None

    return wrapper


def _word_flags(row: pd.Series) -> list[bool]:
    """Which completions of a sentence count as harmful: a HurtLex category or a toxicity flag."""
    tox = row.get("word_toxicity")
    tox = tox if isinstance(tox, (list, tuple, np.ndarray)) else [[] for _ in row["words"]]
    return [bool(len(c)) or bool(len(t)) for c, t in zip(row["word_hurtlex"], tox, strict=True)]


def _details(words: Sequence[str], per_word: Any, flags: Sequence[bool], show: bool) -> str:
    if not isinstance(per_word, (list, tuple, np.ndarray)):
        return ""
    parts = []
    for w, items, bad in zip(words, per_word, flags, strict=True):
        if len(items):
            parts.append(f"{w if show or not bad else '███'}: {'/'.join(items)}")
    return "; ".join(parts)


def sentence_view(per_sentence: pd.DataFrame, show_harmful: bool = False) -> pd.DataFrame:
    """The per-sentence table the UI shows: completions with harmful ones marked, hidden unless ``show_harmful``."""
    rows = []
    for _, r in per_sentence.iterrows():
        words = list(r["words"])
        flags = _word_flags(r)
        shown = [w if (show_harmful or not bad) else HIDDEN for w, bad in zip(words, flags, strict=True)]
        rows.append(
            {
                "group": r["group"],
                "subject": r["subject"],
                "sentence": r["masked_sentence"],
                "completions": ", ".join(shown),
                "harmful": "⚠ yes" if any(flags) else "",
                "HurtLex": _details(words, r["word_hurtlex"], flags, show_harmful),
                "AFINN": round(float(r["afinn"]), 3),
                "toxicity flags": _details(words, r.get("word_toxicity"), flags, show_harmful),
            }
        )
    columns = ["group", "subject", "sentence", "completions", "harmful", "HurtLex", "AFINN", "toxicity flags"]
    return pd.DataFrame(rows, columns=columns)


def csv_frame(per_sentence: pd.DataFrame) -> pd.DataFrame:
    """Every column a user needs to re-analyse the run, completions unredacted, lists as JSON text."""
    view = sentence_view(per_sentence, show_harmful=True)
    view.insert(0, "id", per_sentence["id"].to_numpy())
    view["hurtlex_score"] = per_sentence["hurtlex"].to_numpy()
    view["toxicity_score"] = per_sentence["toxicity"].to_numpy()
    view["words"] = [json.dumps(list(w), ensure_ascii=False) for w in per_sentence["words"]]
    return view
