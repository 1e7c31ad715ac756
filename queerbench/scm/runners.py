"""Runners: one interface over local transformers causal LMs and OpenAI-compatible chat endpoints.

A runner turns prompts into replies (:meth:`Runner.generate`, a generator that yields each reply as it arrives, so
the caller can persist it at once). :func:`collect` drives a runner over dataset rows × samples through the
:class:`~queerbench.scm.cache.ResponseCache`: cached answers are reused, new ones committed one by one, failures
recorded and counted. Local runners also score fixed answer options (:meth:`TransformersRunner.score_options`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pandas as pd
import requests

from queerbench.scm.cache import ResponseCache, cache_key

__all__ = [
    "DEFAULT_MODEL",
    "GenerationSettings",
    "OpenAIChatRunner",
    "Reply",
    "RunAbortedError",
    "Runner",
    "TransformersRunner",
    "collect",
    "item_seed",
]

log = logging.getLogger(__name__)
DEFAULT_MODEL = "embedded:smollm2-135m-instruct"
"""The model used when neither ``--model`` nor ``--endpoint`` is given: SmolLM2-135M-Instruct (Q4_1 GGUF, pinned)."""


@dataclass(frozen=True)
class GenerationSettings:
    """Decoding settings. Paper: temperature 0.9 for GPT/Gemini, 0.6 with top-p 0.9 for LLaMA (Section 3.2)."""

    temperature: float = 0.6
    top_p: float = 0.9
    max_new_tokens: int = 200
    seed: int = 0
    samples: int = 1
    batch_size: int = 8

    def __post_init__(self) -> None:
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError("temperature must be >= 0 and top-p in (0, 1]")
        if self.max_new_tokens < 1 or self.samples < 1 or self.batch_size < 1:
            raise ValueError("--max-new-tokens, --samples and --batch-size must be at least 1")

    def decoding(self) -> dict[str, Any]:
        """The settings that change a reply (part of the cache key); batch size and sample count are not."""
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_new_tokens": self.max_new_tokens,
            "seed": self.seed,
        }


@dataclass
class Reply:
    """One model reply: ``text`` or, for a failed call, ``error``; ``meta`` records how it was produced."""

    text: str | None
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


class RunAbortedError(RuntimeError):
    """Too many consecutive failures (e.g. the endpoint is down); everything collected so far is in the cache."""


class Runner(Protocol):
    """What :func:`collect` needs from a model backend."""

    name: str

    def fingerprint(self) -> dict[str, Any]:
        """What identifies the model (part of the cache key)."""
        ...

    def generate(
        self, prompts: Sequence[str], seeds: Sequence[int], settings: GenerationSettings
    ) -> Iterator[tuple[int, Reply]]:
        """Yield ``(index into prompts, reply)`` as each reply arrives."""
        ...


def item_seed(seed: int, prompt_id: str, sample: int) -> int:
    """A per-call seed derived from the run seed, the prompt id and the sample index (stable across runs)."""
    return int(hashlib.sha256(f"{seed}:{prompt_id}:{sample}".encode()).hexdigest()[:8], 16)


# ----------------------------------------------------------------------------------------------- transformers ---


def _resolve_model(model: str | None) -> tuple[str, str | None]:
    """Map ``None``/``embedded:…`` to the pinned SmolLM2 GGUF (directory, file name); pass other ids through."""
    if model is None or model == DEFAULT_MODEL:
        from queerbench.sources import fetch

        path = Path(fetch("smollm2_135m_instruct_gguf"))
        return str(path.parent), path.name
    p = Path(model)
    if p.is_file() and p.suffix == ".gguf":
        return str(p.parent), p.name
    return model, None


class TransformersRunner:
    """A local ``AutoModelForCausalLM`` with its chat template (or a plain prompt when it has none).

    Without a chat template the prompt is fed as plain text; this is warned about once and recorded in every
    reply's ``meta['prompt_format']`` (``chat`` or ``plain``) and in the run report.
    """

    def __init__(self, model: str | None = None, *, device: str = "cpu", system_prompt: str | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_id = model or DEFAULT_MODEL
        self.name = self.model_id
        path, gguf = _resolve_model(model)
        kwargs: dict[str, Any] = {"gguf_file": gguf} if gguf else {}
        self.device = (
            "cuda" if device == "auto" and torch.cuda.is_available() else ("cpu" if device == "auto" else device)
        )
        self.tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **kwargs).to(self.device).eval()
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.system_prompt = system_prompt
        self.has_chat_template = bool(getattr(self.tokenizer, "chat_template", None))
        if not self.has_chat_template:
            warnings.warn(
                f"model {self.model_id!r} has no chat template: prompts are fed as plain text "
                "(recorded as prompt_format='plain' in the outputs)",
                stacklevel=2,
            )

    @property
    def prompt_format(self) -> str:
        """``chat`` when the tokenizer's chat template is used, else ``plain``."""
        return "chat" if self.has_chat_template else "plain"

    def fingerprint(self) -> dict[str, Any]:
        """Model id, class and parameter count, and the prompt format."""
        n_params = sum(p.numel() for p in self.model.parameters())
        return {
            "kind": "transformers",
            "model": self.model_id,
            "class": type(self.model).__name__,
            "params": int(n_params),
            "prompt_format": self.prompt_format,
            "system": self.system_prompt,
        }

    def format_prompt(self, prompt: str) -> str:
        """The text the model sees: the chat template with a generation prompt, or the plain prompt + newline."""
        if not self.has_chat_template:
            return prompt + "\n"
        messages = ([{"role": "system", "content": self.system_prompt}] if self.system_prompt else []) + [
            {"role": "user", "content": prompt}
        ]
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def _encode(self, texts: Sequence[str]) -> Any:
        add_special = not self.has_chat_template  # chat templates already contain BOS and friends
        return self.tokenizer(list(texts), return_tensors="pt", padding=True, add_special_tokens=add_special).to(
            self.device
        )

    def generate(
        self, prompts: Sequence[str], seeds: Sequence[int], settings: GenerationSettings
    ) -> Iterator[tuple[int, Reply]]:
        """Sample one reply per prompt, ``settings.batch_size`` at a time (the batch is seeded by its first item)."""
        import torch

        for start in range(0, len(prompts), settings.batch_size):
            idx = list(range(start, min(start + settings.batch_size, len(prompts))))
            enc = self._encode([self.format_prompt(prompts[i]) for i in idx])
            torch.manual_seed(seeds[idx[0]])
            sample = settings.temperature > 0
            gen_kwargs: dict[str, Any] = {
                "max_new_tokens": settings.max_new_tokens,
                "do_sample": sample,
                "pad_token_id": self.tokenizer.pad_token_id,
            }
            if sample:
                gen_kwargs.update(temperature=settings.temperature, top_p=settings.top_p)
            try:
                with torch.no_grad():
                    out = self.model.generate(**enc, **gen_kwargs)
            except Exception as exc:  # one bad batch must not lose the others
                for i in idx:
                    yield i, Reply(None, f"{type(exc).__name__}: {exc}", {"prompt_format": self.prompt_format})
                continue
            new = out[:, enc["input_ids"].shape[1] :]
            for row, i in enumerate(idx):
                text = self.tokenizer.decode(new[row], skip_special_tokens=True).strip()
                yield (
                    i,
                    Reply(
                        text,
                        None,
                        {
                            "prompt_format": self.prompt_format,
                            "seed": seeds[i],
                            "new_tokens": int((new[row] != self.tokenizer.pad_token_id).sum()),
                        },
                    ),
                )

    def score_options(
        self, prompts: Sequence[str], options: Sequence[Sequence[str]], answer_prefix: str, batch_size: int = 8
    ) -> list[list[float]]:
        """Log-probability of each option as the answer: ``log P(" " + option | prompt, answer_prefix)``.

        The context is the formatted prompt followed by ``answer_prefix`` (e.g. ``"Rating:"``); each option is
        tokenised separately and appended with a leading space, and its token log-probabilities are summed (no
        length normalisation: documented choice, see the report). Returns one list of log-probs per prompt.
        """
        import torch

        seqs: list[tuple[int, list[int], int]] = []
        for p_i, (prompt, opts) in enumerate(zip(prompts, options, strict=True)):
            ctx_text = self.format_prompt(prompt) + answer_prefix
            ctx = self.tokenizer(ctx_text, add_special_tokens=not self.has_chat_template)["input_ids"]
            for opt in opts:
                cont = self.tokenizer(" " + opt, add_special_tokens=False)["input_ids"]
                seqs.append((p_i, list(ctx) + list(cont), len(cont)))
        scores: list[float] = []
        pad = self.tokenizer.pad_token_id
        for start in range(0, len(seqs), batch_size):
            chunk = seqs[start : start + batch_size]
            width = max(len(s[1]) for s in chunk)
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for r, (_, toks, _) in enumerate(chunk):  # left padding keeps every continuation at the right edge
                ids[r, width - len(toks) :] = torch.tensor(toks)
                mask[r, width - len(toks) :] = 1
            # explicit positions: with left padding, models with absolute position embeddings (GPT-2, OPT) would
            # otherwise see each row shifted by its padding and score it differently depending on the batch
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            with torch.no_grad():
                logits = self.model(
                    input_ids=ids.to(self.device),
                    attention_mask=mask.to(self.device),
                    position_ids=positions.to(self.device),
                ).logits.float()
            logp = torch.log_softmax(logits[:, :-1], dim=-1)
            targets = ids[:, 1:].to(self.device)
            token_lp = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
            for r, (_, _, n_cont) in enumerate(chunk):
                scores.append(float(token_lp[r, -n_cont:].sum()))
        out: list[list[float]] = [[] for _ in prompts]
        for (p_i, _, _), s in zip(seqs, scores, strict=True):
            out[p_i].append(s)
        return out


