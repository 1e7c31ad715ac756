"""The one HTTP client of the library: every remote call (OpenAI-compatible endpoints, the Perspective API, an
embeddings endpoint, a download) goes through :class:`HttpClient` — one ``urllib3`` connection pool, one retry policy,
one rate limiter, one rule for secrets in messages.

Why ``urllib3`` itself and not ``requests`` on top of it: a run keeps dozens of requests in flight from one Python
process, whose threads share one interpreter lock, and what ``requests`` adds to every call (a session's cookies and
hooks, environment and ``.netrc`` lookups, its own response object) made the client's CPU, not the server, set the
pace of a run at high concurrency. What ``requests`` adds that a user relies on is kept: proxies from the environment (``HTTPS_PROXY``,
``NO_PROXY``, …), certificates from ``certifi`` (or ``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE``), redirects followed,
gzip bodies decoded, JSON and query parameters encoded.

The retry policy (:mod:`queerbench.base.retry`) is the one serving clients use.

What is worth retrying is a fact about the API, declared by its caller (:class:`RetryRules`): which HTTP statuses
are transient, and whether a refused connection is (a server one runs oneself that is not running is not: the run
stops at once, naming the URL). Whatever the API, a reply has a deadline (``timeout`` covers the wait for the headers
and the whole body, so a server that sends a byte every few seconds is cut off) and a size cap (a server that ignores
``max_tokens`` cannot fill the disk), and a secret is scrubbed from every message where it appears as a token.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlencode, urlsplit, urlunsplit

import certifi
import urllib3
from urllib3.exceptions import (
    ConnectTimeoutError,
    HTTPError,
    LocationValueError,
    MaxRetryError,
    NewConnectionError,
    ProxyError,
    ReadTimeoutError,
    SSLError,
)

from queerbench.base import env
from queerbench.base.redact import redact_url, scrub
from queerbench.base.retry import (
    JITTER,
    RateLimiter,
    RetryRules,
    retries_spent,
    retry_after_from_headers,
    retry_after_seconds,
    retry_delay,
)

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
    "join_url",
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

_DEFAULT_RULES = RetryRules()
"""Retry 408, 409, 429 and every 5xx; a refused connection is :class:`Unreachable`."""

_HEADERS = {"User-Agent": "queerbench", "Accept": "*/*", "Accept-Encoding": "gzip, deflate"}
"""Sent with every request (a caller's headers add to these or replace them)."""

_RETRIES = urllib3.Retry(total=None, connect=0, read=False, status=0, other=0, redirect=10)
"""urllib3's own retries: none (the retry policy is :class:`HttpClient`'s), but redirects followed, as ``requests``
does."""

_CHARSET = re.compile(r"charset=([\w.:-]+)", re.IGNORECASE)


def check_endpoint_url(url: str, flag: str = "--endpoint") -> str:
    """``url`` if it is an http(s) URL a client can call (scheme, host, a port in range), else a one-line
    ``ValueError`` that says what is wrong, before any request is made; ``flag`` names the option it came from."""
    if not url.strip():
        raise ValueError(f"{flag} is empty; give the server's base URL, e.g. http://127.0.0.1:8000/v1")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"{flag} must be an http(s) URL such as https://api.openai.com/v1, got {redact_url(url)!r}")
    shown = redact_url(url)  # a message never repeats the credentials a URL carries
    try:
        parts = urlsplit(url)
        port = parts.port  # a port out of range or not a number raises here
    except ValueError as exc:
        raise ValueError(f"{flag} {shown!r} is not a valid URL ({exc}); e.g. http://127.0.0.1:8000/v1") from None
    if not parts.hostname:
        raise ValueError(f"{flag} {shown!r} names no host; e.g. http://127.0.0.1:8000/v1")
    if port == 0:
        raise ValueError(f"{flag} {shown!r}: port 0 cannot be called; give the server's port")
    return url


def join_url(base: str, path: str) -> str:
    """``base`` with ``path`` added to its path, before its query (``http://h/v1?api-version=1`` and ``chat``:
    ``http://h/v1/chat?api-version=1``): a query a provider needs, or a key it takes there, stays a query."""
    parts = urlsplit(base)
    joined = parts.path.rstrip("/") + "/" + path.lstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, joined, parts.query, parts.fragment))


