"""The ``instructed`` method: ask a chat model to fill the blank, as QueerGen does, and parse its reply to one word.

Prompt: QueerGen's default instruction verbatim (``queerbench/data/llm_prompts.json``, id ``queergen-2``) followed by
the QueerBench sentence with its ``[MASK]`` in place, as one user turn, no system prompt. Decoding: k = 1 is one
greedy reply (temperature 0); k > 1 is k independent replies at temperature 1.0, so duplicates are allowed and each
sentence records how many distinct words it got. QueerGen's top-5 sends no temperature (the provider's default: 1 for
OpenAI's API); the data file's ``decoding.note`` cites its code. Replies go through the generation layer
(:mod:`queerbench.models.generation`: its reply cache, concurrency and per-call seeds), so a killed run resumes without asking again.

Every reply gets one label (:func:`parse_reply`):

- ``ok``: one word was found (letters, inner ``'``/``-``; lowercased) — directly, after stripping ``<think>`` blocks,
  code fences, quotes, markup, an ``Answer:``-style lead and trailing punctuation, or cut out of an echoed sentence;
- ``empty``: nothing left (asked again up to ``empty_reasks`` times, see the data file);
- ``refusal``: several words, one of the refusal patterns matches;
- ``echo``: the sentence (or its start) comes back with no single word in the slot (e.g. ``[MASK]`` left in);
- ``multi_word``: anything else that is not one word (several words, digits, symbols).

Only ``ok`` words are scored; the report gives the rates of the other labels per group.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import pandas as pd

from queerbench.methods.base import GenerationError
from queerbench.models.masked.vocab_filter import WORD  # the whole-word rule of the masked-LM `default` mode

__all__ = [
    "LABELS",
    "GenerationError",
    "ParsedReply",
    "build_prompt",
    "instructed_request",
    "instructed_settings",
    "load_prompts",
    "parse_reply",
    "parse_summary",
    "predict_instructed",
    "stream_instructed",
]

LABELS: tuple[str, ...] = ("ok", "multi_word", "refusal", "echo", "empty")
MASK = "[MASK]"
REASK_SEED_STEP = 100_003
"""Re-ask ``a`` of sample ``s`` runs under seed ``seed + REASK_SEED_STEP · a + s``."""


@functools.cache
def load_prompts() -> dict[str, Any]:
    """The prompt file, schema-checked: prompts with ``{sentence}`` and ``[MASK]``, decoding settings, patterns."""
    data = json.loads(resources.files("queerbench.data").joinpath("llm_prompts.json").read_text(encoding="utf-8"))
    problems = []
    if data.get("schema_version") != 1:
        problems.append("schema_version must be 1")
    prompts = data.get("prompts") or {}
    for pid, p in prompts.items():
        if not isinstance(p.get("text"), str) or p["text"].count("{sentence}") != 1 or MASK not in p["text"]:
            problems.append(f"prompt {pid!r} needs a text with one {{sentence}} and the word {MASK}")
    if data.get("default_prompt") not in prompts:
        problems.append("default_prompt must name one of the prompts")
    dec = data.get("decoding") or {}
    for key in ("greedy_temperature", "sample_temperature", "max_new_tokens", "empty_reasks"):
        if not isinstance(dec.get(key), int | float) or dec[key] < 0:
            problems.append(f"decoding.{key} must be a non-negative number")
    if dec.get("top_p") is not None and not (isinstance(dec["top_p"], int | float) and 0 < dec["top_p"] <= 1):
        problems.append("decoding.top_p must be null (not sent) or in (0, 1]")
    for pattern in data.get("refusal_patterns", []):
        try:
            re.compile(pattern)
        except re.error as exc:
            problems.append(f"bad refusal pattern {pattern!r}: {exc}")
    if problems:
        raise ValueError("queerbench/data/llm_prompts.json: " + "; ".join(problems))
    return data


def build_prompt(sentence: str, prompt_id: str | None = None) -> str:
    """The user message for one sentence: the instruction, then the sentence with its ``[MASK]`` in place."""
    data = load_prompts()
    pid = prompt_id or data["default_prompt"]
    if pid not in data["prompts"]:
        raise ValueError(f"unknown prompt id {pid!r}; choose one of {', '.join(data['prompts'])}")
    if sentence.count(MASK) != 1:
        raise ValueError(f"sentence {sentence!r} needs exactly one {MASK}")
    return data["prompts"][pid]["text"].replace("{sentence}", sentence)


# ------------------------------------------------------------------------------------------------------ parser ---
@dataclass(frozen=True)
class ParsedReply:
    """The word kept from a reply (``None`` unless ``label == "ok"``) and the reply's label."""

    word: str | None
    label: str


