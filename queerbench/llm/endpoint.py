"""OpenAI-compatible chat endpoints (``POST {base_url}/chat/completions``): rate limit, retries, key hygiene."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import requests

from queerbench.llm.settings import GenerationSettings, Reply

__all__ = ["OpenAIChatRunner"]

log = logging.getLogger(__name__)


class OpenAIChatRunner:
    """Any OpenAI-compatible ``POST {base_url}/chat/completions`` endpoint, with a rate limit and retries.

    The API key is read from the environment variable ``api_key_env`` (default ``OPENAI_API_KEY``) and only ever
    sent in the ``Authorization`` header; it is scrubbed from every error message and never stored. 429, 5xx,
    connection failures and malformed replies are retried with exponential backoff (``Retry-After`` honoured, capped
    at ``backoff_max``); other 4xx answers fail at once. ``sleep``/``clock`` are injectable for tests.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        requests_per_minute: float = 60.0,
        max_retries: int = 5,
        backoff_base: float = 1.0,
        backoff_max: float = 60.0,
        timeout: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"--endpoint must be an http(s) URL such as https://api.openai.com/v1, got {base_url!r}")
        if not model:
            raise ValueError("--endpoint needs --model NAME (the model name the endpoint serves)")
        if requests_per_minute <= 0 or max_retries < 0:
            raise ValueError("requests_per_minute must be > 0 and max_retries >= 0")
        self.base_url = base_url.rstrip("/")
        self.model_name = model
        self.name = f"{self.base_url}#{model}"
        self.api_key_env = api_key_env
        self._key = os.environ.get(api_key_env) or None
        if self._key is None:
            log.warning("environment variable %s is not set: calling %s without an API key", api_key_env, base_url)
        self.min_interval = 60.0 / requests_per_minute
        self.max_retries, self.backoff_base, self.backoff_max, self.timeout = (
            max_retries,
            backoff_base,
            backoff_max,
            timeout,
        )
        self._sleep, self._clock = sleep, clock
        self._last_call: float | None = None
        self._session = requests.Session()
        self.calls = 0

    def fingerprint(self) -> dict[str, Any]:
        """Endpoint URL and model name (never the key)."""
        return {"kind": "openai-chat", "base_url": self.base_url, "model": self.model_name}

    def _scrub(self, text: str) -> str:
        return text.replace(self._key, "***") if self._key else text

    def _throttle(self) -> None:
        now = self._clock()
        if self._last_call is not None and now - self._last_call < self.min_interval:
            self._sleep(self.min_interval - (now - self._last_call))
        self._last_call = self._clock()

    def _backoff(self, attempt: int, retry_after: str | None) -> float:
        delay = self.backoff_base * (2**attempt)
        if retry_after:
            with contextlib.suppress(ValueError):
                delay = max(delay, float(retry_after))
        return min(delay, self.backoff_max)

    def _call(self, prompt: str, seed: int, settings: GenerationSettings) -> Reply:
        body = {
            "model": self.model_name,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": settings.temperature,
            "top_p": settings.top_p,
            "max_tokens": settings.max_new_tokens,
            "seed": seed,
            "n": 1,
        }
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        problems: list[str] = []
        for attempt in range(self.max_retries + 1):
            self._throttle()
            self.calls += 1
            retry_after = None
            try:
                resp = self._session.post(
                    f"{self.base_url}/chat/completions", data=json.dumps(body), headers=headers, timeout=self.timeout
                )
            except requests.RequestException as exc:
                problems.append(f"connection failed ({type(exc).__name__})")
            else:
                if resp.status_code == 200:
                    try:
                        data = resp.json()
                        text = data["choices"][0]["message"]["content"]
                        if not isinstance(text, str):
                            raise TypeError("content is not a string")
                        return Reply(
                            text,
                            None,
                            {
                                "prompt_format": "chat",
                                "attempts": attempt + 1,
                                "seed": seed,
                                "finish_reason": data["choices"][0].get("finish_reason"),
                            },
                        )
                    except (ValueError, KeyError, IndexError, TypeError) as exc:
                        problems.append(f"malformed reply ({type(exc).__name__}: {self._scrub(str(exc))[:80]})")
                elif resp.status_code == 429 or resp.status_code >= 500 or resp.status_code == 408:
                    problems.append(f"HTTP {resp.status_code}")
                    retry_after = resp.headers.get("Retry-After")
                else:
                    msg = f"HTTP {resp.status_code}: {self._scrub(resp.text)[:200]}"
                    return Reply(None, msg, {"attempts": attempt + 1})
            if attempt < self.max_retries:
                self._sleep(self._backoff(attempt, retry_after))
        return Reply(
            None,
            f"gave up after {self.max_retries + 1} attempts: " + "; ".join(problems),
            {"attempts": self.max_retries + 1},
        )

    def generate(
        self, prompts: Sequence[str], seeds: Sequence[int], settings: GenerationSettings
    ) -> Iterator[tuple[int, Reply]]:
        """One request per prompt, in order, each yielded as soon as it is answered (or has finally failed)."""
        for i, prompt in enumerate(prompts):
            yield i, self._call(prompt, seeds[i], settings)
