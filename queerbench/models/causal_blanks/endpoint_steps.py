"""A causal LM's top-k words for a blank on an OpenAI-compatible completions endpoint (vLLM, SGLang, TGI, llama.cpp's
server): how :class:`~queerbench.models.backends.endpoint.EndpointBackend` answers a top-k ``fill_mask`` request.

The three steps of the local engine (:mod:`queerbench.models.causal_blanks.local`), made of the calls
lm-evaluation-harness's ``local-completions`` model makes, with the server's own tokenizer (no local tokenizer is
needed):

1. **Propose**: the start token and the text before ``[MASK]`` with ``max_tokens: 1, logprobs: M`` give the top-``M``
   next tokens; the ``N = 4·k`` most likely *word-start* ones are kept (a token of a space and a whole word; at the
   very start of a sentence, a whole word without the space: the local engine's rules). When at least ``N`` of the
   ``M`` are word starts, they are exactly the local engine's candidates; ``n_proposed`` records how many a sentence
   got. ``M`` is ``5·N``, or ``N`` where the server caps ``logprobs`` below that (recorded).
2. **Extend** each candidate greedily to a whole word: the prompt plus the candidate with ``temperature: 0,
   max_tokens: 4``; the returned tokens that are alphabetic and carry no space continue the word, up to 4 tokens
   in all (a word still going on there is dropped).
3. **Rank** by the echoed log-probability (``echo: true, max_tokens: 1, logprobs: 1``) of the word's tokens and of
   every token after it, the final ``.`` included; :func:`queerbench.models.causal_blanks.blanks.rank_candidates`
   selects the top ``k`` distinct lowercased words and renormalises, as for a local model.

The start token, and whether the server can do this at all, are found first
(:func:`~queerbench.models.causal_blanks.endpoint_probe.probe`). A filled sentence is sent as text, so the server
scores it as its tokenizer splits it; the local engine scores the token path its greedy extension took. The two
agree whenever that path is the tokenizer's own split of the word (the tests check equality on such a model); two
paths that spell the same text are one candidate here.

This module holds the job each step asks, how its reply is read, and the two ways of asking them.
:func:`score_blanks_endpoint` asks a step at a time for a batch of sentences, one
:func:`~queerbench.models.generation.collect.collect` call per step; :func:`stream_blanks_endpoint` streams a run:
every sentence's calls flow through one :class:`~queerbench.models.generation.completions.JobStream`, a sentence's
extensions are asked as soon as its proposal is in and its rankings as soon as its extensions are, and its row comes
out the moment its last reply arrives, so one slow or retried request holds up its own sentences only. Both ask the
same jobs under the same cache keys (a run folder of either resumes with the other) and read each reply with the
same functions, so they give the same words; jobs of equal parameters share requests either way. Every call goes
through the reply cache, so a killed run resumes and a rerun with the same cache makes no completions call.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from queerbench.models.generation.cache import ResponseCache, cache_key
from queerbench.models.generation.collect import collect
from queerbench.models.generation.completions import CompletionsRunner, completion_job
from queerbench.models.generation.settings import EndpointError, GenerationSettings, MethodUnsupportedError, item_seed
from queerbench.models.masked.vocab_filter import WORD  # the whole-word rule of local `scored` and the masked-LM engine

if TYPE_CHECKING:
    from queerbench.models.causal_blanks.blanks import Candidate

__all__ = [
    "SETTINGS",
    "START_TEXT",
    "ServerReport",
    "ask_jobs",
    "echoed_span",
    "is_word_start",
    "mismatch_error",
    "score_blanks_endpoint",
    "stream_blanks_endpoint",
]

START_TEXT = "<|endoftext|>"
"""Sent before each prompt where the server adds no start token itself but reads this as one token."""
SETTINGS = GenerationSettings(temperature=0.0, top_p=None, max_new_tokens=1, seed=0, samples=1, batch_size=1)
"""Greedy; the request parameters that matter travel in each job (and so in its cache key)."""


@dataclass(frozen=True)
class ServerReport:
    """What :func:`~queerbench.models.causal_blanks.endpoint_probe.probe` found: the start text sent before each prompt, how it was chosen, the ``logprobs`` the
    propose call asks for, and the consistency check's figures."""

    start_text: str
    start: str  # "server" (its tokenizer adds one), "<|endoftext|>" or "none"
    logprobs: int
    check: dict[str, Any]