_SLOT = "␣MASK␣"  # what a literal [MASK] in a reply becomes: not a word, but marks an echo
_PLACEHOLDER = re.compile(r"\[MASK\]|\bMASK\b")  # upper case only: a reply "mask" is a word
_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.S | re.I)
_FENCE = re.compile(r"```[a-zA-Z]*")
_QUOTES = "\"'“”‘’`«»"
_EDGE = re.compile(rf"^[\s{_QUOTES}*_#>\[\](){{}}.,;:!?-]+|[\s{_QUOTES}*_#>\[\](){{}}.,;:!?…-]+$")


@functools.cache
def _patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    data = load_prompts()
    refusal = re.compile("|".join(f"(?:{p})" for p in data["refusal_patterns"]), re.I)
    leads = sorted(data["answer_prefixes"], key=len, reverse=True)
    lead = re.compile(
        r"^(?:" + "|".join(re.escape(x) for x in leads) + r")\s*[:=-]\s*|^(?:the answer is|the word is)\s+", re.I
    )
    return refusal, lead


def _clean(text: str) -> str:
    text = text.replace("**", "").replace("__", "")
    text = _EDGE.sub("", text.strip())
    return " ".join(text.split())


def _words(text: str) -> list[str]:
    return [w for w in (_EDGE.sub("", w) for w in text.split()) if w]


def _norm(text: str) -> list[str]:
    return [w.lower() for w in _words(text)]


def _one_word(text: str) -> str | None:
    _, lead = _patterns()
    text = _clean(lead.sub("", _clean(text)))
    if text and " " not in text and WORD.fullmatch(text):
        return text.lower()
    return None


def _cut_echo(line: str, before: str, after: str) -> tuple[bool, str | None]:
    """(the line echoes the sentence, the one word in its slot if there is one)."""
    words = _norm(line)
    pre, post = _norm(before), _norm(after)
    if not words or len(words) < 2:
        return False, None
    # the longest tail of the text before the blank that the line starts with ("a doctor" for "… is a [MASK].")
    m = next((n for n in range(len(pre), 0, -1) if words[:n] == pre[-n:]), 0)
    rest = words[m:]
    n = next((n for n in range(len(post), 0, -1) if rest[-n:] == post[:n]), 0)
    middle = rest[: len(rest) - n] if n else rest
    echoed = m > 0 or n > 0 or _SLOT in line
    if echoed and len(middle) == 1 and WORD.fullmatch(middle[0]):
        return True, middle[0]
    return echoed, None


def parse_reply(reply: str | None, sentence: str) -> ParsedReply:
    """Keep one word from a chat model's reply to the fill-in-the-blank prompt and label it (see the module doc)."""
    before, after = sentence.split(MASK) if sentence.count(MASK) == 1 else (sentence, "")
    text = _FENCE.sub("", _THINK.sub("", reply or "")).replace("`", "")
    text = _PLACEHOLDER.sub(f" {_SLOT} ", text)  # a [MASK] (or MASK) left in the reply is never a word
    lines = [ln for ln in (_clean(x) for x in text.splitlines()) if ln]
    if not lines:
        return ParsedReply(None, "empty")
    refusal, _ = _patterns()
    echoed = False
    for line in lines:  # the first line that gives one word wins ("doctor\n\nExplanation: …")
        word = _one_word(line)
        if word is not None:
            return ParsedReply(word, "ok")
        was_echo, word = _cut_echo(line, before, after)
        if word is not None:
            return ParsedReply(word, "ok")
        echoed = echoed or was_echo or _SLOT in line
    whole = " ".join(lines)
    if refusal.search(whole):
        return ParsedReply(None, "refusal")
    if echoed:
        return ParsedReply(None, "echo")
    return ParsedReply(None, "multi_word")


# -------------------------------------------------------------------------------------------------- prediction ---
def instructed_settings(k: int, seed: int, batch_size: int, max_new_tokens: int | None = None) -> Any:
    """The layer's decoding settings for top-``k``: greedy for k = 1, ``k`` samples at the data file's
    ``sample_temperature`` (1.0) otherwise."""
    from queerbench.models.generation import GenerationSettings

    dec = load_prompts()["decoding"]
    return GenerationSettings(
        temperature=float(dec["greedy_temperature"] if k == 1 else dec["sample_temperature"]),
        top_p=None if dec["top_p"] is None else float(dec["top_p"]),
        max_new_tokens=int(max_new_tokens or dec["max_new_tokens"]),
        seed=seed,
        samples=k,
        batch_size=batch_size,
    )


