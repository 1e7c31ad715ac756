"""The ``scored`` method over an OpenAI-compatible completions endpoint (vLLM, SGLang, TGI, llama.cpp's server).

The three steps of local ``scored`` (:mod:`queerbench.methods.scored.local`), made of the calls lm-evaluation-harness's
``local-completions`` model makes, with the server's own tokenizer (no local tokenizer is needed):

1. **Propose**: the start token and the text before ``[MASK]`` with ``max_tokens: 1, logprobs: M`` give the top-``M``
   next tokens; the ``N = 4·k`` most likely *word-start* ones are kept (a token of a space and a whole word; at the
   very start of a sentence, a whole word without the space: the rules of local ``scored``). When at least ``N``
   of the ``M`` are word starts, they are exactly local ``scored``'s candidates; ``n_proposed`` records how many a
   sentence got. ``M`` is ``5·N``, or ``N`` where the server caps ``logprobs`` below that (recorded).
2. **Extend** each candidate greedily to a whole word: the prompt plus the candidate with ``temperature: 0,
   max_tokens: 4``; the returned tokens that are alphabetic and carry no space continue the word, up to 4 tokens
   in all (a word still going on there is dropped).
3. **Rank** by the echoed log-probability (``echo: true, max_tokens: 1, logprobs: 1``) of the word's tokens and of
   every token after it, the final ``.`` included; :func:`queerbench.methods.scored.local._rank` selects the top ``k`` distinct
   lowercased words and renormalises, as for a local model.

The start token follows local ``scored``'s rule: the one the server's tokenizer adds itself, else
``<|endoftext|>`` when the server reads it as one token, else none (then a blank at the very start of a sentence
cannot be proposed, and is refused). A filled sentence is sent as text, so the server scores it as its tokenizer
splits it; local ``scored`` scores the token path its greedy extension took. The two agree whenever that path is
the tokenizer's own split of the word (the tests check equality on such a model); two paths that spell the same
text are one candidate here.

Before any work :func:`probe` checks, in two rounds of calls (three where ``logprobs`` is capped), that the server
echoes prompt log-probabilities, that a token's echoed log-probability equals the next-token log-probability it
gives for the same prefix (to :data:`CONSISTENCY_TOLERANCE`; llama.cpp's server fails this), and that it echoes the
very token it proposed. Each failure is one line. Every call goes through :func:`~queerbench.models.generation.collect.collect`
and the reply cache, so a killed run resumes and a rerun with the same cache makes no completions call.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from queerbench.methods.base import Pacing, Rows, predict_in_parts
from queerbench.models.generation.cache import ResponseCache
from queerbench.models.generation.collect import collect
from queerbench.models.generation.completions import CompletionsRunner, completion_job
from queerbench.models.generation.settings import EndpointError, GenerationSettings
from queerbench.models.masked.vocab_filter import WORD  # the whole-word rule of local `scored` and the masked-LM engine

__all__ = [
    "CONSISTENCY_TOLERANCE",
    "PROBE_PREFIX",
    "EndpointScoredPredictor",
    "ServerReport",
    "probe",
    "score_blanks_endpoint",
]

PROBE_PREFIX = "The person is a"
"""The text the server is probed with (its next token, then that token echoed)."""
CONSISTENCY_TOLERANCE = 1e-3
"""Largest accepted gap between a token's echoed and next-token log-probabilities."""
START_TEXT = "<|endoftext|>"
PROPOSE_FACTOR = 5
"""The propose call asks for ``PROPOSE_FACTOR · N`` next tokens, so that ``N`` word starts are among them."""
SETTINGS = GenerationSettings(temperature=0.0, top_p=None, max_new_tokens=1, seed=0, samples=1, batch_size=1)
"""Greedy; the request parameters that matter travel in each job (and so in its cache key)."""


@dataclass(frozen=True)
class ServerReport:
    """What :func:`probe` found: the start text sent before each prompt, how it was chosen, the ``logprobs`` the
    propose call asks for, and the consistency check's figures."""

    start_text: str
    start: str  # "server" (its tokenizer adds one), "<|endoftext|>" or "none"
    logprobs: int
    check: dict[str, Any]


