"""The ``perspective`` toxicity scorer: Google's Perspective API (``comments:analyze``) over plain ``requests``.

**The API is sunset: Jigsaw announced it will no longer be in service after 2026**, and new keys/quota are no longer
granted. This client exists to replay and extend the paper's measurements while it still runs, and its persistent
cache keeps every raw answer so results stay reproducible after the shutdown.

- Key: only from the environment (``PERSPECTIVE_API_KEY``); missing → :class:`PerspectiveError` at construction.
  It is sent as the ``key`` query parameter and scrubbed from every error message, and from urllib3's debug log
  lines; it never reaches the cache, :meth:`PerspectiveScorer.describe` or any output.
- Endpoint: ``PERSPECTIVE_API_URL`` overrides the default (proxies, tests).
- Request: the five paper attributes plus ``SEVERE_TOXICITY``, ``languages: ["en"]``, ``doNotStore: true``.
- Rate: at most ``qps`` requests per second (default 1, the API's default quota).
- Failures: 429, 500, 502–504, timeouts, connection errors and malformed answers are retried at most
  ``max_retries`` times by the library's one HTTP client (:class:`queerbench.base.http.HttpClient`: the server's
  ``Retry-After`` sets the wait, else exponential backoff with jitter); then :class:`PerspectiveError` names the
  text's index. Other HTTP errors (400 bad text, 403 bad key, 501) fail at once. Nothing is ever silently dropped.
- Each answer is written to the cache as it arrives, so a crash loses nothing and a rerun makes no calls.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from queerbench.base import env
from queerbench.base.http import Answer, BadReply, HttpClient, RetryRules, scrub
from queerbench.scoring.toxicity_base import ALL_ATTRIBUTES, ToxicityScorer

__all__ = ["DEFAULT_URL", "KEY_ENV", "URL_ENV", "PerspectiveError", "PerspectiveScorer"]

logger = logging.getLogger(__name__)

KEY_ENV = env.PERSPECTIVE_KEY
URL_ENV = env.PERSPECTIVE_URL
DEFAULT_URL = "https://commentanalyzer.googleapis.com/v1alpha1/comments:analyze"
RETRY_RULES = RetryRules(statuses=frozenset({429, 500, 502, 503, 504}), any_5xx=False, retry_refused=True)
"""What the Perspective API answers that is worth another attempt (a refused connection too: a proxy restarting)."""
_KEY_IN_URL = re.compile(r"([?&]key=)[^&\s\"']+")


class PerspectiveError(RuntimeError):
    """The Perspective API could not score a text (after retries where retrying made sense)."""


class _ScrubKeyFilter(logging.Filter):
    """Rewrites ``?key=…`` in log records (urllib3 logs request URLs at DEBUG) to ``?key=***``."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "key=" in message:
            record.msg, record.args = _KEY_IN_URL.sub(r"\1***", message), ()
        return True


_FILTER = _ScrubKeyFilter()


def _install_log_scrubber() -> None:
    for name in ("urllib3.connectionpool", "requests"):
        log = logging.getLogger(name)
        if _FILTER not in log.filters:
            log.addFilter(_FILTER)