def _basic_auth(url: str, headers: dict[str, str]) -> str:
    """``url`` without its userinfo, which becomes an ``Authorization: Basic`` header unless the caller sent one."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    if not any(name.lower() == "authorization" for name in headers):
        user, _, password = userinfo.partition(":")
        headers.update(urllib3.util.make_headers(basic_auth=f"{unquote(user)}:{unquote(password)}"))
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


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
    ``requests_per_minute`` the rate limit (None: none); ``pool_size`` the connections kept open per host (the
    concurrency of the caller's threads, which share the pool); ``secret`` what is scrubbed from messages. ``sleep``/``clock``/
    ``jitter`` are injectable for tests (``sleep`` may be replaced per call: a run's stop event ends a wait early).
    """

    def __init__(
        self,
        *,
        rules: RetryRules = _DEFAULT_RULES,
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
        self._pool_size = max(1, pool_size)
        self._proxies = env.proxies()  # the environment's (HTTPS_PROXY, …), as requests reads them
        self._pools: dict[str | None, urllib3.PoolManager] = {}
        self._bypass: dict[str, bool] = {}
        self._lock = threading.Lock()
        self.calls = 0
        """HTTP requests sent so far (every attempt counts)."""

    def _pool(self, url: str) -> urllib3.PoolManager:
        """The connection pool for ``url``: direct, or through the environment's proxy for its scheme unless
        ``NO_PROXY`` exempts its host; each keeps up to ``pool_size`` connections open per host."""
        parts = urlsplit(url)
        proxy = self._proxies.get(parts.scheme) or self._proxies.get("all")
        host = parts.hostname or ""
        with self._lock:
            if proxy and self._bypass.setdefault(host, env.no_proxy(host)):
                proxy = None
            pool = self._pools.get(proxy)
            if pool is None:
                settings: dict[str, Any] = {
                    "num_pools": 4,
                    "maxsize": self._pool_size,
                    "retries": _RETRIES,
                    "cert_reqs": "CERT_REQUIRED",
                    "ca_certs": env.ca_bundle() or certifi.where(),
                }
                pool = urllib3.ProxyManager(proxy, **settings) if proxy else urllib3.PoolManager(**settings)
                self._pools[proxy] = pool
        return pool

    def _send(
        self,
        method: str,
        url: str,
        *,
        data: str | bytes | None = None,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> urllib3.BaseHTTPResponse:
        """Send one request; the answer's body is left to be read (``data`` as is, ``json`` encoded, ``params``
        added to the query). urllib3's errors are raised as they are (a :class:`MaxRetryError` wraps a connection
        that could not be made)."""
        sent = {**_HEADERS, **(headers or {})}
        body = data
        if json is not None:
            body = _json_dumps(json)
            sent.setdefault("Content-Type", "application/json")
        if isinstance(body, str):
            body = body.encode("utf-8")
        if params:
            url += ("&" if urlsplit(url).query else "?") + urlencode(params)
        url = _basic_auth(url, sent)
        return self._pool(url).request(
            method,
            url,
            body=body,
            headers=sent,
            timeout=urllib3.Timeout(connect=self.connect_timeout, read=self.timeout),
            preload_content=False,
            decode_content=True,
        )

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

    def _read(self, resp: urllib3.BaseHTTPResponse, started: float) -> bytes:
        """The whole body within the deadline (``timeout`` seconds from the request's start) and the size cap.

        The body is read as it arrives (urllib3's ``read1``), so a server that drips it is cut off at the deadline:
        each read waits at most the socket's read timeout, and the deadline is checked between reads. A body read
        whole gives its connection back to the pool (kept open for the next request); any other is closed."""
        chunks, size, whole = [], 0, False
        try:
            while True:
                if self._clock() - started > self.timeout:
                    raise _BodyProblem(f"no complete answer within {self.timeout:g} s")
                piece = resp.read1(64 * 1024, decode_content=True)
                if not piece:
                    break
                size += len(piece)
                if size > self.max_bytes:
                    raise _BodyProblem(f"reply larger than {self.max_bytes} bytes")
                chunks.append(piece)
            whole = True
        except (HTTPError, OSError) as exc:
            raise _BodyProblem(f"connection dropped while reading ({type(exc).__name__})") from None
        finally:
            if whole:
                resp.release_conn()
            else:
                resp.close()
        return b"".join(chunks)

    def _failed(self, exc: BaseException, url: str) -> Attempt:
        """A request that got no answer: worth another attempt (a dropped connection, a timeout), not (a URL that
        cannot work), or :class:`Unreachable` (a refused connection, an unknown host, a connect timeout) as the
        rules say."""
        cause = exc.reason if isinstance(exc, MaxRetryError) and exc.reason is not None else exc
        if isinstance(cause, ProxyError) and isinstance(cause.original_error, BaseException):
            cause = cause.original_error
        if isinstance(cause, NewConnectionError | ConnectTimeoutError):
            if not self.rules.retry_refused:
                timed_out = not isinstance(cause, NewConnectionError)
                raise Unreachable("connect timeout" if timed_out else "connection refused or unknown host") from None
            said = self.scrub(f"{cause} ({url})")
            return Attempt(problem=f"connection error ({type(cause).__name__}: {said})", retry=True)
        if isinstance(cause, ReadTimeoutError | TimeoutError):
            return Attempt(problem=f"no answer within {self.timeout:g} s (ReadTimeout)", retry=True)
        if isinstance(cause, LocationValueError):  # a URL no request can be made to
            return Attempt(problem=f"request failed ({type(cause).__name__}: {self.scrub(f'{cause} ({url})')})")
        name = "SSLError" if isinstance(cause, SSLError) else type(cause).__name__
        return Attempt(problem=f"connection dropped ({name})", retry=True)

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
            resp = self._send(method, url, **kwargs)
            answer = Answer(resp.status, resp.headers, self._read(resp, started), _charset(resp.headers))
        except _BodyProblem as exc:
            return Attempt(problem=str(exc), retry=True)
        except (HTTPError, OSError) as exc:
            return self._failed(exc, url)
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
            resp = self._send("GET", url)
            try:
                if resp.status != 200:
                    return Outcome(problems=[f"HTTP {resp.status}"], attempts=1, status=resp.status, final=True)
                for piece in resp.stream(chunk, decode_content=True):
                    size += len(piece)
                    if size > self.max_bytes:
                        return Outcome(problems=[f"larger than {self.max_bytes} bytes"], attempts=1, final=True)
                    write(piece)
            finally:
                resp.close()
        except (HTTPError, OSError) as exc:
            cause = exc.reason if isinstance(exc, MaxRetryError) and exc.reason is not None else exc
            return Outcome(problems=[type(cause).__name__], attempts=1, final=True)
        return Outcome(value=size, attempts=1, status=200)


def _json_dumps(value: Any) -> str:
    """A request's JSON body (``json`` is a parameter name in :meth:`HttpClient._send`)."""
    return json.dumps(value)


def _charset(headers: Mapping[str, str]) -> str | None:
    """The charset a ``Content-Type`` header declares, if any."""
    found = _CHARSET.search(headers.get("Content-Type") or "")
    return found.group(1) if found else None
