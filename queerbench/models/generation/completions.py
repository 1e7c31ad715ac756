"""OpenAI-compatible *completions* endpoints (``POST {base_url}/completions``): text with token log-probabilities.

An endpoint's top-k words for a blank (:mod:`queerbench.models.causal_blanks.endpoint_steps`) need what only the completions API
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
:meth:`CompletionsRunner.open_jobs` is its streaming counterpart (:class:`JobStream`): a caller whose next jobs
depend on the replies (``scored``'s three rounds) submits them at any time, and they are packed into requests as
slots free up, so that the requests of a whole run flow through one set of slots.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
from collections.abc import Generator, Hashable, Iterator, Sequence
from typing import Any

from queerbench.base.http import Answer, BadReply, Unreachable, join_url
from queerbench.models.generation.endpoint import OpenAIChatRunner
from queerbench.models.generation.settings import EndpointError, GenerationSettings, MethodUnsupportedError, Reply

__all__ = ["CompletionsRunner", "JobStream", "completion_job", "read_choice"]


def completion_job(prompt: str, *, max_tokens: int, logprobs: int, echo: bool = False) -> str:
    """One completions job as canonical JSON (the reply cache keys on this text)."""
    return json.dumps({"prompt": prompt, "max_tokens": max_tokens, "logprobs": logprobs, "echo": echo}, sort_keys=True)


def _per_job(reply: Reply, n: int) -> list[Reply]:
    """The reply to a request that carried ``n`` jobs, as one :class:`Reply` per job in order: the job's record as
    JSON, or the request's error for each job (a failed request, or one whose choices are not one per prompt)."""
    records = json.loads(reply.text) if reply.error is None and reply.text else None
    if records is not None and len(records) != n:
        reply = Reply(None, f"the server sent {len(records)} choices for {n} prompts", reply.meta)
        records = None
    if records is None:
        return [Reply(None, reply.error or "no reply", dict(reply.meta)) for _ in range(n)]
    return [Reply(json.dumps(record), None, dict(reply.meta)) for record in records]


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
    caps_replies = False
    packs_prompts = True
    """Its requests carry several prompts each: :meth:`generate` packs them (the chat runner's stream sends one)."""

    def __init__(self, base_url: str, model: str, *, prompts_per_request: int = 16, **options: Any) -> None:
        super().__init__(base_url, model, **options)
        if isinstance(prompts_per_request, bool) or not isinstance(prompts_per_request, int) or prompts_per_request < 1:
            raise ValueError(f"prompts_per_request must be a whole number >= 1, got {prompts_per_request!r}")
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
            return MethodUnsupportedError(
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
    ) -> Generator[tuple[int, Reply], None, None]:
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
                yield from zip(batches[b], _per_job(reply, len(batches[b])), strict=True)
        finally:
            replies.close()

    def open_jobs(self, settings: GenerationSettings) -> JobStream:
        """:meth:`generate` as a stream: jobs submitted at any time, while replies come in, and packed into requests
        as slots free up (see :class:`JobStream`)."""
        return JobStream(self, settings)

    def get_json(self, path: str) -> Any:
        """``GET {base_url}/{path}`` (``path`` starting with ``/`` is taken from the host's root): the JSON, or
        ``None`` for any answer that is not a JSON 200. A refused connection raises as for a completion."""
        from urllib.parse import urlsplit

        if path.startswith("/"):
            parts = urlsplit(self._base)  # the URL as given: its credentials go with the request
            url = f"{parts.scheme}://{parts.netloc}{path}"
        else:
            url = join_url(self._base, path)
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


class JobStream:
    """Completions jobs streamed through one runner's slots for as long as the caller has work
    (:meth:`CompletionsRunner.open_jobs`), packed into requests when there is a slot to send them in.

    :meth:`submit` adds a job at any time (while a reply is being handled too); it waits in a pool with the other
    jobs of equal parameters. Each time a reply has been handled the pool is packed into requests, the ones of
    :meth:`CompletionsRunner.generate`: ``concurrency`` requests are kept going, each with ``ceil(jobs waiting / free
    slots)`` jobs up to ``prompts_per_request`` (a request is smaller only where a bigger one would leave a slot
    idle), and while full requests can be made, up to ``concurrency`` more wait behind them, so that a request
    waiting for its retry (it holds no slot: :class:`~queerbench.models.generation.scheduler.CallScheduler`) leaves
    no slot without work. A request takes the jobs of the group whose first job comes first by ``order`` (then by
    submission), in that order: a caller that orders jobs by sentence finishes what it started before it starts more.
    """

    def __init__(self, runner: CompletionsRunner, settings: GenerationSettings) -> None:
        self.runner, self.settings = runner, settings
        self._stream = runner.open_stream()
        self._groups: dict[str, list[tuple[Any, int, Hashable, dict[str, Any], int]]] = {}
        self._seq = itertools.count()
        self._waiting = 0
        self._requests: dict[int, list[Hashable]] = {}  # sent and not yet answered: request number -> its jobs' keys
        self._numbers = itertools.count()
        self.requests = 0
        """Requests sent so far (each counted once, however many attempts it took)."""

    def submit(self, key: Hashable, job: str, seed: int, *, order: Any = 0) -> None:
        """Ask ``job`` (a :func:`completion_job`; its reply comes out under ``key``); ``seed`` is sent when it is
        the first job of its request; ``order`` (any sortable value, the same kind for every job) says which jobs go
        first."""
        decoded = json.loads(job)
        params = json.dumps({**decoded, "prompt": None}, sort_keys=True)
        heapq.heappush(self._groups.setdefault(params, []), (order, next(self._seq), key, decoded, seed))
        self._waiting += 1

    def replies(self) -> Iterator[tuple[Hashable, Reply]]:
        """``(key, reply)`` of every job submitted so far as its request returns (jobs submitted while iterating
        included), until none is left; a fatal error is raised here, and closing this early stops the workers."""
        while True:
            self._send()
            if not self._requests:
                return
            for number, reply in self._stream.replies():
                keys = self._requests.pop(number)
                yield from zip(keys, _per_job(reply, len(keys)), strict=True)
                self._send()  # before the next reply is taken, which lets a worker start on what was sent

    def stop(self) -> None:
        """Stop every worker now (jobs still waiting are dropped)."""
        self._stream.stop()

    def _send(self) -> None:
        """Pack waiting jobs into requests and send them (see the class doc)."""
        concurrency, most = self.runner.concurrency, self.runner.prompts_per_request
        while self._waiting:
            free = concurrency - len(self._requests)
            if free > 0:
                group = min((g for g in self._groups.values() if g), key=lambda g: g[0][:2])
                size = min(most, math.ceil(self._waiting / free))
            elif len(self._requests) < 2 * concurrency:
                full = [g for g in self._groups.values() if len(g) >= most]
                if not full:
                    return
                group, size = min(full, key=lambda g: g[0][:2]), most
            else:
                return
            batch = [heapq.heappop(group) for _ in range(min(size, len(group)))]
            self._waiting -= len(batch)
            number = next(self._numbers)
            self._requests[number] = [key for _, _, key, _, _ in batch]
            self.requests += 1
            self._stream.submit(number, [job for _, _, _, job, _ in batch], batch[0][4], self.settings)