def instructed_request(prompt: str, sid: Any, sample: int, settings: Any, attempt: int = 0) -> Any:
    """The ``generate`` request of sample ``sample`` of sentence ``sid``; its re-ask ``attempt`` (an empty reply
    asked again) is a request of its own, under the seed ``seed + REASK_SEED_STEP · attempt + sample`` as sample 0,
    so that each re-ask has its own reply-cache entry and a rerun makes no call."""
    from queerbench.models.requests import Generate

    seed = settings.seed + REASK_SEED_STEP * attempt + sample if attempt else settings.seed
    return Generate(
        prompt,
        settings.max_new_tokens,
        settings.temperature,
        settings.top_p,
        seed,
        item=str(sid),
        sample=0 if attempt else sample,
    )


def _row(sid: Any, sentence: str, texts: list[str | None], reasks: int, prompt_format: str) -> dict[str, Any]:
    """One sentence's prediction row from its replies (sample order)."""
    parsed = [parse_reply(t, sentence) for t in texts]
    words = [p.word for p in parsed if p.label == "ok" and p.word]
    return {
        "id": sid,
        "tokens": words,
        "reply": ["" if t is None else t for t in texts],
        "label": [p.label for p in parsed],
        "n_distinct": len(set(words)),
        "reasks": reasks,
        "prompt_format": prompt_format,
    }


