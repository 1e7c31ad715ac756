"""The caveats every report carries next to its numbers: a toxicity scorer's known limits (with the agreement figures
this project measured) and the small-sample warning.

The text lives in ``queerbench/data/scorer_caveats.json`` (schema-checked by :func:`schema_problems`), so reports,
figures and ``compare`` say the same thing in the same words:

- :func:`scorer_caveat` → the limits of the scorer a run used (``hf:<model>`` reads the ``hf`` entry) and, for the
  embedded scorer, its Cohen's κ with the paper's stored Perspective flags for the input the run's scorer read;
- :func:`small_n` → whether a group's n is below :func:`small_n_threshold` (30) sentences, and :func:`small_n_note` the warning
  with the width of its 95% CI;
- :func:`identity_flags` → which flagged completions are identity words (the scorer's known reaction);
- :func:`reference_scorers` → the offline scorers ``leaderboard build`` re-scores the published models with (the
  file's ``reference_scorers``), and :func:`reference_note` what a table of a scorer's reference rows says about how
  they were made (its ``reference_note``: e.g. that a fitted scorer's rows come from leave-one-model-out fits).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from importlib import resources
from typing import Any

__all__ = [
    "identity_flags",
    "load_caveats",
    "reference_note",
    "reference_scorers",
    "schema_problems",
    "scorer_caveat",
    "small_n",
    "small_n_note",
    "small_n_threshold",
]

_FILE = "scorer_caveats.json"
_DEFAULT_REFERENCE_SCORERS = ("embedded",)
_NOT_RESCORERS = ("perspective", "precomputed", "none")
"""Not offline re-scorers: the published rows already hold Perspective's stored values; the others score nothing."""


@functools.cache
def load_caveats() -> dict[str, Any]:
    """The caveats file, schema-checked (a problem is a ``ValueError`` naming the file)."""
    data = json.loads(resources.files("queerbench.data").joinpath(_FILE).read_text(encoding="utf-8"))
    problems = schema_problems(data)
    if problems:
        raise ValueError(f"queerbench/data/{_FILE}: " + "; ".join(problems))
    return data


def schema_problems(data: Any) -> list[str]:
    """What is wrong with a caveats document: ``schema_version`` 1, ``small_n`` with an integer ``threshold`` > 1 and
    a ``text``, and ``scorers`` mapping names to non-empty ``limits`` lists of text; an ``agreement`` block needs its
    ``attributes``, a ``by_input`` row of as many numbers in [-1, 1] per input, and the ``command`` that measured it."""
    if not isinstance(data, dict):
        return ["the file must hold a JSON object"]
    problems = []
    if data.get("schema_version") != 1:
        problems.append("schema_version must be 1")
    small = data.get("small_n") or {}
    if not isinstance(small.get("threshold"), int) or small["threshold"] < 2 or not isinstance(small.get("text"), str):
        problems.append("small_n needs an integer threshold of at least 2 and a text")
    listed = data.get("reference_scorers", list(_DEFAULT_REFERENCE_SCORERS))
    if not isinstance(listed, list) or not all(isinstance(n, str) and n.strip() for n in listed):
        problems.append("reference_scorers must be a list of --toxicity names")
    else:
        bad = [n for n in listed if n in (*_NOT_RESCORERS, "hf:")]
        bad += [n for i, n in enumerate(listed) if n in listed[:i]]
        if bad:
            problems.append(f"reference_scorers must name offline scorers, each once (not {bad[0]!r})")
    scorers = data.get("scorers")
    if not isinstance(scorers, dict) or not scorers:
        return [*problems, "scorers must map scorer names to their caveats"]
    for name, entry in scorers.items():
        limits = (entry or {}).get("limits")
        if not isinstance(limits, list) or not limits or not all(isinstance(t, str) and t.strip() for t in limits):
            problems.append(f"scorer {name!r} needs a non-empty list of limits")
        note = (entry or {}).get("reference_note")
        if note is not None and not (isinstance(note, str) and note.strip()):
            problems.append(f"scorer {name!r}: reference_note must be a text")
        agreement = (entry or {}).get("agreement")
        if agreement is None:
            continue
        attrs = agreement.get("attributes")
        rows = agreement.get("by_input")
        if not isinstance(attrs, list) or not attrs or not isinstance(rows, dict) or not rows:
            problems.append(f"scorer {name!r}: agreement needs attributes and by_input rows")
            continue
        for form, row in rows.items():
            ok = isinstance(row, list) and len(row) == len(attrs)
            if not ok or not all(isinstance(v, int | float) and -1 <= v <= 1 for v in row):
                problems.append(f"scorer {name!r}: agreement row {form!r} needs {len(attrs)} numbers in [-1, 1]")
        if not isinstance(agreement.get("command"), str) or not isinstance(agreement.get("what"), str):
            problems.append(f"scorer {name!r}: agreement needs what it measures and the command")
    return problems


