"""The ``scored`` method over an OpenAI-compatible completions endpoint (vLLM, SGLang, TGI, llama.cpp's server).

The three steps of local ``scored`` (:mod:`queerbench.models.causal_blanks.local`), made of the calls
lm-evaluation-harness's ``local-completions`` model makes, with the server's own tokenizer (no local tokenizer is
needed):

1. **Propose**: the start token and the text before ``[MASK]`` with ``max_tokens: 1, logprobs: M`` give the top-``M``
   next tokens; the ``N = 4·k`` most likely *word-start* ones are kept (a token of a space and a whole word; at the
   very start of a sentence, a whole word without the space: the rules of local ``scored``). When at least ``N``
   of the ``M`` are word starts, they are exactly local ``scored``'s candidates; ``n_proposed`` records how many a
   sentence got. ``M`` is ``5·N``, or ``N`` where the server caps ``logprobs`` below that (recorded).
2. **Extend** each candidate greedily to a whole word: the prompt plus the candidate with ``temperature: 0,
   max_tokens: 4``; the returned tokens that are alphabetic and carry no space continue the word, up to 4 tokens
   in all (a word still going on there is dropped).
3. **Rank** by the echoed log-probability (``echo: true, max_tokens: 1, logprobs: 1``) of the word's tokens and of
   every token after it, the final ``.`` included; :func:`queerbench.models.causal_blanks.blanks.rank_candidates`
   selects the top ``k`` distinct lowercased words and renormalises, as for a local model.

The start token follows local ``scored``'s rule: the one the server's tokenizer adds itself, else
``<|endoftext|>`` when the server reads it as one token, else none (then a blank at the very start of a sentence
cannot be proposed, and is refused). A filled sentence is sent as text, so the server scores it as its tokenizer
splits it; local ``scored`` scores the token path its greedy extension took. The two agree whenever that path is
the tokenizer's own split of the word (the tests check equality on such a model); two paths that spell the same
text are one candidate here.

Before any work :func:`probe` checks, in two rounds of calls (three where ``logprobs`` is capped), that the server
echoes prompt log-probabilities, that a token's echoed log-probability equals the next-token log-probability it
gives for the same prefix (to :data:`CONSISTENCY_TOLERANCE`; llama.cpp's server fails this), and that it echoes the
very token it proposed. Each failure is one line. Every call goes through the reply cache (the probe's and
:func:`score_blanks_endpoint`'s through :func:`~queerbench.models.generation.collect.collect`, a run's as ``collect``
would ask them), so a killed run resumes and a rerun with the same cache makes no completions call.

A run streams (:meth:`EndpointScoredPredictor.stream`): every sentence's calls flow through one stream of requests,
each step asked as soon as the one before is in, each row handed out as its last reply arrives
(:func:`~queerbench.models.causal_blanks.endpoint_steps.stream_blanks_endpoint`);
:meth:`EndpointScoredPredictor.predict` asks a step at a time for a batch of sentences
(:func:`~queerbench.models.causal_blanks.endpoint_steps.score_blanks_endpoint`).
Both ask the same jobs under the same cache keys and give the same words.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from queerbench.methods.base import Pacing, Rows
from queerbench.models.causal_blanks.endpoint_steps import (
    START_TEXT,
    ServerReport,
    ask_jobs,
    echoed_span,
    is_word_start,
    mismatch_error,
    score_blanks_endpoint,
    stream_blanks_endpoint,
)
from queerbench.models.generation.cache import ResponseCache
from queerbench.models.generation.completions import CompletionsRunner, completion_job
from queerbench.models.generation.settings import EndpointError, MethodUnsupportedError
from queerbench.models.spec import ModelSpec

__all__ = [
    "CONSISTENCY_TOLERANCE",
    "PROBE_PREFIX",
    "EndpointScoredPredictor",
    "ServerReport",
    "probe",
    "score_blanks_endpoint",
    "stream_blanks_endpoint",
]

PROBE_PREFIX = "The person is a"
"""The text the server is probed with (its next token, then that token echoed)."""
CONSISTENCY_TOLERANCE = 1e-3
"""Largest accepted gap between a token's echoed and next-token log-probabilities."""
PROPOSE_FACTOR = 5
"""The propose call asks for ``PROPOSE_FACTOR · N`` next tokens, so that ``N`` word starts are among them."""