def _ask(runner: CompletionsRunner, cache: ResponseCache, keys: Sequence[str], jobs: Sequence[str]) -> list[Any]:
    """Each job's record (a dict), or its error (a str), in order, through the cache."""
    import pandas as pd

    if not jobs:
        return []
    got = collect(runner, pd.DataFrame({"id": list(keys), "prompt": list(jobs)}), SETTINGS, cache)
    return [json.loads(r["response"]) if r["status"] == "ok" else str(r["error"]) for r in got.to_dict("records")]


def _records(runner: CompletionsRunner, cache: ResponseCache, keys: Sequence[str], jobs: Sequence[str]) -> list[dict]:
    """Like :func:`_ask`, but a failed job stops the run in one line (its replies so far stay cached)."""
    out = _ask(runner, cache, keys, jobs)
    for key, rec in zip(keys, out, strict=True):
        if isinstance(rec, str):
            raise EndpointError(
                f"no completion for {key} from {runner.url}: {rec}; the replies that arrived are saved, rerun the "
                "same command to resume"
            )
        if rec["tokens"] is None:
            raise EndpointError(f"{runner.url} sent no log-probabilities for {key}; --method scored needs them")
    return out


def _span(record: dict, tail: str) -> tuple[int, int] | None:
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


def _mismatch(url: str, sent: str, record: dict) -> EndpointError:
    shown = "".join(record["tokens"] or [])[:120]
    return EndpointError(
        f"{url} echoed other tokens than the prompt it was sent ({sent[-60:]!r} came back as {shown[-80:]!r}): its "
        "log-probabilities are not for this text (a tokenizer mismatch), so nothing is scored; check the server's "
        "model and tokenizer, or use --method instructed"
    )


def _no_echo(url: str, problem: str) -> EndpointError:
    return EndpointError(
        f"{url} {problem}; --method scored ranks words by the log-probabilities of the prompt's own tokens (echo), "
        "which this server does not give: use --method instructed"
    )