def small_n_threshold() -> int:
    """Groups with fewer scored sentences than this (the file's ``small_n.threshold``, 30) get the warning."""
    return int(load_caveats()["small_n"]["threshold"])


def small_n(n: int | None) -> bool:
    """Whether a group of ``n`` scored sentences is a small sample (0 counts as no data, not small)."""
    return n is not None and 0 < n < small_n_threshold()


def small_n_note(n: int | None, ci: Sequence[float] | None = None) -> str | None:
    """``"n = 12 < 30: CI width 3.41"`` (``"no CI"`` without one) for a small group, else None. A zero-width CI (one
    template: the bootstrap over templates has nothing to resample) says that it shows no uncertainty."""
    if not small_n(n):
        return None
    width = f"CI width {ci[1] - ci[0]:.2f}" if ci else "no CI"
    if ci and ci[1] - ci[0] < 5e-3:
        width += ", too few templates for the CI to show the uncertainty"
    return f"n = {n} < {small_n_threshold()}: {width}"


def _entry(scorer: str | None) -> dict[str, Any] | None:
    if not scorer or scorer == "none":
        return None
    key = "hf" if scorer.startswith("hf:") else scorer
    return load_caveats()["scorers"].get(key)


def scorer_caveat(scorer: str | None, toxicity_input: str | None = None) -> list[str]:
    """The caveat lines of toxicity scorer ``scorer`` (its ``--toxicity`` name): its limits, then, when this project
    measured it, its agreement with Perspective for ``toxicity_input`` (``neutral``, ``full`` or ``frame``; the
    sentence column a run read is mapped to its form) and the command; ``[]`` for ``none`` or an unknown name."""
    entry = _entry(scorer)
    if entry is None:
        return []
    lines = list(entry["limits"])
    agreement = entry.get("agreement")
    if agreement:
        form = _input_form(toxicity_input)
        rows = agreement["by_input"]
        shown = [form] if form in rows else list(rows)
        for f in shown:
            kappas = ", ".join(f"{a} {v:.2f}" for a, v in zip(agreement["attributes"], rows[f], strict=True))
            lines.append(f"{agreement['what']}, {f} input: {kappas} (`{agreement['command']}`).")
    return lines


def reference_scorers() -> list[str]:
    """The offline scorers (``--toxicity`` names) whose rows ``leaderboard build`` computes for every published model
    besides the stored Perspective values: the caveats file's ``reference_scorers`` (default ``["embedded"]``). A
    scorer joins by being listed there; no code names it."""
    return list(load_caveats().get("reference_scorers", _DEFAULT_REFERENCE_SCORERS))


def reference_note(scorer: str | None) -> str | None:
    """What a table of the published models' rows under ``scorer`` says about how they were made (the scorer's
    ``reference_note``, e.g. that they come from leave-one-model-out fits); None when its entry has none."""
    entry = _entry(scorer)
    note = (entry or {}).get("reference_note")
    return str(note) if note else None


def _input_form(toxicity_input: str | None) -> str | None:
    """The input form a run's ``toxicity_input`` record names (a column name, an option value or the frame text)."""
    if toxicity_input is None:
        return None
    return {"neutral_sentence": "neutral", "masked_sentence": "full", "sentence": "full"}.get(
        toxicity_input, "frame" if toxicity_input.startswith("The person is") else toxicity_input
    )


def identity_flags(words: Sequence[str], flags: Sequence[Sequence[str]], identity_words: Iterable[str]) -> list[bool]:
    """Per completion: flagged by the toxicity scorer *and* an identity word (one of ``identity_words``, compared
    lower-cased), i.e. a flag the scorer's known reaction to identity words may explain."""
    identities = {str(w).lower() for w in identity_words}
    return [bool(f) and str(w).lower() in identities for w, f in zip(words, flags, strict=True)]