def _no_echo(url: str, problem: str) -> EndpointError:
    return MethodUnsupportedError(
        f"{url} {problem}; --method scored ranks words by the log-probabilities of the prompt's own tokens (echo), "
        "which this server does not give: use --method instructed"
    )


def probe(
    runner: CompletionsRunner, cache: ResponseCache, n_first: int, *, logprobs: int | None = None
) -> ServerReport:
    """Check the server before any scoring (see the module doc); one-line :class:`EndpointError` for each failure
    (a :class:`MethodUnsupportedError` where the server answered and cannot serve ``scored``)."""
    url = runner.url
    wanted = logprobs or PROPOSE_FACTOR * n_first
    heads = (PROBE_PREFIX, START_TEXT + PROBE_PREFIX)
    # one round trip for what the next steps choose from: each head echoed, and each head's next tokens
    jobs = [completion_job(h, max_tokens=1, logprobs=1, echo=True) for h in heads]
    jobs += [completion_job(h, max_tokens=1, logprobs=wanted) for h in heads]
    plain, marked, *proposals = ask_jobs(
        runner, cache, ["probe/echo", "probe/start", "probe/plain", "probe/marked"], jobs
    )
    if isinstance(plain, str):
        raise _no_echo(url, f"refused a prompt with echo and logprobs ({plain})")
    if plain["tokens"] is None:
        raise _no_echo(url, "sent no log-probabilities for an echoed prompt")
    span = echoed_span(plain, PROBE_PREFIX)
    if span is None:
        raise (
            _no_echo(url, "did not echo the prompt's tokens")
            if len(plain["tokens"]) <= 1
            else mismatch_error(url, PROBE_PREFIX, plain)
        )
    found = None if isinstance(marked, str) or marked["tokens"] is None else echoed_span(marked, PROBE_PREFIX)
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
        (nxt,) = ask_jobs(
            runner, cache, ["probe/propose"], [completion_job(propose_prompt, max_tokens=1, logprobs=wanted)]
        )
    top = None if isinstance(nxt, str) or not nxt["top_logprobs"] else nxt["top_logprobs"][0]
    if not isinstance(top, dict) or len(top) < n_first:
        said = nxt if isinstance(nxt, str) else f"it returned {0 if not isinstance(top, dict) else len(top)}"
        raise MethodUnsupportedError(
            f"{url} does not give the top {n_first} next-token log-probabilities that --method scored needs for "
            f"--top-k {n_first // 4} (4 candidates per word; {said}): raise the server's cap (vLLM: vllm serve MODEL "
            f"--max-logprobs {PROPOSE_FACTOR * n_first}) or lower --top-k"
        )
    # the most likely word start is checked (the kind of token scoring reads), else the greedy token
    starts = sorted((t for t in top if is_word_start(t, False)), key=lambda t: -float(top[t]))
    token, next_lp = (starts[0], float(top[starts[0]])) if starts else (nxt["tokens"][0], nxt["token_logprobs"][0])
    sent = propose_prompt + token
    (back,) = ask_jobs(
        runner, cache, ["probe/consistency"], [completion_job(sent, max_tokens=1, logprobs=1, echo=True)]
    )
    if isinstance(back, str) or back["tokens"] is None:
        raise _no_echo(url, f"refused an echoed prompt ({back if isinstance(back, str) else 'no log-probabilities'})")
    where = echoed_span(back, token)
    if where is None or where[1] - where[0] != 1 or back["token_logprobs"][where[0]] is None:
        raise mismatch_error(url, sent, back)
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
        raise MethodUnsupportedError(
            f"{url} failed the log-probability consistency check: {token!r} after {PROBE_PREFIX!r} has log-probability "
            f"{next_lp:.4f} as the next token but {echoed:.4f} echoed in the prompt (gap {gap:.4f} > "
            f"{CONSISTENCY_TOLERANCE:g}), so its prompt log-probabilities cannot rank words; use --method instructed, "
            "or serve the model with an engine that passes (vLLM)"
        )
    return ServerReport(start_text, start, min(wanted, len(top)), check)


