"""OpenAI-compatible chat endpoints (``POST {base_url}/chat/completions``), called concurrently.

:class:`OpenAIChatRunner` keeps up to ``concurrency`` requests in flight (a fixed pool of worker threads sharing the
library's one HTTP client, :class:`queerbench.base.http.HttpClient`: one session, one rate limit —
``requests_per_minute``; ``None`` = no limit — one retry policy).
Replies are yielded in the order they arrive; :func:`~queerbench.models.generation.collect.collect` stores each one at once and
puts its output back in the rows' order.

Failures, and what happens to them:

- **retried** as serving clients do it (:func:`queerbench.base.http.retry_delay`): a ``Retry-After`` the server
  sends (seconds or HTTP date, or ``retry-after-ms``) sets the wait, up to 60 s (``Retry-After: 0``: at once);
  without one, ``backoff_base * 2**attempt`` (0.5 s doubling) capped at ``backoff_max`` (8 s) — the OpenAI Python
  client's own schedule — less a random 0–25 % (jitter); a call waiting for its retry holds no slot, so a short cap
  only keeps one unlucky prompt from trailing a run:
  408, 409, 429 and every 5xx, a connection dropped mid-request, no complete answer within ``timeout`` (a server
  that drips its reply is cut off there), a reply over the size cap, a body that is not the JSON of a chat
  completion (truncated, HTML, no ``choices``). After ``max_retries`` retries the item fails (an error row, never a
  reply, never cached) and the other prompts go on;
- **final for the item**: other 4xx (e.g. 400 for a prompt the server rejects);
- **fatal for the run**, raised at once as :class:`~queerbench.models.generation.settings.EndpointError` (a ``ValueError``: the
  CLI prints one line): 401/403 (key missing or rejected), 404 (unknown model or wrong URL), and, as
  :class:`~queerbench.models.generation.settings.EndpointUnreachableError`, a refused connection, unknown host or connect
  timeout (``connect_timeout``, default 10 s), naming the URL; and a server that has answered none of the run's
  first ``2 × concurrency`` attempts (each timed out after ``timeout``, ``--request-timeout``, or was dropped), which
  is taken for dead in about two timeouts instead of every call's retries. Replies that arrived before are already
  stored.

API key rule: read from the environment variable ``api_key_env`` (default ``OPENAI_API_KEY``, through
:func:`queerbench.base.env.secret`). It is **required** for
any host that is not loopback (the runner refuses to start without it, naming the variable); for ``127.0.0.1``,
``::1`` and ``localhost`` (vLLM, Ollama, llama.cpp servers) it is optional and its absence is noted once. The key is
only ever sent in the ``Authorization`` header and scrubbed from every message where it appears as a token; it is not
part of the fingerprint.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit

from queerbench.base import env
from queerbench.base.http import (
    DEFAULT_REQUESTS_PER_MINUTE,
    Answer,
    Attempt,
    BadReply,
    HttpClient,
    Outcome,
    RetryRules,
    Unreachable,
    check_endpoint_url,
    join_url,
)
from queerbench.base.redact import redact_secrets, redact_url, url_secrets
from queerbench.models.generation.scheduler import CallScheduler
from queerbench.models.generation.settings import EndpointError, EndpointUnreachableError, GenerationSettings, Reply

__all__ = ["OpenAIChatRunner", "ReplyStream", "is_loopback"]

log = logging.getLogger(__name__)

RETRY_AFTER_MAX = 60.0
"""The longest ``Retry-After`` a server is obeyed for (a longer one is waited for this long)."""

REPLY_CHARS_PER_TOKEN = 32
"""A stored reply is cut at ``max_new_tokens`` times this many characters (a token is a few characters; 32 is far
above any tokenizer's longest): a server that ignores ``max_tokens`` cannot fill the reply cache and the run's
memory with replies thousands of times longer than asked for. A reply cut there is marked truncated."""

SILENT_ROUNDS = 2
"""Rounds of ``concurrency`` attempts without any answer after which a server is taken for dead."""


def is_loopback(url: str) -> bool:
    """Whether ``url``'s host is this machine (``localhost``, ``127.0.0.0/8``, ``::1``)."""
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class OpenAIChatRunner:
    """Any OpenAI-compatible chat-completions endpoint: concurrent, rate-limited, retried (see the module doc).

    ``system_prompt`` (a system message before each prompt) and ``extra_body`` (a dict merged into every request
    body, its keys winning, e.g. Gemini ``safety_settings`` or vLLM sampling extras) are part of the fingerprint,
    so changing them never reuses cached replies. ``sleep``/``clock``/``jitter`` (the random source of the backoff
    jitter, values in [0, 1)) are injectable for tests; by default a backoff wait ends early when the run is stopped.
    """

    route = "chat/completions"
    """Where the requests go, under the base URL (before its query)."""
    caps_replies = True
    """Whether a reply's text is cut at ``max_new_tokens × REPLY_CHARS_PER_TOKEN`` characters (a completions reply
    is log-probability records, whose length is not the reply's)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        concurrency: int = 8,
        requests_per_minute: float | None = DEFAULT_REQUESTS_PER_MINUTE,
        max_retries: int = 5,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
        timeout: float = 60.0,
        connect_timeout: float = 10.0,
        system_prompt: str | None = None,
        extra_body: dict[str, Any] | None = None,
        sleep: Callable[[float], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        check_endpoint_url(base_url)  # scheme, host and port: one line before any request
        if not model:
            raise ValueError("--endpoint needs --model NAME (the model name the endpoint serves)")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"--concurrency must be a whole number >= 1, got {concurrency!r}")
        if extra_body is not None and not isinstance(extra_body, dict):
            raise ValueError("extra_body must be a JSON object (a dict)")
        # the URL as given, with any credentials it carries, is for the requests alone; what is stored, fingerprinted
        # and shown is its redacted form (no userinfo, secret query values masked: queerbench.base.redact)
        self._base = base_url.rstrip("/")
        self.base_url = redact_url(self._base)
        self.url = join_url(self.base_url, self.route)
        self._target = join_url(self._base, self.route)
        self.model_name = model
        self.name = f"{self.base_url}#{model}"
        self.api_key_env = api_key_env
        self._key = env.secret(api_key_env) or None
        self._secrets = [s for s in (self._key, *url_secrets(self._base)) if s]
        if self._key is None:
            if not is_loopback(self.base_url):
                raise ValueError(
                    f"environment variable {api_key_env} is not set: {self.base_url} needs an API key "
                    f"(export {api_key_env}=…; only servers on localhost/127.0.0.1 may run without one)"
                )
            log.warning("%s is not set: calling the local server %s without an API key", api_key_env, self.base_url)
        self.concurrency = concurrency
        self.max_retries, self.backoff_base, self.backoff_max = max_retries, backoff_base, backoff_max
        self.timeout = (connect_timeout, timeout)
        self.system_prompt = system_prompt
        self.extra_body = dict(extra_body or {})
        self._sleep = sleep
        self._silence_lock = threading.Lock()
        self._heard, self._silent = False, 0
        self.capped = 0
        """Replies cut at ``max_new_tokens × REPLY_CHARS_PER_TOKEN`` characters so far."""
        self.client = HttpClient(
            rules=RetryRules(),
            max_retries=max_retries,
            backoff_base=backoff_base,
            backoff_max=backoff_max,
            retry_after_max=RETRY_AFTER_MAX,
            timeout=timeout,
            connect_timeout=connect_timeout,
            requests_per_minute=requests_per_minute,
            pool_size=concurrency,
            secret=self._key,
            clock=clock,
            jitter=jitter,
        )
        self._limiter = self.client.limiter

    @property
    def calls(self) -> int:
        """HTTP requests sent so far (every attempt counts)."""
        return self.client.calls

    def fingerprint(self) -> dict[str, Any]:
        """What identifies the replies: endpoint URL, model name, and system prompt and extra body when set (never
        the key; without the optional parts the fingerprint, and so the cache, is the same as before they existed)."""
        fp: dict[str, Any] = {"kind": "openai-chat", "base_url": self.base_url, "model": self.model_name}
        if self.system_prompt is not None:
            fp["system"] = self.system_prompt
        if self.extra_body:
            fp["extra_body"] = self.extra_body
        return fp

    # ------------------------------------------------------------------------------------------- one request --

    def _scrub(self, text: str) -> str:
        return self.client.scrub(text)

    def headers(self) -> dict[str, str]:
        """The request headers (the key, when set, in ``Authorization`` only)."""
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        return headers

    def backoff(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry ``attempt + 1``: the server's ``Retry-After`` when it sent one (up to 60 s),
        else ``base * 2**attempt`` less 0–25 % jitter, capped at ``backoff_max`` (see
        :func:`~queerbench.base.http.retry_delay`)."""
        return self.client.backoff(attempt, retry_after)

    def request_body(self, prompt: str, seed: int, settings: GenerationSettings) -> dict[str, Any]:
        """The JSON body sent for one prompt (``top_p`` omitted when ``None``; ``extra_body`` merged last)."""
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        messages.append({"role": "user", "content": prompt})
        body: dict[str, Any] = {
            "model": self.model_name,
            "messages": messages,
            "temperature": settings.temperature,
            "max_tokens": settings.max_new_tokens,
            "seed": seed,
            "n": 1,
        }
        if settings.top_p is not None:
            body["top_p"] = settings.top_p
        body.update(self.extra_body)
        return body

    def _fatal(self, status: int, resp: Answer) -> EndpointError | None:
        """The answers that end the run: 401/403 (the key) and 404 (the model or URL); None for the others."""
        if status not in (401, 403, 404):
            return None
        detail = self._scrub(resp.text)[:200]
        if status in (401, 403):
            why = f"the API key in ${self.api_key_env} is missing or was rejected"
        else:
            why = f"unknown model {self.model_name!r} or wrong URL (check --model and --endpoint)"
        return EndpointError(f"{self.url} answered HTTP {status}: {why}; server said: {detail}")

    def _unreachable(self, kind: str) -> EndpointUnreachableError:
        return EndpointUnreachableError(
            f"cannot connect to {self.url} ({kind}): is the server running and the URL right? "
            "Replies received so far are cached; rerun the same command to resume."
        )

    def call(self, prompt: str, seed: int, settings: GenerationSettings, stop: threading.Event | None = None) -> Reply:
        """One prompt → one :class:`Reply`, with retries; raises :class:`EndpointError` for fatal answers.

        ``stop``, once set, ends a backoff wait early and prevents further attempts.
        """
        stop = stop or threading.Event()
        try:
            outcome = self.client.request(
                "POST",
                self._target,
                data=json.dumps(self.request_body(prompt, seed, settings)),
                headers=self.headers(),
                parse=functools.partial(self._read_reply, settings=settings),
                fatal=self._fatal,
                stop=stop,
                sleep=self._sleep or stop.wait,
            )
        except Unreachable as exc:
            raise self._unreachable(exc.kind) from None
        if outcome.cancelled:
            return Reply(None, "cancelled: the run was stopped", {"attempts": outcome.attempts})
        return self._reply(outcome, seed)

    def _read_reply(self, resp: Answer, settings: GenerationSettings) -> Reply:
        """A 200 answer → the :class:`Reply` that is kept: parsed (:meth:`_parse`), the key and the URL's credentials
        masked in its text (a server may echo the ``Authorization`` header it was sent) and cut at
        ``max_new_tokens × REPLY_CHARS_PER_TOKEN`` characters, marked truncated (``finish_reason`` ``length``,
        ``capped_from``: the length it had)."""
        reply = self._parse(resp)
        if reply.text:
            reply.text = redact_secrets(reply.text, self._secrets)
            cap = settings.max_new_tokens * REPLY_CHARS_PER_TOKEN
            if self.caps_replies and len(reply.text) > cap:
                reply.meta.update(finish_reason="length", capped_from=len(reply.text))
                reply.text = reply.text[:cap]
                with self._silence_lock:
                    self.capped += 1
                    first = self.capped == 1
                if first:  # said once; each cut reply is marked truncated (counted in the SCM report)
                    log.warning(
                        "a reply of %d characters from %s was cut at %d (--max-new-tokens %d x %d): the server "
                        "ignores max_tokens; replies cut so far are marked truncated",
                        reply.meta["capped_from"],
                        self.url,
                        cap,
                        settings.max_new_tokens,
                        REPLY_CHARS_PER_TOKEN,
                    )
        return reply

    def _parse(self, resp: Answer) -> Reply:
        """A chat completion → a :class:`Reply`; anything else → :class:`~queerbench.base.http.BadReply` (retried)."""
        try:
            data = resp.json()
            choice = data["choices"][0]
            message = choice["message"]
            text = message.get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise BadReply(f"malformed reply ({type(exc).__name__}: {self._scrub(str(exc))[:80]})") from None
        if text is not None and not isinstance(text, str):
            raise BadReply("malformed reply (content is not a string)")
        meta: dict[str, Any] = {"prompt_format": "chat", "finish_reason": choice.get("finish_reason")}
        if message.get("refusal"):
            meta["refusal"] = self._scrub(message["refusal"])[:500]
        # content None (filtered, refusal field, tool call) is a reply with no text: the caller labels it empty
        return Reply(text or "", None, meta)

    # -------------------------------------------------------------------------------------------- the pool ---

    def _reply(self, outcome: Outcome, seed: int) -> Reply:
        """A call's outcome as a :class:`Reply` (its text, or why it failed: a final answer or the problems of every
        attempt)."""
        if outcome.ok:
            reply: Reply = outcome.value
            reply.meta.update(attempts=outcome.attempts, seed=seed)
            return reply
        if outcome.final and outcome.status is not None:
            return Reply(None, f"HTTP {outcome.status}: {outcome.detail[:200]}", {"attempts": outcome.attempts})
        if outcome.final:
            return Reply(None, outcome.problems[-1], {"attempts": outcome.attempts})
        problems = "; ".join(outcome.problems)
        return Reply(None, f"gave up after {outcome.attempts} attempts: {problems}", {"attempts": outcome.attempts})

    def _attempt(self, payload: tuple[Any, int, GenerationSettings]) -> Attempt:
        prompt, seed, settings = payload
        try:
            tried = self.client.attempt(
                "POST",
                self._target,
                data=json.dumps(self.request_body(prompt, seed, settings)),
                headers=self.headers(),
                parse=functools.partial(self._read_reply, settings=settings),
                fatal=self._fatal,
            )
        except Unreachable as exc:
            raise self._unreachable(exc.kind) from None
        self._watch_silence(tried)
        return tried

    def _watch_silence(self, tried: Attempt) -> None:
        """A server that has answered no request at all (every attempt timed out or was dropped) is taken for dead
        after :data:`SILENT_ROUNDS` rounds of ``concurrency`` attempts: one line, in about two ``--request-timeout``
        instead of every call's retries (minutes). Once anything was answered, timeouts are retried as usual."""
        with self._silence_lock:
            if tried.status is not None:
                self._heard = True
            elif not self._heard and tried.retry:
                self._silent += 1
                if self._silent >= SILENT_ROUNDS * self.concurrency:
                    raise EndpointUnreachableError(
                        f"{self.url} answered none of {self._silent} requests ({tried.problem}): is the server up "
                        f"and serving {self.model_name}? A slow model needs a longer --request-timeout (now "
                        f"{self.timeout[1]:g} s). Replies received so far are cached; rerun the same command to resume."
                    )

    def open_stream(self, keep: Callable[[Any, Reply], bool] | None = None) -> ReplyStream:
        """A stream of calls through this endpoint's slots: :meth:`ReplyStream.submit` prompts (with their seed and
        settings) at any time, :meth:`ReplyStream.replies` yields ``(key, reply)`` as they arrive.

        ``keep(key, reply)``, when given, stores each reply in the worker thread that received it, the moment it
        arrives, and says whether it did (a reply cache that was closed when the run stopped did not): a stored
        reply frees its slot before the caller takes it (:class:`~queerbench.models.generation.scheduler.CallScheduler`),
        so a caller busy with its own work (saving a part) never leaves the slots idle."""
        return ReplyStream(self, keep)

    def _scheduler(self, settle: Callable[[Any, Outcome], tuple[Any, bool]]) -> CallScheduler:
        """The worker pool of one stream: this endpoint's slots, retries, backoff and rate limit."""
        return CallScheduler(
            self._attempt,
            concurrency=self.concurrency,
            max_retries=self.max_retries,
            backoff=self.backoff,
            pace=self.client.limiter.wait,
            settle=settle,
            sleep=self._sleep,
        )

    def generate(
        self, prompts: Sequence[Any], seeds: Sequence[int], settings: GenerationSettings
    ) -> Generator[tuple[int, Reply], None, None]:
        """Yield ``(index, reply)`` as replies arrive, at most ``concurrency`` requests in flight (a prompt waiting
        for its retry holds no slot: :class:`~queerbench.models.generation.scheduler.CallScheduler`).

        A reply holds its slot until the caller asks for the next one, so requests in flight plus replies not yet
        handled never exceed ``concurrency`` (nothing runs far ahead of a caller that stops). A fatal
        :class:`EndpointError` stops the workers (no new requests start) and is raised here; replies that arrived
        before it were yielded. Closing the generator early (an abort or Ctrl-C in the caller) stops them the same
        way.
        """
        if len(prompts) != len(seeds):
            raise ValueError("prompts and seeds must have the same length")
        if not prompts:
            return
        stream = self.open_stream()
        try:
            for i, (prompt, seed) in enumerate(zip(prompts, seeds, strict=True)):
                stream.submit(i, prompt, seed, settings)
            stream.close()
            yield from stream.replies()
        finally:
            stream.stop()


class ReplyStream:
    """Prompts streamed through one endpoint's slots (:meth:`OpenAIChatRunner.open_stream`)."""

    def __init__(self, runner: OpenAIChatRunner, keep: Callable[[Any, Reply], bool] | None = None) -> None:
        self.runner, self._keep = runner, keep
        self._seeds: dict[Any, int] = {}
        self._scheduler = runner._scheduler(self._settle)

    def submit(self, key: Any, prompt: Any, seed: int, settings: GenerationSettings) -> None:
        """Ask ``prompt`` (its reply comes out under ``key``)."""
        self._seeds[key] = seed
        self._scheduler.submit(key, (prompt, seed, settings))

    def _settle(self, key: Any, outcome: Outcome) -> tuple[Reply, bool]:
        """In the worker that ended the call: its :class:`Reply`, stored by ``keep`` if it is one."""
        reply = self.runner._reply(outcome, self._seeds.pop(key))
        stored = self._keep is not None and reply.error is None and reply.text is not None and self._keep(key, reply)
        return reply, stored

    def replies(self) -> Iterator[tuple[Any, Reply]]:
        """``(key, reply)`` of every prompt submitted so far as it arrives (submissions while iterating included)."""
        yield from self._scheduler.results()

    def close(self) -> None:
        """No more prompts will be submitted."""
        self._scheduler.close()

    def stop(self) -> None:
        """Stop every worker now."""
        self._scheduler.stop()