# ------------------------------------------------------------------------------------------------- endpoint ----


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


# -------------------------------------------------------------------------------------------------- collect ----


def collect(
    runner: Runner,
    rows: pd.DataFrame,
    settings: GenerationSettings,
    cache: ResponseCache,
    *,
    max_consecutive_errors: int = 10,
    progress: Callable[[int, int], None] | None = None,
) -> pd.DataFrame:
    """Get ``settings.samples`` replies for every row, from the cache where possible, persisting each new one.

    Returns one row per (prompt, sample) with ``response``, ``status`` (``ok``/``error``), ``error``, ``cached``
    and ``meta`` (JSON). Raises :class:`RunAbortedError` after ``max_consecutive_errors`` failures in a row (an
    endpoint that is down); every reply collected before that is already in the cache, so a rerun resumes.
    """
    fp = runner.fingerprint()
    decoding = settings.decoding()
    jobs = []
    for rec in rows.to_dict("records"):
        for s in range(settings.samples):
            key = cache_key(fp, rec["prompt"], s, decoding)
            jobs.append((rec, s, key, item_seed(settings.seed, rec["id"], s)))
    results: dict[str, dict[str, Any]] = {}
    todo = []
    for job in jobs:
        hit = cache.get(job[2])
        if hit is not None:
            results[job[2]] = {
                "response": hit["text"],
                "status": "ok",
                "error": None,
                "cached": True,
                "meta": hit["meta"],
            }
        else:
            todo.append(job)
    consecutive = 0
    done = 0
    for start in range(0, len(todo), settings.batch_size * 4):  # chunks keep memory bounded; runner batches inside
        chunk = todo[start : start + settings.batch_size * 4]
        for i, reply in runner.generate([j[0]["prompt"] for j in chunk], [j[3] for j in chunk], settings):
            rec, s, key, _ = chunk[i]
            cache.put(key, rec["id"], s, reply.text, reply.error, reply.meta)
            results[key] = {
                "response": reply.text,
                "status": "error" if reply.error else "ok",
                "error": reply.error,
                "cached": False,
                "meta": reply.meta,
            }
            done += 1
            if progress:
                progress(done, len(todo))
            consecutive = consecutive + 1 if reply.error else 0
            if consecutive >= max_consecutive_errors:
                raise RunAbortedError(
                    f"{consecutive} calls in a row failed (last: {reply.error}); stopping. "
                    f"{cache.count('ok')} responses are saved in {cache.path}; fix the model/endpoint and rerun "
                    "the same command to resume."
                )
    out = []
    for rec, s, key, seed in jobs:
        r = results[key]
        out.append(
            {
                **rec,
                "sample": s,
                "seed": seed,
                "model": runner.name,
                "response": r["response"],
                "status": r["status"],
                "error": r["error"],
                "cached": r["cached"],
                "prompt_format": r["meta"].get("prompt_format", ""),
                "meta": json.dumps(r["meta"], sort_keys=True),
            }
        )
    return pd.DataFrame(out)


def settings_dict(settings: GenerationSettings) -> dict[str, Any]:
    """The settings as a plain dict (for reports)."""
    return asdict(settings)