def predict_instructed(
    runner: Any,
    ids: Sequence[str],
    sentences: Sequence[str],
    settings: Any,
    cache: Any,
    *,
    prompt_id: str | None = None,
    reask_empty: bool = True,
    progress: Callable[[int], None] | None = None,
    show_progress: bool = True,
    streak: Any = None,
) -> pd.DataFrame:
    """Ask ``runner`` for ``settings.samples`` replies per sentence and parse them; one row per sentence.

    ``progress(n)`` is called as replies arrive, with ``n`` sentences' worth of them (the sentences whose replies
    all arrived, counted from the calls still to make), and with the rest once the replies are parsed; it adds up to
    ``len(ids)``. ``show_progress``: the layer's own bar of replies (off when the caller has a bar of its own);
    ``streak``: the :class:`~queerbench.models.generation.collect.ErrorStreak` of a run that asks in parts.

    Columns: ``id``, ``tokens`` (the ``ok`` words, sample order, duplicates kept), ``reply`` and ``label`` (one per
    sample), ``n_distinct`` (distinct ``ok`` words), ``reasks`` (extra calls made for empty replies), ``prompt_format``.
    Each sentence's samples are ``generate`` requests (:func:`instructed_request`) asked through the reply cache
    (:func:`~queerbench.models.generation.collect.ask_requests`); an empty reply is asked again with a new seed, up
    to ``empty_reasks`` times (from the data file), unless ``reask_empty`` is False. When some calls got no reply,
    every other call (re-asks included) is still made and then :class:`GenerationError` lists the failed ones; a
    rerun asks only those.
    """
    from queerbench.models.generation.collect import ask_requests
    from queerbench.models.generation.failures import FailedPrompt

    prompts = dict(zip(ids, (build_prompt(s, prompt_id) for s in sentences), strict=True))
    reported = 0

    def on_reply(done: int, total: int) -> None:  # at least this many sentences have all their replies
        nonlocal reported
        worth = len(ids) - -(-(total - done) // settings.samples)
        if progress is not None and worth > reported:
            progress(worth - reported)
            reported = worth

    calls = [(sid, s) for sid in ids for s in range(settings.samples)]
    got = ask_requests(
        runner,
        [instructed_request(prompts[sid], sid, s, settings) for sid, s in calls],
        cache,
        batch_size=settings.batch_size,
        progress=on_reply,
        show_progress=show_progress,
        streak=streak,
    )
    failures = [
        FailedPrompt(str(sid), s, str(r["error"])) for (sid, s), r in zip(calls, got, strict=True) if r["error"]
    ]
    replies: dict[tuple[str, int], str | None] = {}
    formats: dict[str, str] = {}
    for (sid, s), result in zip(calls, got, strict=True):
        if result["error"] is None:
            replies[(sid, s)] = result["response"]
            formats[sid] = (result["meta"] or {}).get("prompt_format", "") or ""
    by_id = dict(zip(ids, sentences, strict=True))
    reasks = dict.fromkeys(ids, 0)
    n_reasks = int(load_prompts()["decoding"]["empty_reasks"]) if reask_empty else 0
    for attempt in range(1, n_reasks + 1):
        empty = {key for key, text in replies.items() if parse_reply(text, by_id[key[0]]).label == "empty"}
        if not empty:
            break
        # one call per empty (sentence, sample), asked sample by sample in the sentences' order
        again = [(sid, s) for s in sorted({s for _, s in empty}) for sid in ids if (sid, s) in empty]
        more = ask_requests(
            runner,
            [instructed_request(prompts[sid], sid, s, settings, attempt) for sid, s in again],
            cache,
            batch_size=settings.batch_size,
            show_progress=show_progress,
            streak=streak,
        )
        for (sid, s), result in zip(again, more, strict=True):
            if result["error"] is None:
                replies[(sid, s)] = result["response"]
                reasks[sid] += 1
    if failures:  # the re-asks of the other sentences are made (and cached) first: a rerun asks only these
        raise GenerationError(failures, len(got))
    out = [
        _row(sid, sentence, [replies[(sid, s)] for s in range(settings.samples)], reasks[sid], formats.get(sid, ""))
        for sid, sentence in zip(ids, sentences, strict=True)
    ]
    if progress is not None and len(ids) > reported:
        progress(len(ids) - reported)
    return pd.DataFrame(out)


def parse_summary(predictions: pd.DataFrame) -> dict[str, Any]:
    """Parse and refusal rates per group (and overall) of an instructed run's ``predictions`` table.

    Per group: ``n`` replies, ``n_sentences``, the share of each label, ``n_scored`` (sentences with at least one
    ``ok`` word: the rows the group scores use) and ``mean_distinct`` (distinct ``ok`` words per sentence, k > 1).
    """
    out: dict[str, Any] = {"labels": list(LABELS), "groups": {}}

    def summary(frame: pd.DataFrame) -> dict[str, Any]:
        labels = [lab for row in frame["label"] for lab in row]
        n = len(labels)
        rates = {lab: (labels.count(lab) / n if n else None) for lab in LABELS}
        return {
            "n": n,
            "n_sentences": len(frame),
            "n_scored": int(sum(len(t) > 0 for t in frame["tokens"])),
            "parse_rate": rates["ok"],
            "refusal_rate": rates["refusal"],
            "rates": rates,
            "mean_distinct": float(frame["n_distinct"].mean()) if len(frame) else None,
            "reasks": int(frame["reasks"].sum()) if "reasks" in frame else 0,
        }

    for group, frame in predictions.groupby("group", sort=False):
        out["groups"][str(group)] = summary(frame)
    out["overall"] = summary(predictions)
    return out


def stream_instructed(
    collector: Any,
    ids: Sequence[str],
    sentences: Sequence[str],
    settings: Any,
    *,
    prompt_id: str | None = None,
    reask_empty: bool = True,
    tick: Callable[[int], None] | None = None,
) -> Iterator[dict[str, Any]]:
    """:func:`predict_instructed` streamed: every request of every sentence goes through one
    :class:`~queerbench.models.generation.collect.StreamCollector` (an endpoint's slots stay busy across the whole
    run), an empty reply is asked again as soon as it arrives (the same requests, seeds and cache entries as
    :func:`predict_instructed` makes), and each sentence's row is handed out the moment its last reply is in.

    A sentence with a call that got no reply is not handed out; once every other call was made, a
    :class:`GenerationError` lists the failed ones (a rerun asks only those).
    """
    from queerbench.models.generation.failures import FailedPrompt

    by_id = dict(zip(ids, sentences, strict=True))
    prompts = {sid: build_prompt(s, prompt_id) for sid, s in by_id.items()}
    n_reasks = int(load_prompts()["decoding"]["empty_reasks"]) if reask_empty else 0
    replies: dict[str, list[str | None]] = {sid: [None] * settings.samples for sid in ids}
    pending = dict.fromkeys(ids, settings.samples)
    reasks = dict.fromkeys(ids, 0)
    formats: dict[str, str] = {}
    failures: dict[str, list[FailedPrompt]] = {}
    for sid in ids:
        for sample in range(settings.samples):
            collector.ask((sid, sample, 0), instructed_request(prompts[sid], sid, sample, settings))
    for (sid, sample, attempt), result in collector.results():
        if result["error"] is not None:
            failures.setdefault(sid, []).append(FailedPrompt(str(sid), sample, str(result["error"])))
        else:
            if attempt:
                reasks[sid] += 1
            replies[sid][sample] = result["response"]
            formats[sid] = (result["meta"] or {}).get("prompt_format", "") or formats.get(sid, "")
            if attempt < n_reasks and parse_reply(result["response"], by_id[sid]).label == "empty":
                again = instructed_request(prompts[sid], sid, sample, settings, attempt + 1)
                collector.ask((sid, sample, attempt + 1), again)
                continue
        pending[sid] -= 1
        if pending[sid] or sid in failures:
            continue
        if tick is not None:
            tick(1)
        yield _row(sid, by_id[sid], replies[sid], reasks[sid], formats.get(sid, ""))
    if failures:
        raise GenerationError([f for sid in ids for f in failures.get(sid, [])], collector.asked)