def ask_jobs(runner: CompletionsRunner, cache: ResponseCache, keys: Sequence[str], jobs: Sequence[str]) -> list[Any]:
    """Each job's record (a dict), or its error (a str), in order, through the cache."""
    import pandas as pd

    if not jobs:
        return []
    got = collect(runner, pd.DataFrame({"id": list(keys), "prompt": list(jobs)}), SETTINGS, cache)
    return [json.loads(r["response"]) if r["status"] == "ok" else str(r["error"]) for r in got.to_dict("records")]


def _records(runner: CompletionsRunner, cache: ResponseCache, keys: Sequence[str], jobs: Sequence[str]) -> list[dict]:
    """Like :func:`ask_jobs`, but a failed job stops the run in one line (its replies so far stay cached)."""
    return [_checked(runner.url, key, rec) for key, rec in zip(keys, ask_jobs(runner, cache, keys, jobs), strict=True)]


def _checked(url: str, name: str, record: dict | str) -> dict:
    """The record of job ``name``; a job that got no completion (``record`` is its error), or one without
    log-probabilities, stops the run in one line (the replies that arrived are cached: a rerun resumes)."""
    if isinstance(record, str):
        raise EndpointError(
            f"no completion for {name} from {url}: {record}; the replies that arrived are saved, rerun the same "
            "command to resume"
        )
    if record["tokens"] is None:
        raise EndpointError(f"{url} sent no log-probabilities for {name}; --method scored needs them")
    return record


def echoed_span(record: dict, tail: str) -> tuple[int, int] | None:
    """``(j, e)`` such that the echoed prompt tokens ``j..e-1`` spell ``tail`` and end the prompt (``e`` leaves out
    the one generated token; a server that generated none has ``e`` at the end)."""
    tokens = record["tokens"] or []
    for end in (len(tokens) - 1, len(tokens)):
        text = ""
        for j in range(end - 1, -1, -1):
            text = tokens[j] + text
            if text == tail:
                return j, end
            if len(text) >= len(tail) or not tail.endswith(text):
                break
    return None


def mismatch_error(url: str, sent: str, record: dict) -> EndpointError:
    """The one line for a server that echoed other tokens than the text ``sent``: its log-probabilities are not for
    that text, so nothing can be scored with them."""
    shown = "".join(record["tokens"] or [])[:120]
    return MethodUnsupportedError(
        f"{url} echoed other tokens than the prompt it was sent ({sent[-60:]!r} came back as {shown[-80:]!r}): its "
        "log-probabilities are not for this text (a tokenizer mismatch), so nothing is scored; check the server's "
        "model and tokenizer, or use --method instructed"
    )


def is_word_start(token: str, at_start: bool) -> bool:
    """Local ``scored``'s candidate rule on the server's token text: a space and a whole word (at the very start of a
    sentence, a whole word without the space)."""
    if at_start:
        return not token[:1].isspace() and WORD.fullmatch(token) is not None
    return token[:1] == " " and WORD.fullmatch(token[1:]) is not None


def _blanks(url: str, report: ServerReport, sentences: Sequence[str]) -> list[tuple[str, str]]:
    """Each sentence's text before and after its blank; a blank at the very start of a sentence on a server without
    a start token is refused in one line, before any call."""
    from queerbench.models.causal_blanks.blanks import split_blank

    parts = [split_blank(s) for s in sentences]
    for sentence, (before, _) in zip(sentences, parts, strict=True):
        if not before and report.start == "none":
            raise EndpointError(
                f"{url} adds no start token and does not read {START_TEXT} as one, so the blank at the start "
                f"of {sentence!r} has nothing to be proposed from; score such sentences with a local model"
            )
    return parts


def _proposals(record: dict, at_start: bool, n_first: int) -> list[str]:
    """Step 1's candidates from a propose reply: its ``n_first`` most likely word-start tokens."""
    top = (record["top_logprobs"] or [None])[0] or {}
    ranked = sorted(top.items(), key=lambda kv: -float(kv[1]))
    return [t for t, _ in ranked if is_word_start(t, at_start)][:n_first]


