"""The one HTTP client of the library: every remote call (OpenAI-compatible endpoints, the Perspective API, an
embeddings endpoint) goes through :class:`HttpClient` — one ``requests`` session, one retry policy, one rate limiter,
one rule for secrets in messages.

The retry policy is the one serving clients use (the OpenAI and Anthropic Python SDKs do the same):

- a ``Retry-After`` the server sends (delta-seconds or an HTTP date; ``retry-after-ms`` in milliseconds, when sent,
  wins) **sets** the delay, capped at the client's maximum for it: ``Retry-After: 0`` means retry at once, with no
  exponential floor, so a server that rate-limits each request once costs one round trip, not a second;
- without one, exponential backoff ``base · 2^k`` capped at the maximum, shortened by a random 0–25 %
  (jitter), so that clients which failed together do not all retry at the same instant; ``k`` counts the call's
  earlier retries that came without a ``Retry-After`` (a server's pacing does not lengthen later waits).

What is worth retrying is a fact about the API, declared by its caller (:class:`RetryRules`): which HTTP statuses
are transient, and whether a refused connection is (a server one runs oneself that is not running is not: the run
stops at once, naming the URL). Whatever the API, a reply has a deadline (``timeout`` covers the wait for the headers
and the whole body, so a server that sends a byte every few seconds is cut off) and a size cap (a server that ignores
``max_tokens`` cannot fill the disk), and a secret is scrubbed from every message where it appears as a token.
"""

from __future__ import annotations

import email.utils
import json
import random
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import requests
import urllib3
from requests.adapters import HTTPAdapter

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_REQUESTS_PER_MINUTE",
    "JITTER",
    "MAX_REPLY_BYTES",
    "Answer",
    "Attempt",
    "BadReply",
    "HttpClient",
    "Outcome",
    "RateLimiter",
    "RetryRules",
    "Unreachable",
    "check_endpoint_url",
    "retry_after_from_headers",
    "retry_after_seconds",
    "retry_delay",
    "scrub",
]

DEFAULT_CONCURRENCY = 8
"""Endpoint requests in flight, for every command and library entry point that talks to an endpoint."""

DEFAULT_REQUESTS_PER_MINUTE = 600.0
"""The endpoint rate limit on top of the concurrency, everywhere: 10 requests a second, which a local serving engine
(vLLM, llama.cpp, Ollama) or a paid API tier sustains; lower it to a provider's quota (``--requests-per-minute``)."""

DEFAULT_REQUEST_TIMEOUT = 60.0
"""Seconds one endpoint request may take before it is given up and retried (``--request-timeout``)."""

MAX_REPLY_BYTES = 8 * 1024 * 1024
"""The largest reply body read (8 MiB): far above any completion of the lengths queerbench asks for."""

JITTER = 0.25
"""The largest share by which a backoff without ``Retry-After`` is shortened at random."""


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds: delta-seconds or an HTTP date (relative to wall-clock ``now``, default the current
    time); ``None`` when absent or unreadable, never negative."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def retry_after_from_headers(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """The server's wait hint in seconds from a response's headers: ``retry-after-ms`` (milliseconds, as OpenAI's
    API sends it) when readable, else ``Retry-After``; ``None`` when the server sent neither."""
    millis = headers.get("retry-after-ms") or headers.get("Retry-After-Ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    return retry_after_seconds(headers.get("Retry-After") or headers.get("retry-after"), now)


def retry_delay(
    attempt: int,
    retry_after: float | None,
    *,
    base: float,
    cap: float,
    rand: Callable[[], float] = random.random,
    retry_after_cap: float | None = None,
) -> float:
    """Seconds to wait before retry ``attempt + 1`` (``attempt`` counts from 0), see the module doc.

    ``retry_after`` (seconds, from :func:`retry_after_from_headers`) is used as it is, within ``retry_after_cap``
    (default ``cap``: a server that asks for a longer wait than the backoff's cap is still obeyed when this is
    larger); ``None`` gives ``min(base · 2^attempt, cap) · (1 − JITTER · rand())`` with ``rand()`` in [0, 1).
    """
    if retry_after is not None:
        return min(max(0.0, retry_after), cap if retry_after_cap is None else retry_after_cap)
    return min(base * 2.0 ** min(attempt, 64), cap) * (1 - JITTER * rand())


def retries_spent(max_retries: int, blind: int, paced: int, retry_after: float | None) -> bool:
    """Whether a call that just failed may not be retried again: ``max_retries`` retries of each kind — after
    failures without a ``Retry-After`` (``blind``) and after a server's ``Retry-After`` (``paced``: the server
    scheduling the request, not a sign that it fails) — are the most a call gets."""
    return (blind if retry_after is None else paced) >= max_retries


def scrub(text: str, secret: str | None) -> str:
    """``text`` on one line with ``secret`` replaced by ``***`` where it appears as a token of its own (not inside a
    longer word, so a short key cannot garble the message: key ``x`` leaves "max exceeded" alone), and any
    ``key=…`` query parameter masked."""
    text = " ".join(str(text).split())
    text = re.sub(r"([?&]key=)[^&\s\"']+", r"\1***", text)
    if secret:
        text = re.sub(rf"(?<![\w-]){re.escape(secret)}(?![\w-])", "***", text)
    return text


def check_endpoint_url(url: str, flag: str = "--endpoint") -> str:
    """``url`` if it is an http(s) URL a client can call (scheme, host, a port in range), else a one-line
    ``ValueError`` that says what is wrong, before any request is made; ``flag`` names the option it came from."""
    if not url.strip():
        raise ValueError(f"{flag} is empty; give the server's base URL, e.g. http://127.0.0.1:8000/v1")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"{flag} must be an http(s) URL such as https://api.openai.com/v1, got {url!r}")
    try:
        parts = urlsplit(url)
        port = parts.port  # a port out of range or not a number raises here
    except ValueError as exc:
        raise ValueError(f"{flag} {url!r} is not a valid URL ({exc}); e.g. http://127.0.0.1:8000/v1") from None
    if not parts.hostname:
        raise ValueError(f"{flag} {url!r} names no host; e.g. http://127.0.0.1:8000/v1")
    if port == 0:
        raise ValueError(f"{flag} {url!r}: port 0 cannot be called; give the server's port")
    return url


class RateLimiter:
    """At most one request start per ``interval`` seconds across all threads (``interval`` 0: no limit)."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval, self._clock = interval, clock
        self._next: float | None = None
        self._lock = threading.Lock()

    def wait(self, sleep: Callable[[float], Any]) -> None:
        """Sleep (with ``sleep``) until this request may start."""
        if self.interval <= 0:
            return
        with self._lock:
            now = self._clock()
            slot = now if self._next is None else max(now, self._next)
            self._next = slot + self.interval
        if slot > now:
            sleep(slot - now)