class PerspectiveScorer(ToxicityScorer):
    """Perspective API client (see the module docstring; **sunset after 2026**).

    ``qps``: request rate limit. ``max_retries``: retries per text after the first attempt. ``backoff_base`` /
    ``backoff_max``: the wait in seconds before a retry (the server's ``Retry-After`` when sent, else
    ``base·2^attempt`` less 0–25 % jitter; capped at ``backoff_max``: :func:`~queerbench.base.http.retry_delay`).
    ``timeout``: per-request timeout in seconds. ``max_text_bytes``: texts longer than this (UTF-8) are refused
    before any call, as the API would reject them.
    """

    name = "perspective"
    attributes = ALL_ATTRIBUTES

    def __init__(
        self,
        *,
        qps: float = 1.0,
        max_retries: int = 6,
        backoff_base: float = 1.0,
        backoff_max: float = 64.0,
        timeout: float = 30.0,
        max_text_bytes: int = 3000,
        cache_dir: str | Path | None = None,
    ) -> None:
        super().__init__(cache_dir=cache_dir)
        key = env.perspective_key()
        if not key:
            raise PerspectiveError(
                f"the perspective scorer needs an API key in the environment variable {KEY_ENV} (the API is sunset "
                "after 2026 and new keys may be unobtainable); use toxicity='embedded' for an offline scorer"
            )
        if qps <= 0:
            raise ValueError(f"qps must be > 0, got {qps}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if timeout <= 0 or backoff_base < 0 or backoff_max < 0:
            raise ValueError("timeout must be > 0 and backoff_base/backoff_max >= 0")
        self._key = key
        self.url = env.perspective_url() or DEFAULT_URL
        if _KEY_IN_URL.search(self.url):
            raise PerspectiveError(f"{URL_ENV} must not carry a key= parameter; put the key in {KEY_ENV}")
        self.qps = float(qps)
        self.max_retries = int(max_retries)
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.timeout = float(timeout)
        self.max_text_bytes = int(max_text_bytes)
        self._sleep: Callable[[float], None] = time.sleep
        self._jitter: Callable[[], float] = random.random  # the backoff's jitter source (tests fix it)
        self._clock: Callable[[], float] = time.monotonic  # the rate limit's clock (tests advance it with _sleep)
        self.client = HttpClient(
            rules=RETRY_RULES,
            max_retries=self.max_retries,
            backoff_base=self.backoff_base,
            backoff_max=self.backoff_max,
            timeout=self.timeout,
            requests_per_minute=60.0 * self.qps,
            pool_size=1,
            secret=key,
            sleep=lambda seconds: self._sleep(seconds),
            clock=lambda: self._clock(),
            jitter=lambda: self._jitter(),
        )
        _install_log_scrubber()

    @property
    def calls(self) -> int:
        """HTTP requests made by this instance (every attempt counts)."""
        return self.client.calls

    def describe(self) -> dict[str, Any]:
        """Endpoint (without key), attributes, languages and options that change the scores."""
        return {
            "scorer": "perspective",
            "name": self.name,
            "endpoint": self.url,
            "attributes": list(self.attributes),
            "languages": ["en"],
            "doNotStore": True,
            "note": "Perspective API, sunset after 2026; model versions drift over time",
        }

    def _scrub(self, text: str) -> str:
        return scrub(text, self._key)

    def _check_texts(self, texts: list[str], indices: list[int]) -> None:
        for text, index in zip(texts, indices, strict=True):
            if not text.strip():
                raise ValueError(f"text #{index} is empty; the Perspective API rejects empty texts: remove or fix it")
            size = len(text.encode("utf-8"))
            if size > self.max_text_bytes:
                raise ValueError(
                    f"text #{index} has {size} bytes, over the Perspective limit of {self.max_text_bytes} bytes "
                    f"{text[:60]!r}…; shorten it"
                )

    def _body(self, text: str) -> dict[str, Any]:
        return {
            "comment": {"text": text, "type": "PLAIN_TEXT"},
            "requestedAttributes": {a: {} for a in self.attributes},
            "languages": ["en"],
            "doNotStore": True,
            "spanAnnotations": False,
        }

    def _parse(self, answer: Answer) -> dict[str, float]:
        """The attribute scores of an answer; a malformed one is :class:`~queerbench.base.http.BadReply` (retried)."""
        try:
            payload = answer.json()
            scores = {a: float(payload["attributeScores"][a]["summaryScore"]["value"]) for a in self.attributes}
        except (ValueError, KeyError, TypeError):
            raise BadReply("malformed answer (not JSON with attributeScores.*.summaryScore.value)") from None
        if not all(0.0 <= v <= 1.0 for v in scores.values()):
            raise BadReply(f"scores outside [0, 1]: {scores}")
        return scores

    def _score_one(self, text: str, index: int) -> dict[str, float]:
        def logged(retry: int, problem: str, delay: float) -> None:
            logger.warning(
                "perspective: text #%d: %s; retry %d/%d in %.2f s", index, problem, retry, self.max_retries, delay
            )

        outcome = self.client.request(
            "POST", self.url, params={"key": self._key}, json=self._body(text), parse=self._parse, on_retry=logged
        )
        if outcome.ok:
            return outcome.value
        where = f"Perspective API failed on text #{index} ({text[:60]!r})"
        if outcome.final and outcome.status is not None:
            raise PerspectiveError(f"{where}: HTTP {outcome.status} (not retried): {outcome.detail[:300]}")
        if outcome.final:
            raise PerspectiveError(f"{where}: {outcome.problems[-1]}")
        raise PerspectiveError(
            f"{where} after {outcome.attempts} attempts; last error: {outcome.problems[-1]}. Scores already received "
            "are cached; rerun to resume."
        )

    def _score_batches(
        self, texts: list[str], indices: list[int], *, progress: bool
    ) -> Iterator[list[dict[str, float]]]:
        from tqdm.auto import tqdm

        for text, index in tqdm(list(zip(texts, indices, strict=True)), desc="perspective", disable=not progress):
            yield [self._score_one(text, index)]  # one answer per chunk: cached the moment it arrives