def _grown(first: str, record: dict, cap: int) -> tuple[str, int] | None:
    """Step 2: candidate ``first`` extended by the alphabetic, space-free tokens of its greedy continuation, as
    ``(word text as sent, its number of tokens)``; None for a word still unfinished at ``cap`` tokens, or no word."""
    pieces = [first]
    for token in record["tokens"]:
        if not token.isalpha():
            break
        if len(pieces) >= cap:
            return None  # still unfinished at the cap: not a whole word
        pieces.append(token)
    text = "".join(pieces)
    return (text, len(pieces)) if WORD.fullmatch(text.strip()) else None


def _words(firsts: Sequence[str], records: Sequence[dict], cap: int) -> dict[str, int]:
    """A sentence's candidate words (text as sent → number of tokens), in its candidates' order; two that spell the
    same text are one."""
    words: dict[str, int] = {}
    for first, record in zip(firsts, records, strict=True):
        grown = _grown(first, record, cap)
        if grown is not None:
            words.setdefault(*grown)
    return words


def _candidate(url: str, word: str, n_tokens: int, parts: tuple[str, str], sent: str, record: dict) -> Candidate:
    """Step 3: the candidate ``word`` scored by the echoed log-probabilities of its tokens and of the text after the
    blank (``sent`` is the filled text that was asked); echoed tokens that do not spell it stop the run in one line."""
    from queerbench.models.causal_blanks.blanks import Candidate

    before, after = parts
    where = echoed_span(record, word + after)
    values = None if where is None else record["token_logprobs"][where[0] : where[1]]
    if (
        where is None
        or not values
        or any(v is None for v in values)
        or not "".join(record["tokens"][: where[0]]).endswith(before)
    ):
        raise mismatch_error(url, sent, record)
    # word_ids: only their number is read (n_word_tokens); the server's token ids are not known here
    return Candidate(word.strip(), tuple(range(n_tokens)), (), float(sum(values)))


COLUMNS = ("tokens", "probs", "logprobs", "n_word_tokens", "n_proposed")
"""A sentence's prediction columns."""


def _row(candidates: list[Candidate], k: int, n_proposed: int) -> dict[str, Any]:
    """One sentence's prediction columns from its scored candidates."""
    from queerbench.models.causal_blanks.blanks import rank_candidates

    return dict(zip(COLUMNS, (*rank_candidates(candidates, k), n_proposed), strict=True))


def _limits(k: int, candidates_per_k: int | None, max_word_tokens: int | None) -> tuple[int, int]:
    """``(N, cap)``: candidates per sentence and the most tokens a word may take (local ``scored``'s defaults)."""
    from queerbench.models.causal_blanks.blanks import CANDIDATES_PER_K, MAX_WORD_TOKENS

    return (candidates_per_k or CANDIDATES_PER_K) * k, max_word_tokens or MAX_WORD_TOKENS


