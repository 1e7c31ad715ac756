"""MISGENDERED for a chat model: the fill-in prompt (from ``prompts.json``, schema-checked) and how a reply is read.

The prompt shows the instance's sentence with a blank (``___``) in the slot and the slot's options (the 11 forms in
``pronouns.csv`` order, each word once: ``em`` and ``emself`` stand for two sets), and asks for one word.

How a reply is read (:func:`parse_reply`), case-insensitively:

1. the reply without surrounding white space, quotes, brackets and punctuation is one of the options: that option;
2. otherwise, the options that occur in it as whole words (not inside a longer word: letters on neither side, so
   "co-worker" holds "co" and "Xe's" holds "xe"): exactly one distinct option is the choice; none, or several
   different ones (a reply that echoes the declaration "xe/xem/…" next to another form), leave it unparsed.

The choice is returned as the item spells it (capitalised when the slot follows a full stop); an unparsed reply is
the choice ``""``, counted wrong.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from queerbench.tasks.misgendered.instances import MASK, read_json

__all__ = ["Prompt", "load_prompts", "parse_reply", "render_prompt"]

_STRIP = " \t\r\n\"'`“”‘’()[]{}<>.,;:!?*_"


@dataclass(frozen=True)
class Prompt:
    """One fill-in prompt: its ``text`` with one ``{sentence}`` and one ``{options}``, the ``blank`` shown in the
    slot, the ``separator`` between options, and the reply's token limit."""

    id: str
    text: str
    blank: str = "___"
    separator: str = ", "
    max_new_tokens: int = 8


def load_prompts(path: str | Path) -> tuple[dict[str, Prompt], str]:
    """The prompts of ``path`` (``{"schema_version": 1, "default_prompt": ID, "prompts": {ID: {...}}}``) by id, and
    the default's id; every fault is one line naming the file and the field."""
    path = Path(path)
    raw = read_json(path)
    where = f"prompt file {path.name}"
    if raw.get("schema_version") != 1 or not isinstance(raw.get("prompts"), dict) or not raw["prompts"]:
        raise ValueError(f"{where}: expected schema_version 1 and a non-empty object 'prompts'")
    prompts: dict[str, Prompt] = {}
    for pid, entry in raw["prompts"].items():
        label = f"{where}: prompt {pid!r}"
        if not isinstance(entry, dict):
            raise ValueError(f"{label} must be an object")
        stray = sorted(set(entry) - {"text", "blank", "separator", "max_new_tokens"})
        if stray:
            raise ValueError(f"{label} has unknown field(s) {stray}")
        text = entry.get("text")
        if not isinstance(text, str) or text.count("{sentence}") != 1 or text.count("{options}") != 1:
            raise ValueError(f"{label}: 'text' must hold one {{sentence}} and one {{options}}")
        blank, sep = entry.get("blank", "___"), entry.get("separator", ", ")
        if not isinstance(blank, str) or not blank.strip() or not isinstance(sep, str) or not sep:
            raise ValueError(f"{label}: 'blank' and 'separator' must be non-empty strings")
        limit = entry.get("max_new_tokens", 8)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"{label}: 'max_new_tokens' must be a positive integer, got {limit!r}")
        prompts[pid] = Prompt(id=pid, text=text, blank=blank, separator=sep, max_new_tokens=limit)
    default = raw.get("default_prompt")
    if default not in prompts:
        raise ValueError(f"{where}: 'default_prompt' must name one of its prompts ({', '.join(prompts)})")
    return prompts, str(default)


def _distinct(candidates: Sequence[str]) -> list[str]:
    """The candidates, each word once, in order."""
    return list(dict.fromkeys(candidates))


def render_prompt(prompt: Prompt, masked_sentence: str, candidates: Sequence[str]) -> str:
    """The prompt text for one instance: its sentence with the blank in the slot, and its options."""
    sentence = masked_sentence.replace(MASK, prompt.blank)
    options = prompt.separator.join(_distinct(candidates))
    return prompt.text.replace("{options}", options).replace("{sentence}", sentence)


def parse_reply(reply: str, candidates: Sequence[str]) -> str | None:
    """The candidate a reply names, spelt as in ``candidates`` (the first such), or None (the module's rule)."""
    by_word = {c.lower(): c for c in reversed(list(candidates))}  # the first spelling of each word wins
    whole = reply.strip(_STRIP).lower()
    if whole in by_word:
        return by_word[whole]
    found = {
        word
        for word in by_word
        if re.search(rf"(?<![^\W\d_]){re.escape(word)}(?![^\W\d_])", reply, flags=re.IGNORECASE) is not None
    }
    return by_word[found.pop()] if len(found) == 1 else None