class EndpointScoredPredictor:
    """``scored`` on a completions endpoint, with the interface of the local
    :class:`~queerbench.methods.scored.predictor.ScoredPredictor` (the registry's :class:`~queerbench.methods.registry.Predictor`:
    ``from_options``, ``metadata()``, ``predict(ids, sentences, tick)``, ``close()``).

    Loading identifies the server (``GET /models``, ``GET /version`` where it answers) and runs :func:`probe`, whose
    replies are cached in ``probe.sqlite`` next to ``cache_path``; the reply cache at ``cache_path`` is opened for
    each :meth:`stream` or :meth:`predict` call only.
    """

    method: ClassVar[str] = "scored"

    def __init__(
        self,
        model: str,
        *,
        endpoint: str,
        top_k: int,
        cache_path: Path,
        spec: ModelSpec | None = None,
        prompts_per_request: int = 16,
        logprobs: int | None = None,
        log: Callable[[str], None] = print,
        **runner_options: Any,
    ) -> None:
        """``spec``: the endpoint's concurrency, rate and timeout (its ``batch_size`` is not used: a completions
        request holds ``prompts_per_request`` prompts); ``runner_options`` go to the
        :class:`~queerbench.models.generation.completions.CompletionsRunner` (``api_key_env``, ``max_retries``, …)."""
        from queerbench.models.causal_blanks.local import CANDIDATES_PER_K

        self.model_id, self.top_k, self.cache_path = model, top_k, Path(cache_path)
        spec = spec if spec is not None else ModelSpec()
        spec.check_endpoint(endpoint)
        owned = sorted({"concurrency", "requests_per_minute", "timeout"} & set(runner_options))
        if owned:
            raise ValueError(f"{', '.join(owned)}: pass them in spec=ModelSpec(...) (concurrency, rate, timeout)")
        from queerbench.models.backends import open_backend
        from queerbench.models.backends.endpoint import EndpointBackend
        from queerbench.models.registry import model_ref
        from queerbench.models.requests import LOGLIKELIHOOD

        # the model as tasks see it: the backend of the served model that answers loglikelihood requests (its
        # completions route: the steps below are made of such calls), ``prompts_per_request`` prompts per request
        backend = open_backend(
            model_ref(model, endpoint),
            LOGLIKELIHOOD,
            dataclasses.replace(spec, batch_size=prompts_per_request),
            log=log,
            announce=False,
            **runner_options,
        )
        if not isinstance(backend, EndpointBackend):
            backend.close()
            raise TypeError(f"{backend.name}: scored on an endpoint runs on its completions route")
        self.backend = backend
        self.runner = backend.completions_runner()
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
            spec=options.model_spec,
            log=log,
        )

    def stream(
        self, ids: Sequence[str], sentences: Sequence[str], tick: Callable[[int], None], pacing: Pacing
    ) -> Iterator[Rows]:
        """Every call of the run streams through the runner's slots and each sentence is handed out as its last
        reply arrives (:func:`stream_blanks_endpoint`), so a slow or retried request holds up its own sentences only;
        ``pacing`` is not needed (the run saves streamed rows every 64 sentences or 15 s)."""
        with ResponseCache(self.cache_path) as cache:
            for sid, row in stream_blanks_endpoint(self.runner, cache, self.report, ids, sentences, self.top_k):
                tick(1)
                yield Rows([sid], {column: [value] for column, value in row.items()})

    def close(self) -> None:
        """Close the backend (the reply cache is opened per :meth:`stream` or :meth:`predict` call only)."""
        self.backend.close()

    def metadata(self) -> dict[str, Any]:
        """Method, endpoint and what the server reported, the probe's figures, the scoring settings."""
        from queerbench.models.causal_blanks.local import CANDIDATES_PER_K, MAX_WORD_TOKENS

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