def score_blanks_endpoint(
    runner: CompletionsRunner,
    cache: ResponseCache,
    report: ServerReport,
    ids: Sequence[str],
    sentences: Sequence[str],
    k: int,
    *,
    candidates_per_k: int | None = None,
    max_word_tokens: int | None = None,
) -> dict[str, list]:
    """Top-``k`` words per sentence (see the module doc): ``tokens``, ``probs``, ``logprobs``, ``n_word_tokens`` as
    local ``scored`` gives them, and ``n_proposed`` (word-start candidates among the top ``M``). The batch form:
    each step is one :func:`~queerbench.models.generation.collect.collect` call for every sentence."""
    n_first, cap = _limits(k, candidates_per_k, max_word_tokens)
    parts = _blanks(runner.url, report, sentences)
    head = [report.start_text + before for before, _ in parts]
    proposed = _records(
        runner, cache, [f"{i}/propose" for i in ids],
        [completion_job(h, max_tokens=1, logprobs=report.logprobs) for h in head],
    )  # fmt: skip
    firsts = [_proposals(rec, not before, n_first) for (before, _), rec in zip(parts, proposed, strict=True)]
    flat = [(s, t) for s, ts in enumerate(firsts) for t in ts]
    grown = _records(
        runner, cache, [f"{ids[s]}/extend/{t}" for s, t in flat],
        [completion_job(head[s] + t, max_tokens=cap, logprobs=1) for s, t in flat],
    )  # fmt: skip
    at = 0
    words: list[dict[str, int]] = []  # sentence → {word text as sent: its tokens}
    for ts in firsts:
        words.append(_words(ts, grown[at : at + len(ts)], cap))
        at += len(ts)
    flat_words = [(s, w) for s in range(len(sentences)) for w in words[s]]
    sent = [head[s] + w + parts[s][1] for s, w in flat_words]
    echoed = _records(
        runner, cache, [f"{ids[s]}/rank/{w}" for s, w in flat_words],
        [completion_job(text, max_tokens=1, logprobs=1, echo=True) for text in sent],
    )  # fmt: skip
    cands: list[list[Candidate]] = [[] for _ in sentences]
    for (s, w), text, rec in zip(flat_words, sent, echoed, strict=True):
        cands[s].append(_candidate(runner.url, w, words[s][w], parts[s], text, rec))
    rows = [_row(c, k, len(f)) for c, f in zip(cands, firsts, strict=True)]
    return {column: [row[column] for row in rows] for column in COLUMNS}


PROPOSE, EXTEND, RANK = 0, 1, 2
"""The steps a reply answers (in the tags of :func:`stream_blanks_endpoint`'s jobs)."""


@dataclass
class _Blank:
    """One sentence on its way through the three steps: what it has so far, and how many replies of its current
    step are still to come (``left``; 0 once its row is ready)."""

    id: str
    parts: tuple[str, str]
    head: str
    firsts: list[str] = field(default_factory=list)
    grown: list[dict] = field(default_factory=list)
    words: dict[str, int] = field(default_factory=dict)
    candidates: list[Candidate | None] = field(default_factory=list)
    left: int = 1

    def proposed(self, record: dict, n_first: int, cap: int) -> list[tuple[str, str]]:
        """Its propose reply is in: the extend jobs to ask, as ``(name, job)``."""
        self.firsts = _proposals(record, not self.parts[0], n_first)
        self.grown, self.left = [{}] * len(self.firsts), len(self.firsts)
        if not self.firsts:
            return self._rank_jobs(cap)  # none: no word, nothing to ask, its row is ready
        return [
            (f"{self.id}/extend/{t}", completion_job(self.head + t, max_tokens=cap, logprobs=1)) for t in self.firsts
        ]

    def extended(self, j: int, record: dict, cap: int) -> list[tuple[str, str]]:
        """Its ``j``-th extension is in: once every one is, the rank jobs to ask."""
        self.grown[j] = record
        self.left -= 1
        return self._rank_jobs(cap) if self.left == 0 else []

    def _rank_jobs(self, cap: int) -> list[tuple[str, str]]:
        self.words = _words(self.firsts, self.grown, cap)
        self.candidates, self.left = [None] * len(self.words), len(self.words)
        return [
            (f"{self.id}/rank/{w}", completion_job(self._filled(w), max_tokens=1, logprobs=1, echo=True))
            for w in self.words
        ]

    def _filled(self, word: str) -> str:
        return self.head + word + self.parts[1]

    def ranked(self, url: str, j: int, record: dict) -> None:
        """Its ``j``-th ranking is in."""
        word = list(self.words)[j]
        self.candidates[j] = _candidate(url, word, self.words[word], self.parts, self._filled(word), record)
        self.left -= 1

    def row(self, k: int) -> dict[str, Any]:
        """Its prediction columns (every reply is in)."""
        return _row([c for c in self.candidates if c is not None], k, len(self.firsts))


