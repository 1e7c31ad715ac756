"""OpenAI-compatible *completions* endpoints (``POST {base_url}/completions``): text with token log-probabilities.

The ``scored`` method over an endpoint (:mod:`queerbench.methods.scored.endpoint`) needs what only the completions API
gives: the top next tokens with their log-probabilities (``logprobs: N``), greedy continuations with their token
strings, and the log-probability of every token of the prompt itself (``echo: true``) — the calls
lm-evaluation-harness's ``local-completions`` model makes. :class:`CompletionsRunner` is the chat runner of
:mod:`queerbench.models.generation.endpoint` with another route, body and reply parser: the same worker pool (``concurrency``
requests in flight), rate limit, retries with backoff, fatal-error rules and API-key rule, not a copy of them.

A *job* is one prompt and its request parameters, written by :func:`completion_job` as canonical JSON; it is what
:func:`~queerbench.models.generation.collect.collect` stores as the ``prompt``, so the reply cache's key covers every parameter.
:meth:`CompletionsRunner.generate` sends consecutive jobs with equal parameters together, up to
``prompts_per_request`` prompts in one request (the API takes a list of prompts), and yields one
:class:`~queerbench.models.generation.settings.Reply` per job whose text is the JSON of :func:`read_choice`'s record.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from typing import Any

from queerbench.base.http import Answer, BadReply, Unreachable
from queerbench.models.generation.endpoint import OpenAIChatRunner
from queerbench.models.generation.settings import EndpointError, GenerationSettings, Reply

__all__ = ["CompletionsRunner", "completion_job", "read_choice"]


def completion_job(prompt: str, *, max_tokens: int, logprobs: int, echo: bool = False) -> str:
    """One completions job as canonical JSON (the reply cache keys on this text)."""
    return json.dumps({"prompt": prompt, "max_tokens": max_tokens, "logprobs": logprobs, "echo": echo}, sort_keys=True)


def read_choice(choice: Any) -> dict[str, Any] | str:
    """A completion choice → ``{"text", "tokens", "token_logprobs", "top_logprobs", "finish_reason"}`` (the log-prob
    fields ``None`` when the server sent none), or a one-line problem for a choice that is not one."""
    if not isinstance(choice, dict) or not isinstance(choice.get("text", ""), str):
        return "malformed reply (a choice without text)"
    lp = choice.get("logprobs")
    record: dict[str, Any] = {
        "text": choice.get("text") or "",
        "tokens": None,
        "token_logprobs": None,
        "top_logprobs": None,
        "finish_reason": choice.get("finish_reason"),
    }
    if lp is None:
        return record
    tokens, values, top = lp.get("tokens"), lp.get("token_logprobs"), lp.get("top_logprobs")
    if not isinstance(tokens, list) or not isinstance(values, list) or len(tokens) != len(values):
        return "malformed reply (logprobs.tokens and logprobs.token_logprobs differ in length)"
    if not all(isinstance(t, str) for t in tokens) or not all(
        v is None or (isinstance(v, int | float) and not isinstance(v, bool) and not math.isnan(v)) for v in values
    ):
        return "malformed reply (logprobs hold non-string tokens or non-numeric log-probabilities)"
    if top is not None and (not isinstance(top, list) or len(top) != len(tokens)):
        return "malformed reply (logprobs.top_logprobs does not have one entry per token)"
    record.update(tokens=tokens, token_logprobs=[None if v is None else float(v) for v in values], top_logprobs=top)
    return record


class CompletionsRunner(OpenAIChatRunner):
    """An OpenAI-compatible completions endpoint, on the chat runner's machinery (see the module doc).

    ``prompts_per_request`` caps how many prompts share one request; fewer are sent when that leaves
    ``concurrency`` requests without work (``ceil(jobs / concurrency)`` per request). ``served`` (what the server
    said about itself, set by the caller) joins the fingerprint.
    """

    route = "completions"

    def __init__(self, base_url: str, model: str, *, prompts_per_request: int = 16, **options: Any) -> None:
        super().__init__(base_url, model, **options)
        if isinstance(prompts_per_request, bool) or not isinstance(prompts_per_request, int) or prompts_per_request < 1:
            raise ValueError(f"prompts_per_request must be a whole number >= 1, got {prompts_per_request!r}")
        self.url = f"{self.base_url}/{self.route}"
        self.prompts_per_request = prompts_per_request
        self.served: dict[str, Any] | None = None

    def fingerprint(self) -> dict[str, Any]:
        """The chat runner's fingerprint with its kind ``openai-completions`` and, once known, the server's report."""
        fp = {**super().fingerprint(), "kind": "openai-completions"}
        if self.served is not None:
            fp["served"] = self.served
        return fp

    def request_body(self, prompt: Any, seed: int, settings: GenerationSettings) -> dict[str, Any]:
        """The body for a batch of jobs with equal parameters (``prompt`` is the list of their decoded JSON)."""
        jobs = list(prompt)
        first = jobs[0]
        body: dict[str, Any] = {
            "model": self.model_name,
            "prompt": [j["prompt"] for j in jobs],
            "temperature": settings.temperature,
            "max_tokens": first["max_tokens"],
            "logprobs": first["logprobs"],
            "seed": seed,
            "n": 1,
        }
        if first["echo"]:
            body["echo"] = True
        if settings.top_p is not None:
            body["top_p"] = settings.top_p
        body.update(self.extra_body)
        return body

    def _fatal(self, status: int, resp: Answer) -> EndpointError | None:
        if status == 404 and "model" not in resp.text.lower():
            return EndpointError(
                f"{self.url} answered HTTP 404: the server has no /{self.route} route; --method scored needs an "
                "OpenAI-compatible completions endpoint with log-probabilities (vLLM, llama.cpp's server); for a "
                "chat-only endpoint use --method instructed"
            )
        return super()._fatal(status, resp)

    def _parse(self, resp: Answer) -> Reply:
        """A completion (one choice per prompt, in ``index`` order) → a :class:`Reply` whose text is the JSON list
        of :func:`read_choice` records; anything else → :class:`~queerbench.base.http.BadReply` (retried)."""
        try:
            choices = resp.json()["choices"]
            ordered = sorted(choices, key=lambda c: int(c.get("index", 0)))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BadReply(f"malformed reply ({type(exc).__name__}: {self._scrub(str(exc))[:80]})") from None
        records = []
        for choice in ordered:
            record = read_choice(choice)
            if isinstance(record, str):
                raise BadReply(record)
            records.append(record)
        return Reply(json.dumps(records), None, {"prompt_format": "raw"})

    def generate(
        self, prompts: Sequence[str], seeds: Sequence[int], settings: GenerationSettings
    ) -> Iterator[tuple[int, Reply]]:
        """Yield ``(index, reply)`` per job as the requests that carry them return (see the module doc)."""
        if len(prompts) != len(seeds):
            raise ValueError("prompts and seeds must have the same length")
        jobs = [json.loads(p) for p in prompts]
        size = max(1, min(self.prompts_per_request, math.ceil(len(jobs) / self.concurrency))) if jobs else 1
        batches: list[list[int]] = []
        for i, job in enumerate(jobs):
            same = batches and {**jobs[batches[-1][0]], "prompt": None} == {**job, "prompt": None}
            if same and len(batches[-1]) < size:
                batches[-1].append(i)
            else:
                batches.append([i])
        replies = super().generate([[jobs[i] for i in b] for b in batches], [seeds[b[0]] for b in batches], settings)
        try:
            for b, reply in replies:
                members = batches[b]
                records = json.loads(reply.text) if reply.error is None and reply.text else None
                if records is not None and len(records) != len(members):
                    reply = Reply(
                        None, f"the server sent {len(records)} choices for {len(members)} prompts", reply.meta
                    )
                    records = None
                for j, index in enumerate(members):
                    if records is None:
                        yield index, Reply(None, reply.error or "no reply", dict(reply.meta))
                    else:
                        yield index, Reply(json.dumps(records[j]), None, dict(reply.meta))
        finally:
            replies.close()

    def get_json(self, path: str) -> Any:
        """``GET {base_url}/{path}`` (``path`` starting with ``/`` is taken from the host's root): the JSON, or
        ``None`` for any answer that is not a JSON 200. A refused connection raises as for a completion."""
        from urllib.parse import urlsplit

        if path.startswith("/"):
            parts = urlsplit(self.base_url)
            url = f"{parts.scheme}://{parts.netloc}{path}"
        else:
            url = f"{self.base_url}/{path}"
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}

        def as_json(answer: Answer) -> Any:
            try:
                return answer.json()
            except ValueError:
                return None

        try:
            outcome = self.client.request("GET", url, headers=headers, parse=as_json, sleep=self._sleep)
        except Unreachable as exc:
            raise self._unreachable(exc.kind) from None
        return outcome.value if outcome.ok else None
