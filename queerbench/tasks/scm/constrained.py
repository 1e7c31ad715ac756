"""Constrained scoring of the SCM survey prompts on a local model: instead of reading a reply, compare the
log-probabilities of the answer options (the digits 1–5 after ``Rating:``, each listed term after ``Answer:``), asked
as ``loglikelihood`` requests of the model's backend. The default ``calibrated`` method removes each option's prior
(see :data:`SCORING_METHODS`).
"""

from __future__ import annotations

import bisect
import itertools
import math
from typing import Any

import pandas as pd

from queerbench.base.progress import progress_bar
from queerbench.models.requests import LOGLIKELIHOOD, Backend, Loglikelihood, LoglikelihoodResult, require
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


def _option_logps(
    backend: Backend, prompts: list[str], opts: list[list[str]], prefix: str, bar: Any
) -> list[list[LoglikelihoodResult]]:
    """Each option's ``loglikelihood`` as the reply to its prompt after ``prefix`` (``" " + option``, a chat
    request: the backend formats the prompt as its model reads one), in one call; ``bar`` advances by the prompts'
    worth of options scored (the backend scores them in an order of its own)."""
    requests = [
        Loglikelihood(prompt, " " + option, chat=True, reply_prefix=prefix)
        for prompt, options in zip(prompts, opts, strict=True)
        for option in options
    ]
    ends = list(itertools.accumulate(len(o) for o in opts))
    done = 0

    def tick(n: int) -> None:  # the backend ticks per request, in its own order: count prompts by requests done
        nonlocal done
        before = bisect.bisect_right(ends, done)
        done += n
        bar.update(bisect.bisect_right(ends, done) - before)

    results = backend.loglikelihood(requests, tick)
    if len(results) != len(requests):
        raise RuntimeError(
            f"{backend.name} answered {len(results)} of {len(requests)} loglikelihood requests (a backend must answer "
            "each one: a bug in it); --no-constrained skips constrained scoring"
        )
    return [results[end - len(o) : end] for o, end in zip(opts, ends, strict=True)]


def constrained_scores(
    backend: Backend, rows: pd.DataFrame, method: str = "calibrated", *, progress: bool = True
) -> pd.DataFrame:
    """Per rating prompt: P(digit) for 1–5 and its expectation; per selection prompt: P(term) (``method``).

    ``backend`` answers the options' ``loglikelihood`` requests (:class:`~queerbench.models.requests.Loglikelihood`
    with ``chat``: each option as the first tokens of the reply to the prompt, after ``Rating:`` or ``Answer:``; a
    local causal LM's :class:`~queerbench.models.backends.causal.CausalBackend`, in its batch size). Each row keeps
    its own option order (a shuffled selection list is scored as shown). Columns: ``probs``, ``logp`` (summed),
    ``logp_content_free`` (``calibrated``), ``expected_rating``, ``top_term``, ``top_is_first``, ``p_warmth``,
    ``p_competence``, ``scoring``. Unless ``progress`` is False, a bar counts the prompts scored (those of the rows
    and, for ``calibrated``, their content-free versions).
    """
    if method not in SCORING_METHODS:
        raise ValueError(f"unknown scoring method {method!r}; use one of {', '.join(SCORING_METHODS)}")
    require(backend, [LOGLIKELIHOOD], why="constrained scoring of the answer options")
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
            got = _option_logps(backend, [r["prompt"] for r in recs], opts, prefix, bar)
            cf: list[list[LoglikelihoodResult] | None] = [None] * len(recs)
            if keys:
                cf_got = _option_logps(backend, [k[0] for k in keys], [list(k[1]) for k in keys], prefix, bar)
                table = dict(zip(keys, cf_got, strict=True))
                cf = [table[(p, tuple(o))] for p, o in zip(cf_prompts, opts, strict=True)]
            scored.append((task, recs, opts, got, cf))
    for task, recs, opts, got, cf in scored:
        for rec, options, results, cf_results in zip(recs, opts, got, cf, strict=True):
            lp = [r.logprob for r in results]
            lp_cf = [r.logprob for r in cf_results] if cf_results is not None else None
            if method == "calibrated":
                assert lp_cf is not None
                adjusted = [a - b for a, b in zip(lp, lp_cf, strict=True)]
            elif method == "mean":
                adjusted = [r.mean for r in results]
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