class _Jobs:
    """The jobs of a streamed run, each asked once through the reply cache, as
    :func:`~queerbench.models.generation.collect.collect` asks them (the same cache key, row id, seed and stored
    reply): :meth:`ask` a job at any time, :meth:`results` hands out each job's checked record as it arrives, under
    the tag it was asked with. A cached job is answered at once and makes no request; a job already waiting for its
    reply (two sentences with the same text before the blank) is asked once and answers both; each reply is stored
    the moment it arrives. A job that gets no completion stops the run in one line (:func:`_checked`)."""

    def __init__(self, runner: CompletionsRunner, cache: ResponseCache) -> None:
        self.url, self.cache = runner.url, cache
        self._fingerprint, self._decoding = runner.fingerprint(), SETTINGS.decoding()
        self._stream = runner.open_jobs(SETTINGS)
        self._ready: deque[tuple[Any, str, dict | str]] = deque()
        self._waiting: dict[str, list[tuple[Any, str]]] = {}

    def ask(self, tag: Any, name: str, job: str, *, order: Any) -> None:
        """Ask ``job`` for the row ``name`` (its record comes out under ``tag``); jobs of a lower ``order`` are sent
        first."""
        key = cache_key(self._fingerprint, job, 0, self._decoding)
        hit = self.cache.get(key)
        if hit is not None:
            self._ready.append((tag, name, json.loads(hit["text"])))
        elif key in self._waiting:
            self._waiting[key].append((tag, name))
        else:
            self._waiting[key] = [(tag, name)]
            self._stream.submit(key, job, item_seed(SETTINGS.seed, name, 0), order=order)

    def results(self) -> Iterator[tuple[Any, dict]]:
        """``(tag, record)`` of every job asked so far (jobs asked while iterating included) as it is answered."""
        while True:
            yield from self._take_ready()
            if not self._waiting:
                return
            for job_key, reply in self._stream.replies():
                key = str(job_key)  # a cache key, as ask() submitted it (the stream keeps any hashable)
                askers = self._waiting.pop(key)
                if reply.error is None and reply.text is not None:
                    self.cache.put(key, askers[0][1], 0, reply.text, reply.meta)
                    record: dict | str = json.loads(reply.text)
                else:
                    record = reply.error or "no reply"
                self._ready.extend((tag, name, record) for tag, name in askers)
                yield from self._take_ready()

    def _take_ready(self) -> Iterator[tuple[Any, dict]]:
        while self._ready:
            tag, name, record = self._ready.popleft()
            yield tag, _checked(self.url, name, record)

    def close(self) -> None:
        """Stop the stream's workers."""
        self._stream.stop()


def stream_blanks_endpoint(
    runner: CompletionsRunner,
    cache: ResponseCache,
    report: ServerReport,
    ids: Sequence[str],
    sentences: Sequence[str],
    k: int,
    *,
    candidates_per_k: int | None = None,
    max_word_tokens: int | None = None,
) -> Iterator[tuple[str, dict[str, Any]]]:
    """:func:`score_blanks_endpoint` streamed (see the module doc): ``(id, columns)`` of each sentence the moment its
    last reply is in, in the order they finish; the calls of every sentence flow through one stream of requests, a
    sentence's next step is asked as soon as its previous one is in, and earlier sentences' jobs are sent first.
    A job that gets no completion, and echoed tokens that do not spell the text, stop it in one line."""
    n_first, cap = _limits(k, candidates_per_k, max_word_tokens)
    blanks = [
        _Blank(sid, parts, report.start_text + parts[0])
        for sid, parts in zip(ids, _blanks(runner.url, report, sentences), strict=True)
    ]
    jobs = _Jobs(runner, cache)
    try:
        for s, blank in enumerate(blanks):
            job = completion_job(blank.head, max_tokens=1, logprobs=report.logprobs)
            jobs.ask((s, PROPOSE, 0), f"{blank.id}/propose", job, order=s)
        for (s, step, j), record in jobs.results():
            blank = blanks[s]
            if step == PROPOSE:
                more = blank.proposed(record, n_first, cap)
            elif step == EXTEND:
                more = blank.extended(j, record, cap)
            else:
                blank.ranked(runner.url, j, record)
                more = []
            for n, (name, job) in enumerate(more):  # a step's jobs answer the next step
                jobs.ask((s, step + 1, n), name, job, order=s)
            if blank.left == 0:
                yield blank.id, blank.row(k)
    finally:
        jobs.close()