def probe(
    runner: CompletionsRunner, cache: ResponseCache, n_first: int, *, logprobs: int | None = None
) -> ServerReport:
    """Check the server before any scoring (see the module doc); one-line :class:`EndpointError` for each failure."""
    url = runner.url
    wanted = logprobs or PROPOSE_FACTOR * n_first
    heads = (PROBE_PREFIX, START_TEXT + PROBE_PREFIX)
    # one round trip for what the next steps choose from: each head echoed, and each head's next tokens
    jobs = [completion_job(h, max_tokens=1, logprobs=1, echo=True) for h in heads]
    jobs += [completion_job(h, max_tokens=1, logprobs=wanted) for h in heads]
    plain, marked, *proposals = _ask(runner, cache, ["probe/echo", "probe/start", "probe/plain", "probe/marked"], jobs)
    if isinstance(plain, str):
        raise _no_echo(url, f"refused a prompt with echo and logprobs ({plain})")
    if plain["tokens"] is None:
        raise _no_echo(url, "sent no log-probabilities for an echoed prompt")
    span = _span(plain, PROBE_PREFIX)
    if span is None:
        raise (
            _no_echo(url, "did not echo the prompt's tokens")
            if len(plain["tokens"]) <= 1
            else _mismatch(url, PROBE_PREFIX, plain)
        )
    found = None if isinstance(marked, str) or marked["tokens"] is None else _span(marked, PROBE_PREFIX)
    if plain["token_logprobs"][span[0]] is not None:
        start_text, start = "", "server"  # its tokenizer put a start token before the text
    elif found is not None and found[0] == 1 and marked["token_logprobs"][1] is not None:
        start_text, start = START_TEXT, START_TEXT  # read as one token
    else:
        start_text, start = "", "none"
    propose_prompt = start_text + PROBE_PREFIX
    nxt = proposals[0] if start_text == "" else proposals[1]
    if isinstance(nxt, str) and wanted > n_first:
        wanted = n_first  # a server that caps logprobs: propose from the top N (recorded)
        (nxt,) = _ask(runner, cache, ["probe/propose"], [completion_job(propose_prompt, max_tokens=1, logprobs=wanted)])
    top = None if isinstance(nxt, str) or not nxt["top_logprobs"] else nxt["top_logprobs"][0]
    if not isinstance(top, dict) or len(top) < n_first:
        said = nxt if isinstance(nxt, str) else f"it returned {0 if not isinstance(top, dict) else len(top)}"
        raise EndpointError(
            f"{url} does not give the top {n_first} next-token log-probabilities that --method scored needs for "
            f"--top-k {n_first // 4} (4 candidates per word; {said}): raise the server's cap (vLLM: vllm serve MODEL "
            f"--max-logprobs {PROPOSE_FACTOR * n_first}) or lower --top-k"
        )
    # the most likely word start is checked (the kind of token scoring reads), else the greedy token
    starts = sorted((t for t in top if _word_start(t, False)), key=lambda t: -float(top[t]))
    token, next_lp = (starts[0], float(top[starts[0]])) if starts else (nxt["tokens"][0], nxt["token_logprobs"][0])
    sent = propose_prompt + token
    (back,) = _ask(runner, cache, ["probe/consistency"], [completion_job(sent, max_tokens=1, logprobs=1, echo=True)])
    if isinstance(back, str) or back["tokens"] is None:
        raise _no_echo(url, f"refused an echoed prompt ({back if isinstance(back, str) else 'no log-probabilities'})")
    where = _span(back, token)
    if where is None or where[1] - where[0] != 1 or back["token_logprobs"][where[0]] is None:
        raise _mismatch(url, sent, back)
    echoed = back["token_logprobs"][where[0]]
    gap = abs(echoed - next_lp)
    check = {
        "prefix": PROBE_PREFIX,
        "token": token,
        "next_token_logprob": next_lp,
        "echoed_logprob": echoed,
        "tolerance": CONSISTENCY_TOLERANCE,
    }
    if gap > CONSISTENCY_TOLERANCE:
        raise EndpointError(
            f"{url} failed the log-probability consistency check: {token!r} after {PROBE_PREFIX!r} has log-probability "
            f"{next_lp:.4f} as the next token but {echoed:.4f} echoed in the prompt (gap {gap:.4f} > "
            f"{CONSISTENCY_TOLERANCE:g}), so its prompt log-probabilities cannot rank words; use --method instructed, "
            "or serve the model with an engine that passes (vLLM)"
        )
    return ServerReport(start_text, start, min(wanted, len(top)), check)