@dataclass(frozen=True)
class RetryRules:
    """Which failures of an API are worth another attempt: the transient HTTP statuses (``any_5xx``: every 5xx too)
    and whether a refused connection is (``False``: :class:`Unreachable` at once)."""

    statuses: frozenset[int] = frozenset({408, 409, 429})
    any_5xx: bool = True
    retry_refused: bool = False

    def transient(self, status: int) -> bool:
        """Whether an answer with this HTTP status is worth another attempt."""
        return status in self.statuses or (self.any_5xx and 500 <= status < 600)


class Unreachable(Exception):
    """The server cannot be reached at all (refused connection, unknown host, connect timeout, a URL no client can
    call): retrying does not help. ``kind`` says which; the caller words the message for its user."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class BadReply(ValueError):
    """A 200 answer that is not what was asked for (truncated, HTML, missing fields): worth another attempt."""


class _BodyProblem(Exception):
    """The body could not be read whole (too large, too slow, the connection dropped while reading)."""


@dataclass(frozen=True)
class Answer:
    """An HTTP answer read whole: status, headers and body (what ``parse`` and ``fatal`` are given)."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes
    encoding: str | None = None

    @property
    def text(self) -> str:
        """The body as text (its declared encoding, else UTF-8; undecodable bytes replaced)."""
        return self.content.decode(self.encoding or "utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON (a ``ValueError`` when it is not)."""
        return json.loads(self.content)


@dataclass(frozen=True)
class Attempt:
    """One request's result: the parsed ``value`` (``ok``), or what went wrong and whether another attempt is worth
    it (``retry``, with the server's ``retry_after`` hint in seconds)."""

    value: Any = None
    ok: bool = False
    problem: str = ""
    retry: bool = False
    retry_after: float | None = None
    status: int | None = None
    detail: str = ""


@dataclass
class Outcome:
    """The end of one call: the parsed ``value``, or the reasons it failed (``final``: not worth retrying, e.g. a
    client error; ``cancelled``: the caller stopped), after ``attempts`` requests."""

    value: Any = None
    problems: list[str] = field(default_factory=list)
    attempts: int = 0
    status: int | None = None
    final: bool = False
    cancelled: bool = False
    detail: str = ""
    """A final answer's body, scrubbed (what the server said)."""

    @property
    def ok(self) -> bool:
        """Whether the call got its answer."""
        return not self.problems and not self.cancelled


class HttpClient:
    """One session, one retry policy, one rate limiter and one secret rule for an API's calls (see the module doc).

    ``max_retries`` retries of each kind (:func:`retries_spent`); ``backoff_base``/``backoff_max`` the delays without a
    ``Retry-After``, ``retry_after_max`` the longest ``Retry-After`` obeyed (None: ``backoff_max``; :func:`retry_delay`);
    ``timeout`` seconds for an answer, headers and whole body; ``connect_timeout`` for the connection;
    ``requests_per_minute`` the rate limit (None: none); ``pool_size`` the connections kept open (the concurrency of
    the caller's threads, which share the session); ``secret`` what is scrubbed from messages. ``sleep``/``clock``/
    ``jitter`` are injectable for tests (``sleep`` may be replaced per call: a run's stop event ends a wait early).
    """

    def __init__(
        self,
        *,
        rules: RetryRules = RetryRules(),
        max_retries: int = 5,
        backoff_base: float = 1.0,
        backoff_max: float = 60.0,
        retry_after_max: float | None = None,
        timeout: float = 60.0,
        connect_timeout: float = 10.0,
        requests_per_minute: float | None = None,
        pool_size: int = DEFAULT_CONCURRENCY,
        secret: str | None = None,
        max_bytes: int = MAX_REPLY_BYTES,
        sleep: Callable[[float], Any] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        if max_retries < 0 or backoff_base < 0 or backoff_max < 0 or timeout <= 0 or connect_timeout <= 0:
            raise ValueError("max_retries, backoff_base and backoff_max must be >= 0, timeouts > 0")
        if requests_per_minute is not None and requests_per_minute <= 0:
            raise ValueError(f"--requests-per-minute must be > 0, got {requests_per_minute!r}")
        self.rules, self.max_retries = rules, max_retries
        self.backoff_base, self.backoff_max = backoff_base, backoff_max
        self.retry_after_max = backoff_max if retry_after_max is None else max(retry_after_max, backoff_max)
        self.timeout, self.connect_timeout, self.max_bytes = timeout, connect_timeout, max_bytes
        self.secret = secret or None
        self.sleep, self.jitter, self._clock = sleep, jitter, clock
        self.limiter = RateLimiter(0.0 if requests_per_minute is None else 60.0 / requests_per_minute, clock)
        self.session = requests.Session()
        adapter = HTTPAdapter(pool_connections=1, pool_maxsize=max(1, pool_size))
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self._lock = threading.Lock()
        self.calls = 0
        """HTTP requests sent so far (every attempt counts)."""

    def scrub(self, text: str) -> str:
        """``text`` fit for a message: one line, the secret masked (:func:`scrub`)."""
        return scrub(text, self.secret)

    def backoff(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry ``attempt + 1`` (:func:`retry_delay` with this client's settings)."""
        return retry_delay(
            attempt,
            retry_after,
            base=self.backoff_base,
            cap=self.backoff_max,
            rand=self.jitter,
            retry_after_cap=self.retry_after_max,
        )

    def _read(self, resp: requests.Response, started: float) -> bytes:
        """The whole body within the deadline (``timeout`` seconds from the request's start) and the size cap.

        The body is read as it arrives (urllib3's ``read1``), so a server that drips it is cut off at the deadline:
        each read waits at most the socket's read timeout, and the deadline is checked between reads."""
        chunks, size = [], 0
        try:
            while True:
                if self._clock() - started > self.timeout:
                    raise _BodyProblem(f"no complete answer within {self.timeout:g} s")
                piece = resp.raw.read1(64 * 1024, decode_content=True)
                if not piece:
                    break
                size += len(piece)
                if size > self.max_bytes:
                    raise _BodyProblem(f"reply larger than {self.max_bytes} bytes")
                chunks.append(piece)
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise _BodyProblem(f"connection dropped while reading ({type(exc).__name__})") from None
        finally:
            resp.close()
        return b"".join(chunks)

    def attempt(
        self,
        method: str,
        url: str,
        *,
        parse: Callable[[Answer], Any],
        fatal: Callable[[int, Answer], Exception | None] | None = None,
        **kwargs: Any,
    ) -> Attempt:
        """One request, no waiting: ``parse`` turns a 200 answer into the value (raising :class:`BadReply` for one
        that is not); ``fatal(status, answer)`` may return an exception that ends the whole run (a rejected key, an
        unknown model), raised at once. The result says whether it is worth another attempt (a transient status, a
        dropped connection, a timeout, a body that could not be read whole) and the server's ``Retry-After``. A
        refused connection is worth another attempt or raised as :class:`Unreachable`, as the rules say. The rate
        limit is the caller's (:meth:`request` waits for it; a scheduler of many calls waits once per attempt)."""
        with self._lock:
            self.calls += 1
        try:
            started = self._clock()
            resp = self.session.request(
                method, url, timeout=(self.connect_timeout, self.timeout), stream=True, **kwargs
            )
            answer = Answer(resp.status_code, resp.headers, self._read(resp, started), resp.encoding)
        except requests.ConnectionError as exc:
            reason = getattr(exc.args[0], "reason", None) if exc.args else None
            refused = isinstance(exc, requests.ConnectTimeout) or isinstance(
                reason, urllib3.exceptions.NewConnectionError
            )
            if refused and not self.rules.retry_refused:
                timed_out = isinstance(exc, requests.ConnectTimeout)
                raise Unreachable("connect timeout" if timed_out else "connection refused or unknown host") from None
            if refused:
                return Attempt(problem=f"connection error ({type(exc).__name__}: {self.scrub(str(exc))})", retry=True)
            return Attempt(problem=f"connection dropped ({type(exc).__name__})", retry=True)
        except requests.Timeout as exc:
            return Attempt(problem=f"no answer within {self.timeout:g} s ({type(exc).__name__})", retry=True)
        except requests.RequestException as exc:  # a request that cannot be made (a URL no adapter takes)
            return Attempt(problem=f"request failed ({type(exc).__name__}: {self.scrub(str(exc))})")
        except _BodyProblem as exc:
            return Attempt(problem=str(exc), retry=True)
        status = answer.status_code
        if status == 200:
            try:
                return Attempt(value=parse(answer), ok=True, status=status)
            except BadReply as exc:
                return Attempt(problem=str(exc), retry=True, status=status)
        error = fatal(status, answer) if fatal is not None else None
        if error is not None:
            raise error
        if not self.rules.transient(status):
            return Attempt(problem=f"HTTP {status}", status=status, detail=self.scrub(answer.text)[:1000])
        return Attempt(
            problem=f"HTTP {status}",
            retry=True,
            status=status,
            retry_after=retry_after_from_headers(answer.headers, time.time()),
        )

    def request(
        self,
        method: str,
        url: str,
        *,
        parse: Callable[[Answer], Any],
        fatal: Callable[[int, Answer], Exception | None] | None = None,
        stop: threading.Event | None = None,
        sleep: Callable[[float], Any] | None = None,
        on_retry: Callable[[int, str, float], Any] | None = None,
        **kwargs: Any,
    ) -> Outcome:
        """One call with retries (:meth:`attempt` until it succeeds, fails for good or its retries are spent —
        :func:`retries_spent` — waiting :meth:`backoff` between attempts): ``final`` with the server's words in ``detail`` for an answer
        not worth retrying. ``stop``, once set, ends a backoff early and stops further attempts (``cancelled``).
        ``on_retry(retry number, problem, wait)`` is told of each retry before its wait (a log line). ``kwargs`` go
        to the request (``json``, ``data``, ``params``, ``headers``)."""
        pause = sleep or self.sleep
        problems: list[str] = []
        status: int | None = None
        n = blind = paced = 0  # attempts; retries without a Retry-After (they advance the backoff); paced retries
        while True:
            if stop is not None and stop.is_set():
                return Outcome(problems=problems, attempts=n, status=status, cancelled=True)
            self.limiter.wait(pause)
            tried = self.attempt(method, url, parse=parse, fatal=fatal, **kwargs)
            n += 1
            status = tried.status if tried.status is not None else status
            if tried.ok:
                return Outcome(value=tried.value, attempts=n, status=status)
            problems.append(tried.problem)
            if not tried.retry:
                return Outcome(problems=problems, attempts=n, status=status, final=True, detail=tried.detail)
            if retries_spent(self.max_retries, blind, paced, tried.retry_after):
                return Outcome(problems=problems, attempts=n, status=status)
            if stop is not None and stop.is_set():
                continue
            delay = self.backoff(blind, tried.retry_after)
            blind, paced = (blind + 1, paced) if tried.retry_after is None else (blind, paced + 1)
            if on_retry is not None:
                on_retry(n, problems[-1], delay)
            pause(delay)

    def stream(self, url: str, write: Callable[[bytes], Any], *, chunk: int = 1 << 20) -> Outcome:
        """Download ``url``, handing each chunk of the body to ``write`` as it arrives (a file of any size, up to
        ``max_bytes``): one attempt, since a body half written cannot be taken back; the outcome says what failed.
        A server that stops sending for ``timeout`` seconds is given up on."""
        with self._lock:
            self.calls += 1
        size = 0
        try:
            with self.session.get(url, stream=True, timeout=(self.connect_timeout, self.timeout)) as resp:
                if resp.status_code != 200:
                    return Outcome(
                        problems=[f"HTTP {resp.status_code}"], attempts=1, status=resp.status_code, final=True
                    )
                for piece in resp.iter_content(chunk):
                    size += len(piece)
                    if size > self.max_bytes:
                        return Outcome(problems=[f"larger than {self.max_bytes} bytes"], attempts=1, final=True)
                    write(piece)
        except (requests.RequestException, urllib3.exceptions.HTTPError) as exc:
            return Outcome(problems=[f"{type(exc).__name__}"], attempts=1, final=True)
        return Outcome(value=size, attempts=1, status=200)
