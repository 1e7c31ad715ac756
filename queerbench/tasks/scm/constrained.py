"""Constrained scoring of the SCM survey prompts on a local model: instead of reading a reply, compare the
log-probabilities of the answer options (the digits 1–5 after ``Rating:``, each listed term after ``Answer:``). The
default ``calibrated`` method removes each option's prior (see :data:`SCORING_METHODS`).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from queerbench.base.progress import progress_bar
from queerbench.tasks.scm.data import Group, load_prompts, load_terms
from queerbench.tasks.scm.dataset import RATING_OPTIONS, fill_template

__all__ = ["RATING_PREFIX", "SCORING_METHODS", "SELECTION_PREFIX", "constrained_scores"]

RATING_PREFIX = "Rating:"
"""Answer prefix after which the digits 1–5 are scored (each as ``" " + digit``)."""
SELECTION_PREFIX = "Answer:"
"""Answer prefix after which each listed term is scored."""
SCORING_METHODS: dict[str, str] = {
    "calibrated": "log P(option | prompt) − log P(option | the same prompt with the group replaced by 'N/A'), "
    "softmaxed over the options (contextual calibration, Zhao et al. 2021): removes each option's prior, such as "
    "the first-listed, single-token 'warm' or a favourite digit, and the length penalty of multi-token terms",
    "mean": "mean token log-probability of each option, softmaxed (length-normalised)",
    "sum": "summed token log-probability of each option, softmaxed (unnormalised; favours short, first-listed "
    "options: the earlier default, kept to show the artefact)",
}
"""How option log-probabilities become a distribution; ``calibrated`` is the default."""
_NA_GROUP = Group("na", "N/A", "N/A", "N/A", "", "they", "them", "are")


def _softmax(logps: list[float]) -> list[float]:
    top = max(logps)
    exps = [math.exp(x - top) for x in logps]
    total = sum(exps)
    return [e / total for e in exps]


def _content_free_prompt(rec: dict[str, Any]) -> str:
    """The row's prompt with the group replaced by "N/A" (same term, same option order)."""
    tpl = {p.prompt_type: p for p in load_prompts()}[rec["prompt_type"]]
    terms = {t.term: t for t in load_terms()}
    shown = tuple(terms[o] for o in rec["options"]) if rec["task"] == "selection" else tuple(load_terms())
    return fill_template(tpl, _NA_GROUP, terms.get(rec.get("term") or ""), shown)


def _score_options(
    runner: Any, prompts: list[str], opts: list[list[str]], prefix: str, batch_size: int, bar: Any
) -> list[list[float]]:
    """``runner.score_options``, advancing ``bar`` per prompt: when every prompt has ``m`` options, in slices of
    ``batch_size`` prompts, each ``m`` whole batches of the one call's sequences in its order (the same batches and
    padding, so the same scores); otherwise in one call."""
    if len({len(o) for o in opts}) > 1:
        scores = runner.score_options(prompts, opts, prefix, batch_size)
        bar.update(len(prompts))
        return scores
    scores = []
    for start in range(0, len(prompts), batch_size):
        part = slice(start, start + batch_size)
        scores += runner.score_options(prompts[part], opts[part], prefix, batch_size)
        bar.update(len(prompts[part]))
    return scores


def constrained_scores(
    runner: Any, rows: pd.DataFrame, batch_size: int = 8, method: str = "calibrated", *, progress: bool = True
) -> pd.DataFrame:
    """Per rating prompt: P(digit) for 1–5 and its expectation; per selection prompt: P(term) (``method``).

    ``runner`` needs ``score_options(prompts, options, answer_prefix, batch_size)`` (summed log-probs per option)
    and, for ``mean``, a ``tokenizer``. Each row keeps its own option order (a shuffled selection list is scored
    as shown). Columns: ``probs``, ``logp`` (summed), ``logp_content_free`` (``calibrated``), ``expected_rating``,
    ``top_term``, ``top_is_first``, ``p_warmth``, ``p_competence``, ``scoring``. Unless ``progress`` is False, a
    bar counts the prompts scored (those of the rows and, for ``calibrated``, their content-free versions).
    """
    if method not in SCORING_METHODS:
        raise ValueError(f"unknown scoring method {method!r}; use one of {', '.join(SCORING_METHODS)}")
    out: list[dict[str, Any]] = []
    axis_of = {t.term: t.axis for t in load_terms()}
    tasks = []  # (task, prefix, rows, their options, the distinct content-free (prompt, options) of calibrated)
    for task, prefix in (("rating", RATING_PREFIX), ("selection", SELECTION_PREFIX)):
        recs = rows[rows["task"] == task].to_dict("records")
        opts = [list(r["options"]) for r in recs]
        cf_prompts = [_content_free_prompt(r) for r in recs] if method == "calibrated" else []
        keys = list({(p, tuple(o)): None for p, o in zip(cf_prompts, opts, strict=False)})
        if recs:
            tasks.append((task, prefix, recs, opts, cf_prompts, keys))
    total = sum(len(t[2]) + len(t[5]) for t in tasks)
    with progress_bar(total, "constrained scoring", "prompt", disable=not progress or not total) as bar:
        scored = []
        for task, prefix, recs, opts, cf_prompts, keys in tasks:
            logps = _score_options(runner, [r["prompt"] for r in recs], opts, prefix, batch_size, bar)
            cf: list[list[float] | None] = [None] * len(recs)
            if keys:
                cf_scores = _score_options(
                    runner, [k[0] for k in keys], [list(k[1]) for k in keys], prefix, batch_size, bar
                )
                table = dict(zip(keys, cf_scores, strict=True))
                cf = [table[(p, tuple(o))] for p, o in zip(cf_prompts, opts, strict=True)]
            scored.append((task, recs, opts, logps, cf))
    for task, recs, opts, logps, cf in scored:
        for rec, options, lp, lp_cf in zip(recs, opts, logps, cf, strict=True):
            if method == "calibrated":
                assert lp_cf is not None
                adjusted = [a - b for a, b in zip(lp, lp_cf, strict=True)]
            elif method == "mean":
                lens = [len(runner.tokenizer(" " + o, add_special_tokens=False)["input_ids"]) for o in options]
                adjusted = [a / max(n, 1) for a, n in zip(lp, lens, strict=True)]
            else:
                adjusted = list(lp)
            probs = _softmax(adjusted)
            top = max(range(len(probs)), key=probs.__getitem__)
            item = {
                "id": rec["id"],
                "task": task,
                "prompt_type": rec["prompt_type"],
                "group": rec["group"],
                "axis": rec["axis"],
                "sample": int(rec.get("sample", -1)) if pd.notna(rec.get("sample", -1)) else -1,
                "options": options,
                "probs": probs,
                "logp": list(lp),
                "logp_content_free": list(lp_cf) if lp_cf is not None else None,
                "scoring": method,
                "top_term": options[top],
                "top_is_first": top == 0,
            }
            if task == "rating":
                item["expected_rating"] = sum(int(o) * p for o, p in zip(RATING_OPTIONS, probs, strict=True))
                item["p_warmth"] = item["p_competence"] = None
            else:
                item["expected_rating"] = None
                item["p_warmth"] = sum(p for o, p in zip(options, probs, strict=True) if axis_of[o] == "Warmth")
                item["p_competence"] = 1.0 - item["p_warmth"]
            out.append(item)
    return pd.DataFrame(out)
