"""An OpenAI-compatible endpoint as a request backend (:class:`EndpointBackend`): ``generate``, ``loglikelihood`` and
top-k ``fill_mask``.

**generate** goes through the generation layer's chat runner
(:class:`~queerbench.models.generation.endpoint.OpenAIChatRunner`: ``concurrency`` requests in flight, its rate
limit, retries with backoff, timeouts and fatal-error rules), with each request's decoding settings and seed (greedy
by default), one user turn per prompt.

**loglikelihood** goes through ``POST {url}/completions``
(:class:`~queerbench.models.generation.completions.CompletionsRunner`, the same machinery, ``batch_size`` prompts
per request) as lm-evaluation-harness's ``local-completions`` asks it: the prompt is context + continuation, with
``echo: true``, ``logprobs: 1`` and ``max_tokens: 1`` (the one generated token is not read), and the echoed
log-probabilities of the continuation's tokens are summed. Which tokens are the continuation's is read from the
echoed token texts: the shortest run of tokens ending the prompt that spells (at least) the continuation, after the
context's trailing spaces moved to it (lm-evaluation-harness's rule). With an empty context every echoed token after
the first is scored (the first has no log-probability; a server that adds a start token scores the text's first
token too, as a local causal LM does). A server without the route, or one that refuses echoed log-probabilities,
is one line :class:`~queerbench.models.requests.UnsupportedRequestError` naming its URL (without credentials).

**fill_mask** (top-k) goes through the same completions route: the words a causal LM puts in a blank, proposed from
the next tokens after the text before it, extended greedily to whole words and ranked by the echoed log-probability
of the whole sentence with each in place (:mod:`queerbench.models.causal_blanks.endpoint_steps`), as a local causal
LM's backend answers it. The server is first identified and probed (:meth:`EndpointBackend.prepare_blanks`:
whether it echoes consistent prompt log-probabilities, its start token, how many next tokens it gives), each failure
one line before any work. Every call goes through the reply cache, which these requests need: a stopped run asks
only what it has not kept. A candidate-word request is refused in one line (an endpoint has no mask).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Generator, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from queerbench.base.http import DEFAULT_REQUESTS_PER_MINUTE
from queerbench.base.redact import redact_url
from queerbench.models.backends.common import (
    RequestFailedError,
    by_top_k,
    check_batch_size,
    refuse_chat,
    split_context,
    ticker,
)
from queerbench.models.backends.generate import generate_with, stream_with
from queerbench.models.generation.cache import ResponseCache
from queerbench.models.generation.completions import CompletionsRunner, completion_job
from queerbench.models.generation.endpoint import OpenAIChatRunner
from queerbench.models.generation.settings import GenerationSettings, MethodUnsupportedError
from queerbench.models.registry import ModelRef
from queerbench.models.requests import (
    FILL_MASK,
    GENERATE,
    LOGLIKELIHOOD,
    FillMask,
    FillMaskResult,
    Generate,
    GenerateResult,
    Loglikelihood,
    LoglikelihoodResult,
    UnsupportedRequestError,
)

if TYPE_CHECKING:
    from queerbench.models.causal_blanks.endpoint_steps import ServerReport
    from queerbench.models.generation.collect import ErrorStreak, StreamCollector

__all__ = ["EndpointBackend", "continuation_span"]

_SETTINGS = GenerationSettings(temperature=0.0, top_p=None, max_new_tokens=1, seed=0, samples=1, batch_size=1)
"""Greedy; the parameters that matter travel in each completions job."""
_BYTE = re.compile(r"\\x([0-9a-fA-F]{2})")


def _token_bytes(token: str) -> bytes:
    """A token's text as bytes (OpenAI's ``bytes:\\xNN…`` form for a token that is no whole character)."""
    if token.startswith("bytes:"):
        return bytes(int(h, 16) for h in _BYTE.findall(token[6:]))
    return token.encode("utf-8")


def continuation_span(tokens: Sequence[str], prompt: str, continuation: str) -> tuple[int, int] | None:
    """``(j, e)``: the echoed tokens ``j..e-1`` end ``prompt`` and spell at least ``continuation`` (``e`` leaves out
    the generated token; a server that generated none has ``e`` at the end), or None when no such run exists."""
    target, need = prompt.encode("utf-8"), len(continuation.encode("utf-8"))
    for end in (len(tokens) - 1, len(tokens)):
        spelled = b""
        for j in range(end - 1, -1, -1):
            spelled = _token_bytes(tokens[j]) + spelled
            if not target.endswith(spelled):
                break
            if len(spelled) >= need and spelled:
                return j, end
    return None


class EndpointBackend:
    """A served model answering ``generate`` (chat), and ``loglikelihood`` and top-k ``fill_mask`` (echoed
    completions) requests.

    ``options`` go to both runners (``api_key_env``, ``requests_per_minute``, ``max_retries``, ``timeout``, …); the
    runners are made when first used, and making one sends nothing.
    """

    kind = "endpoint"

    def __init__(
        self,
        ref: ModelRef,
        *,
        batch_size: int = 16,
        concurrency: int = 8,
        log: Callable[[str], None] = print,
        **options: Any,
    ) -> None:
        if not ref.endpoint:
            raise ValueError(f"{ref.name} is not served by an endpoint; open it as a local model")
        self.ref, self.log = ref, log
        self.batch_size = check_batch_size(batch_size)
        self.concurrency = concurrency
        self.url = redact_url(ref.endpoint.rstrip("/"))
        self.name = f"{self.url}#{ref.name}"
        self.request_types = frozenset({FILL_MASK, GENERATE, LOGLIKELIHOOD})
        self.options = {"requests_per_minute": DEFAULT_REQUESTS_PER_MINUTE, **options}
        self._chat: OpenAIChatRunner | None = None
        self._completions: CompletionsRunner | None = None
        self.reply_cache: ResponseCache | None = None
        """Where ``generate`` replies, and the completions a top-k ``fill_mask`` is made of, are kept as they arrive
        and found again (None: not kept)."""
        self.blanks_reports: dict[int, ServerReport] = {}
        """What the probe found for each top-k asked (:meth:`prepare_blanks`)."""
        self.chat_runner()  # its checks (URL, API key, concurrency) are one line now, before any request

    def chat_runner(self) -> OpenAIChatRunner:
        """The chat runner (made on first use)."""
        if self._chat is None:
            self._chat = OpenAIChatRunner(
                str(self.ref.endpoint), self.ref.name, concurrency=self.concurrency, **self.options
            )
        return self._chat

    def generator(self) -> OpenAIChatRunner:
        """The runner that answers ``generate`` (the chat runner)."""
        return self.chat_runner()

    def completions_runner(self) -> CompletionsRunner:
        """The completions runner (made on first use)."""
        if self._completions is None:
            options = {k: v for k, v in self.options.items() if k != "system_prompt"}
            self._completions = CompletionsRunner(
                str(self.ref.endpoint),
                self.ref.name,
                concurrency=self.concurrency,
                prompts_per_request=self.batch_size,
                **options,
            )
        return self._completions

    # ----------------------------------------------------------------------------------------------- records --
    def fingerprint(self) -> dict[str, Any]:
        """The served model's fingerprint (:meth:`ModelRef.fingerprint`: the URL without credentials, the name)."""
        return self.ref.fingerprint()

    def metadata(self) -> dict[str, Any]:
        """The backend, endpoint (without credentials), model, concurrency and prompts per completions request."""
        return {
            "backend": self.kind,
            "model": self.ref.name,
            "endpoint": self.url,
            "device": "endpoint",
            "dtype": None,
            "batch_size": self.batch_size,
            "concurrency": self.concurrency,
        }

    def close(self) -> None:
        """Drop the runners (their HTTP sessions go with them)."""
        self._chat = self._completions = None

    # ------------------------------------------------------------------------------------------------ requests --
    def prepare_blanks(
        self, top_k: int, *, probe_path: Path | None = None, logprobs: int | None = None
    ) -> ServerReport:
        """Identify the server (what it serves, part of every completions call's cache key) and probe, before any
        work, that it can answer top-``top_k`` ``fill_mask`` requests
        (:func:`~queerbench.models.causal_blanks.endpoint_probe.probe`; each failure one line). ``probe_path``:
        the probe's replies kept in a file of their own, removed when the probe fails, so that a refused server
        leaves no replies that would make a run folder look resumable (None: in the reply cache). ``logprobs``: how
        many next tokens the propose step asks for (None: five times the candidates); a server that gives fewer is
        noted in the log."""
        from queerbench.models.causal_blanks.blanks import CANDIDATES_PER_K
        from queerbench.models.causal_blanks.endpoint_probe import PROPOSE_FACTOR, identify, probe

        runner = self.completions_runner()
        if runner.served is None:
            runner.served = identify(runner)
        n_first = CANDIDATES_PER_K * top_k
        if probe_path is None:
            report = probe(
                runner, self._kept("top-k fill_mask requests need a reply cache"), n_first, logprobs=logprobs
            )
        else:
            try:
                with ResponseCache(probe_path) as cache:
                    report = probe(runner, cache, n_first, logprobs=logprobs)
            except BaseException:
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{probe_path}{suffix}").unlink(missing_ok=True)
                raise
        asked = logprobs or PROPOSE_FACTOR * n_first
        if report.logprobs < asked:
            self.log(
                f"note: {runner.url} caps logprobs below {asked}: candidates come from its top "
                f"{report.logprobs} next tokens (vLLM: --max-logprobs {asked} lifts this)"
            )
        self.blanks_reports[top_k] = report
        return report

    def blanks_metadata(self, top_k: int) -> dict[str, Any]:
        """What a run records of how its top-``k`` words were found: the endpoint, the served model's fingerprint
        with the probe's findings, the runner's, the start token, the consistency check and the decoding."""
        from queerbench.models.causal_blanks.blanks import CANDIDATES_PER_K, MAX_WORD_TOKENS

        runner, report = self.completions_runner(), self.blanks_reports.get(top_k)
        if report is None:
            raise ValueError(f"{self.name}: no top-{top_k} fill_mask was prepared; call prepare_blanks({top_k}) first")
        return {
            "endpoint": runner.base_url,
            "fingerprint": {**runner.fingerprint(), "start": report.start, "logprobs": report.logprobs},
            "runner": runner.fingerprint(),
            "start_token": report.start,
            "consistency_check": report.check,
            "device": None,
            "decoding": {
                "candidates": CANDIDATES_PER_K * top_k,
                "candidates_per_k": CANDIDATES_PER_K,
                "max_word_tokens": MAX_WORD_TOKENS,
                "propose_logprobs": report.logprobs,
                "ranking": "echoed log P(word + text after the blank | start token + text before the blank), summed",
                "prompt_format": "raw",
            },
        }

    def fill_mask(
        self, requests: Sequence[FillMask], tick: Callable[[int], None] | None = None
    ) -> list[FillMaskResult]:
        """The top-k whole words of each request's blank (see the module doc), in order, a step at a time for all
        of them (:func:`~queerbench.models.causal_blanks.endpoint_steps.score_blanks_endpoint`); a candidate-word
        or ``raw`` request is one line before any call."""
        from queerbench.models.causal_blanks.endpoint_steps import score_blanks_endpoint

        groups = by_top_k(self.name, requests, served=True)
        cache, done = self._kept("top-k fill_mask requests need a reply cache"), ticker(tick)
        results: list[FillMaskResult | None] = [None] * len(requests)
        for k, idx in groups.items():
            got = score_blanks_endpoint(
                self.completions_runner(),
                cache,
                self._report(k),
                [_item(requests[i], i) for i in idx],
                [requests[i].text for i in idx],
                k,
            )
            for j, i in enumerate(idx):
                results[i] = _fill_result({column: values[j] for column, values in got.items()})
            done(len(idx))
        return [r for r in results if r is not None]

    def stream_fill_mask(
        self, requests: Sequence[FillMask], tick: Callable[[int], None] | None = None
    ) -> Generator[tuple[int, FillMaskResult], None, None]:
        """``(index, result)`` of each top-k request as its last reply arrives, every call of every request
        through one stream of the completions runner's slots
        (:func:`~queerbench.models.causal_blanks.endpoint_steps.stream_blanks_endpoint`): a slow or retried call
        holds up its own request only. The same calls, cache keys and results as :meth:`fill_mask`."""
        from queerbench.models.causal_blanks.endpoint_steps import stream_blanks_endpoint

        groups = by_top_k(self.name, requests, served=True)
        cache, done = self._kept("top-k fill_mask requests need a reply cache"), ticker(tick)
        for k, idx in groups.items():
            names = [_item(requests[i], i) for i in idx]
            where = dict(zip(names, idx, strict=True))
            if len(where) < len(names):
                raise ValueError(f"{self.name}: two top-k fill_mask requests name one item; give each its own")
            texts = [requests[i].text for i in idx]
            for name, row in stream_blanks_endpoint(self.completions_runner(), cache, self._report(k), names, texts, k):
                done(1)
                yield where[name], _fill_result(row)

    def _report(self, top_k: int) -> ServerReport:
        """The probe's findings for ``top_k`` (probed now, into the reply cache, if :meth:`prepare_blanks` was not
        called for it)."""
        return self.blanks_reports.get(top_k) or self.prepare_blanks(top_k)

    def _kept(self, what: str) -> ResponseCache:
        if self.reply_cache is None:
            raise ValueError(f"{self.name}: {what} (open_backend(reply_cache=))")
        return self.reply_cache

    def generate(self, requests: Sequence[Generate], tick: Callable[[int], None] | None = None) -> list[GenerateResult]:
        """Chat replies (each with its request's decoding settings), ``concurrency`` requests in flight, in order."""
        return generate_with(self.chat_runner(), self.name, requests, 1, ticker(tick), self.reply_cache)

    def stream_generate(
        self, requests: Iterable[Generate], tick: Callable[[int], None] | None = None
    ) -> Generator[tuple[int, GenerateResult], None, None]:
        """``(index, reply)`` of each request as it arrives, ``concurrency`` requests in flight for the whole call
        (:func:`~queerbench.models.backends.generate.stream_with`), through the reply cache, which it needs: a
        reply handed out is already kept, so a caller may save what it made of it at any time."""
        return stream_with(
            self.chat_runner(),
            self.name,
            requests,
            ticker(tick),
            self._kept("streamed generate requests need a reply cache"),
        )

    def reply_stream(self, *, streak: ErrorStreak | None = None) -> StreamCollector:
        """A stream of ``generate`` requests through the chat runner's slots and the reply cache (which it needs):
        ask at any time, read each answer as it arrives (:class:`~queerbench.models.generation.collect.
        StreamCollector`)."""
        from queerbench.models.generation.collect import StreamCollector

        return StreamCollector(self.chat_runner(), self._kept("a reply stream needs a reply cache"), streak=streak)

    def loglikelihood(
        self, requests: Sequence[Loglikelihood], tick: Callable[[int], None] | None = None
    ) -> list[LoglikelihoodResult]:
        """Each continuation's summed echoed log-probability after its context, in order (see the module doc)."""
        refuse_chat(self.name, requests, "a completions endpoint scores plain text, not a chat turn")
        done = ticker(tick)
        parts = [split_context(r.context, r.continuation) for r in requests]
        results: list[LoglikelihoodResult | None] = [None] * len(requests)
        asked = [i for i, (c, t) in enumerate(parts) if c + t]
        for i in sorted(set(range(len(requests))) - set(asked)):  # an empty text: nothing to ask, nothing scored
            results[i] = LoglikelihoodResult(0.0, 0)
        if len(asked) < len(requests):
            done(len(requests) - len(asked))
        jobs = [completion_job(parts[i][0] + parts[i][1], max_tokens=1, logprobs=1, echo=True) for i in asked]
        runner = self.completions_runner()
        replies = runner.generate(jobs, [0] * len(jobs), _SETTINGS)
        try:
            for k, reply in replies:
                i = asked[k]
                if reply.error is not None or reply.text is None:
                    raise self._refused(runner.url, reply.error or "no reply")
                results[i] = self._read(runner.url, json.loads(reply.text), *parts[i])
                done(1)
        except MethodUnsupportedError:  # the server answered 404 for the route itself
            raise UnsupportedRequestError(
                f"{runner.url} answered HTTP 404 (no completions route): {self.ref.name} there cannot answer "
                "loglikelihood requests, which need an OpenAI-compatible completions endpoint that echoes prompt "
                "log-probabilities (vLLM, llama.cpp's server); use a local model or such an endpoint"
            ) from None
        finally:
            replies.close()
        return [r for r in results if r is not None]

    @staticmethod
    def _refused(url: str, error: str) -> Exception:
        if error.startswith("HTTP 4"):  # a final answer: the server refuses echo or logprobs
            return UnsupportedRequestError(
                f"{url} refused a prompt with echo and logprobs ({error[:120]}); loglikelihood "
                f"requests need a completions endpoint that echoes prompt log-probabilities (vLLM): use a local "
                f"model or another endpoint"
            )
        return RequestFailedError(f"{url} gave no answer to a loglikelihood request: {error[:200]}")

    @staticmethod
    def _read(url: str, record: dict[str, Any], context: str, continuation: str) -> LoglikelihoodResult:
        """One echoed completion → the continuation's summed log-probability and its token count."""
        tokens, values = record.get("tokens"), record.get("token_logprobs")
        if tokens is None or values is None:
            raise UnsupportedRequestError(
                f"{url} sent no log-probabilities for an echoed prompt; loglikelihood requests need "
                "a completions endpoint that echoes them (vLLM): use a local model or another endpoint"
            )
        prompt = context + continuation
        span = continuation_span(tokens, prompt, prompt if not context else continuation)
        if span is None:
            shown = "".join(tokens)[-80:]
            raise UnsupportedRequestError(
                f"{url} echoed other tokens than the prompt it was sent ({prompt[-60:]!r} came back "
                f"as {shown!r}): its log-probabilities are not for this text; check the server's model and tokenizer"
            )
        start, end = span
        if not context:
            start = 1  # every echoed token after the first
        scored = [v for v in values[start:end] if v is not None]
        return LoglikelihoodResult(float(sum(scored)), len(scored))


def _item(request: FillMask, position: int) -> str:
    """What a request's completions calls are named and seeded by: its item, else its position in the call."""
    return request.item if request.item is not None else str(position)


def _fill_result(row: dict[str, Any]) -> FillMaskResult:
    """A top-k fill from the steps' prediction columns of one sentence."""
    return FillMaskResult(
        logprobs=tuple(row["logprobs"]),
        words=tuple(row["tokens"]),
        probs=tuple(row["probs"]),
        n_tokens=tuple(row["n_word_tokens"]),
        n_proposed=int(row["n_proposed"]),
    )