def _word_start(token: str, at_start: bool) -> bool:
    """Local ``scored``'s candidate rule on the server's token text: a space and a whole word (at the very start of a
    sentence, a whole word without the space)."""
    if at_start:
        return not token[:1].isspace() and WORD.fullmatch(token) is not None
    return token[:1] == " " and WORD.fullmatch(token[1:]) is not None


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
    local ``scored`` gives them, and ``n_proposed`` (word-start candidates among the top ``M``)."""
    from queerbench.methods.scored.local import CANDIDATES_PER_K, MAX_WORD_TOKENS, Candidate, _rank, split_blank

    n_first = (candidates_per_k or CANDIDATES_PER_K) * k
    cap = max_word_tokens or MAX_WORD_TOKENS
    parts = [split_blank(s) for s in sentences]
    for sentence, (before, _) in zip(sentences, parts, strict=True):
        if not before and report.start == "none":
            raise EndpointError(
                f"{runner.url} adds no start token and does not read {START_TEXT} as one, so the blank at the start "
                f"of {sentence!r} has nothing to be proposed from; score such sentences with a local model"
            )
    head = [report.start_text + before for before, _ in parts]
    proposed = _records(
        runner, cache, [f"{i}/propose" for i in ids],
        [completion_job(h, max_tokens=1, logprobs=report.logprobs) for h in head],
    )  # fmt: skip
    firsts: list[list[str]] = []
    for (before, _), rec in zip(parts, proposed, strict=True):
        top = (rec["top_logprobs"] or [None])[0] or {}
        ranked = sorted(top.items(), key=lambda kv: -float(kv[1]))
        firsts.append([t for t, _ in ranked if _word_start(t, not before)][:n_first])
    flat = [(s, t) for s, ts in enumerate(firsts) for t in ts]
    grown = _records(
        runner, cache, [f"{ids[s]}/extend/{t}" for s, t in flat],
        [completion_job(head[s] + t, max_tokens=cap, logprobs=1) for s, t in flat],
    )  # fmt: skip
    words: list[dict[str, int]] = [{} for _ in sentences]  # sentence → {word text as sent: its tokens}
    for (s, first), rec in zip(flat, grown, strict=True):
        pieces = [first]
        for token in rec["tokens"]:
            if not token.isalpha():
                break
            if len(pieces) >= cap:
                pieces = []  # still unfinished at the cap: not a whole word
                break
            pieces.append(token)
        text = "".join(pieces)
        if pieces and WORD.fullmatch(text.strip()):
            words[s].setdefault(text, len(pieces))
    flat_words = [(s, w) for s in range(len(sentences)) for w in words[s]]
    sent = [head[s] + w + parts[s][1] for s, w in flat_words]
    echoed = _records(
        runner, cache, [f"{ids[s]}/rank/{w}" for s, w in flat_words],
        [completion_job(text, max_tokens=1, logprobs=1, echo=True) for text in sent],
    )  # fmt: skip
    cands: list[list[Any]] = [[] for _ in sentences]
    for (s, w), text, rec in zip(flat_words, sent, echoed, strict=True):
        where = _span(rec, w + parts[s][1])
        values = None if where is None else rec["token_logprobs"][where[0] : where[1]]
        if not values or any(v is None for v in values) or not "".join(rec["tokens"][: where[0]]).endswith(parts[s][0]):
            raise _mismatch(runner.url, text, rec)
        # word_ids: only their number is read (n_word_tokens); the server's token ids are not known here
        cands[s].append(Candidate(w.strip(), tuple(range(words[s][w])), (), float(sum(values))))
    ranked = [_rank(c, k) for c in cands]
    return {
        "tokens": [r[0] for r in ranked],
        "probs": [r[1] for r in ranked],
        "logprobs": [r[2] for r in ranked],
        "n_word_tokens": [r[3] for r in ranked],
        "n_proposed": [len(f) for f in firsts],
    }


class EndpointScoredPredictor:
    """``scored`` on a completions endpoint, with the interface of the local
    :class:`~queerbench.methods.scored.predictor.ScoredPredictor` (the registry's :class:`~queerbench.methods.registry.Predictor`:
    ``from_options``, ``metadata()``, ``predict(ids, sentences, tick)``, ``close()``).

    Loading identifies the server (``GET /models``, ``GET /version`` where it answers) and runs :func:`probe`, whose
    replies are cached in ``probe.sqlite`` next to ``cache_path``; the reply cache at ``cache_path`` is opened for
    each :meth:`predict` call only.
    """

    method = "scored"

    def __init__(
        self,
        model: str,
        *,
        endpoint: str,
        top_k: int,
        cache_path: Path,
        concurrency: int = 8,
        requests_per_minute: float | None = 600.0,
        prompts_per_request: int = 16,
        logprobs: int | None = None,
        log: Callable[[str], None] = print,
        **runner_options: Any,
    ) -> None:
        from queerbench.methods.scored.local import CANDIDATES_PER_K

        self.model_id, self.top_k, self.cache_path = model, top_k, Path(cache_path)
        self.runner = CompletionsRunner(
            endpoint,
            model,
            concurrency=concurrency,
            requests_per_minute=requests_per_minute,
            prompts_per_request=prompts_per_request,
            **runner_options,
        )
        self.runner.served = identify(self.runner)
        # the probe's replies go to a file of their own next to the reply cache, removed when the probe fails: a
        # refused server leaves no replies that would make the run folder look resumable
        probe_path = self.cache_path.with_name("probe.sqlite")
        try:
            with ResponseCache(probe_path) as cache:
                self.report = probe(self.runner, cache, CANDIDATES_PER_K * top_k, logprobs=logprobs)
        except BaseException:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{probe_path}{suffix}").unlink(missing_ok=True)
            raise
        asked = logprobs or PROPOSE_FACTOR * CANDIDATES_PER_K * top_k
        if self.report.logprobs < asked:
            log(
                f"note: {self.runner.url} caps logprobs below {asked}: candidates come from its top "
                f"{self.report.logprobs} next tokens (vLLM: --max-logprobs {asked} lifts this)"
            )
        self.fingerprint = {**self.runner.fingerprint(), "start": self.report.start, "logprobs": self.report.logprobs}

    @staticmethod
    def preflight(options: Any) -> None:
        """Nothing to check before the server is asked: loading probes it (two rounds of calls) before any work."""

    @classmethod
    def from_options(
        cls, options: Any, *, cache_path: Path, log: Callable[[str], None] = print, **_: Any
    ) -> EndpointScoredPredictor:
        """The predictor for a run's ``options`` (``--endpoint URL --model NAME --method scored``)."""
        return cls(
            options.model,
            endpoint=options.endpoint,
            top_k=options.top_k,
            cache_path=cache_path,
            concurrency=options.concurrency,
            requests_per_minute=options.requests_per_minute,
            log=log,
        )

    def stream(
        self, ids: Sequence[str], sentences: Sequence[str], tick: Callable[[int], None], pacing: Pacing
    ) -> Iterator[Rows]:
        """A batch of sentences at a time (:func:`~queerbench.methods.base.predict_in_parts`)."""
        return predict_in_parts(self, ids, sentences, tick, pacing)

    def close(self) -> None:
        """Nothing stays open between calls (the reply cache is opened per :meth:`predict`)."""

    def metadata(self) -> dict[str, Any]:
        """Method, endpoint and what the server reported, the probe's figures, the scoring settings."""
        from queerbench.methods.scored.local import CANDIDATES_PER_K, MAX_WORD_TOKENS

        return {
            "method": self.method,
            "model": self.model_id,
            "endpoint": self.runner.base_url,
            "fingerprint": self.fingerprint,
            "runner": self.runner.fingerprint(),
            "start_token": self.report.start,
            "consistency_check": self.report.check,
            "device": None,
            "decoding": {
                "candidates": CANDIDATES_PER_K * self.top_k,
                "candidates_per_k": CANDIDATES_PER_K,
                "max_word_tokens": MAX_WORD_TOKENS,
                "propose_logprobs": self.report.logprobs,
                "ranking": "echoed log P(word + text after the blank | start token + text before the blank), summed",
                "prompt_format": "raw",
            },
        }

    def predict(self, ids: Sequence[str], sentences: Sequence[str], tick: Callable[[int], None]) -> dict[str, list]:
        """tokens, probs, logprobs, n_word_tokens (as local ``scored``) and n_proposed, in the sentences' order."""
        with ResponseCache(self.cache_path) as cache:
            out = score_blanks_endpoint(self.runner, cache, self.report, ids, sentences, self.top_k)
        tick(len(sentences))
        return out


def identify(runner: CompletionsRunner) -> dict[str, Any]:
    """What the server says about the served model (``GET /models``: its entry's id, root, owner, context length;
    ``GET /version``: the engine's version where it answers). Start times and the like are left out, so that a
    restarted server serving the same model resumes a run."""
    listed = runner.get_json("models")
    entries = listed.get("data") if isinstance(listed, dict) else None
    entries = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
    entry = next((e for e in entries if e.get("id") == runner.model_name), entries[0] if len(entries) == 1 else {})
    served: dict[str, Any] = {k: entry[k] for k in ("id", "root", "owned_by", "max_model_len") if k in entry}
    version = runner.get_json("/version")
    if isinstance(version, dict) and isinstance(version.get("version"), str):
        served["version"] = version["version"]
    return served
