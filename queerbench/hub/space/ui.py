"""What the Space's tabs share: the user-error type, the wrapper that turns failures into messages, the UI's limits and
the per-sentence view with harmful completions hidden."""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from queerbench.scoring.afinn import KEY as AFINN
from queerbench.scoring.hurtlex import KEY as HURTLEX
from queerbench.scoring.toxicity_base import KEY as TOXICITY

__all__ = [
    "HIDDEN",
    "MASK",
    "MAX_TOP_K",
    "SENTENCE_COLUMNS",
    "SUBJECT",
    "TOXICITY_CHOICES",
    "SpaceError",
    "csv_frame",
    "failure_message",
    "flagged_words",
    "hide_words",
    "sentence_view",
    "ui_errors",
    "ui_status",
]

log = logging.getLogger("queerbench.space")

SUBJECT = "[SUBJECT]"
MASK = "[MASK]"
TOXICITY_CHOICES = ("embedded", "surrogate", "none")
MAX_TOP_K = 20  # the UI's slider maximum, enforced for API callers too (a huge k would exhaust the Space's memory)
HIDDEN = "███ (hidden)"
SENTENCE_COLUMNS = ("group", "subject", "sentence", "completions", "harmful", "HurtLex", "AFINN", "toxicity flags")
"""The per-sentence table's headers (:func:`sentence_view`)."""
HIDDEN_WORD = "███"
"""What a harmful word inside a longer text (a reply, a report line) is replaced with."""
_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")


class SpaceError(ValueError):
    """A problem with the user's input, shown in the UI as one message."""


def failure_message(exc: BaseException, where: str) -> str:
    """What the user reads when ``where`` (a tab's function) failed: a user's mistake or an outage the checks name
    (:class:`SpaceError`, ``ValueError``, a missing file) as it is; a bug as a short note, its traceback logged."""
    if isinstance(exc, (SpaceError, ValueError, FileNotFoundError)):
        return str(exc)
    log.error("unexpected error in %s", where, exc_info=exc)
    return f"something went wrong ({type(exc).__name__}); the details are in the Space logs"


def ui_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn every failure into a ``gr.Error`` message (what API callers get): :func:`failure_message`."""
    import gradio as gr

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except gr.Error:
            raise
        except Exception as exc:
            raise gr.Error(failure_message(exc, fn.__name__), print_exception=False) from None

    return wrapper


def ui_status(fn: Callable[..., tuple[Any, ...]], failed: Callable[..., tuple[Any, ...]]) -> Callable[..., Any]:
    """For a tab's button: ``fn``'s outputs, or on a failure ``failed(message, *args, **kwargs)`` (the status line
    saying what failed and why, the other outputs cleared), so the page shows the reason where the user looks instead
    of bare "Error" badges under a status that still says what to do first."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            return failed(failure_message(exc, fn.__name__), *args, **kwargs)

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
                "AFINN": round(float(r[AFINN]), 3),
                "toxicity flags": _details(words, r.get("word_toxicity"), flags, show_harmful),
            }
        )
    return pd.DataFrame(rows, columns=list(SENTENCE_COLUMNS))


def csv_frame(per_sentence: pd.DataFrame) -> pd.DataFrame:
    """Every column a user needs to re-analyse the run, completions unredacted, lists as JSON text."""
    view = sentence_view(per_sentence, show_harmful=True)
    view.insert(0, "id", per_sentence["id"].to_numpy())
    view["hurtlex_score"] = per_sentence[HURTLEX].to_numpy()
    view["toxicity_score"] = per_sentence[TOXICITY].to_numpy()
    view["words"] = [json.dumps(list(w), ensure_ascii=False) for w in per_sentence["words"]]
    return view


def flagged_words(texts: Iterable[str], keep: Collection[str] = ()) -> list[set[str]]:
    """Per text: its words that HurtLex gives a category (the rule that flags a run's completions when no toxicity
    flags were stored), lowercased, except ``keep`` (the benchmark's identity words, which name the groups: hiding
    them would hide what a reply is about)."""
    from queerbench.scoring.hurtlex import load_hurtlex

    lexicon = load_hurtlex()
    keep = {k.lower() for k in keep}
    found = []
    for text in texts:
        words = {w.lower() for w in _WORD.findall(str(text or ""))}
        found.append({w for w in words if w not in keep and lexicon.categories(w)})
    return found


def hide_words(text: str, words: Collection[str]) -> str:
    """``text`` with every whole-word occurrence of ``words`` (any case) replaced by :data:`HIDDEN_WORD`."""
    if not words or not text:
        return text
    alternatives = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True) if w)
    return re.sub(rf"(?<!\w)(?:{alternatives})(?!\w)", HIDDEN_WORD, text, flags=re.IGNORECASE)
