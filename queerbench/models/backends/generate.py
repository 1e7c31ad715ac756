"""``generate`` on a generation-layer runner, for every backend that generates (a local causal LM, a chat
endpoint): the requests batched by decoding, each with its own seed, optionally through a reply cache.

Importing this module does not import torch, so an endpoint's backend needs none.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from queerbench.models.backends.common import RequestFailedError
from queerbench.models.generation.settings import GenerationSettings
from queerbench.models.requests import Generate, GenerateResult

if TYPE_CHECKING:
    from queerbench.models.generation.cache import ResponseCache

__all__ = ["AHEAD_PER_SLOT", "generate_with", "stream_with"]

AHEAD_PER_SLOT = 8
"""Requests a stream keeps asked per slot of its runner (``concurrency``) before their replies are read."""


def generate_with(
    runner: Any,
    name: str,
    requests: Sequence[Generate],
    batch_size: int,
    done: Callable[[int], None],
    cache: ResponseCache | None = None,
) -> list[GenerateResult]:
    """Replies from a generation-layer runner (local or chat endpoint), in order, each with its request's decoding
    settings and seed (requests with equal settings go together, an item's requests also with equal run seeds); a
    request that got no reply raises :class:`RequestFailedError` in one line.

    With a reply ``cache`` (:class:`~queerbench.models.generation.cache.ResponseCache`), a request it holds is not
    asked again and each new reply is committed to it the moment it arrives
    (:func:`~queerbench.models.generation.collect.ask_requests`); a request that got no reply fails the call only
    once every other request was asked, so a rerun asks only the failed ones."""
    if cache is not None:
        return _cached_replies(runner, name, requests, batch_size, done, cache)
    results: list[GenerateResult | None] = [None] * len(requests)
    by_settings: dict[tuple[int, float, float | None, int | None], list[int]] = {}
    for i, request in enumerate(requests):
        run_seed = request.seed if request.item is not None else None  # an item's re-ask runs under a seed of its own
        by_settings.setdefault((request.max_new_tokens, request.temperature, request.top_p, run_seed), []).append(i)
    for (cap, temperature, top_p, _), idx in by_settings.items():
        settings = GenerationSettings(
            temperature=temperature, top_p=top_p, max_new_tokens=cap, seed=0, samples=1, batch_size=batch_size
        )
        replies = runner.generate([requests[i].prompt for i in idx], [requests[i].call_seed for i in idx], settings)
        try:
            for k, reply in replies:
                if reply.error is not None or reply.text is None:
                    prompt = requests[idx[k]].prompt
                    raise RequestFailedError(
                        f"{name} gave no reply to the prompt {prompt[:60]!r}: {reply.error or 'no text'}"
                    )
                results[idx[k]] = GenerateResult(reply.text, reply.truncated)
                done(1)
        finally:
            close = getattr(replies, "close", None)
            if close is not None:
                close()
    return [r for r in results if r is not None]


def _cached_replies(
    runner: Any,
    name: str,
    requests: Sequence[Generate],
    batch_size: int,
    done: Callable[[int], None],
    cache: ResponseCache,
) -> list[GenerateResult]:
    """:func:`generate_with` through a reply cache (requests it holds tick once the new replies are in)."""
    from queerbench.models.generation.collect import ask_requests
    from queerbench.models.generation.settings import RunAbortedError

    asked = 0

    def arrived(_: int, __: int) -> None:
        nonlocal asked
        asked += 1
        done(1)

    try:
        got = ask_requests(runner, requests, cache, batch_size=batch_size, progress=arrived, show_progress=False)
    except RunAbortedError as exc:  # failures in a row (a dead server): one line; the replies so far are kept
        raise RequestFailedError(str(exc)) from None
    failed = [(r, g) for r, g in zip(requests, got, strict=True) if g["error"] is not None]
    if failed:
        (request, first), n = failed[0], len(failed)
        raise RequestFailedError(
            f"{name} gave no reply to {n} of {len(requests)} prompts (first: {request.prompt[:60]!r}: "
            f"{str(first['error'])[:200]}); every other reply is saved in {cache.path}: rerun the same command to "
            "ask only these"
        )
    done(len(requests) - asked)
    return [GenerateResult(g["response"], (g["meta"] or {}).get("finish_reason") == "length") for g in got]


def stream_with(
    runner: Any,
    name: str,
    requests: Iterable[Generate],
    done: Callable[[int], None],
    cache: ResponseCache,
) -> Generator[tuple[int, GenerateResult], None, None]:
    """``(index, reply)`` of each of ``requests`` as it arrives, through the concurrent slots of an endpoint's
    ``runner`` (:class:`~queerbench.models.generation.collect.StreamCollector`): a request the reply ``cache`` holds
    comes out at once, each new reply is committed to it the moment it arrives, a request asked twice is asked once,
    and a slow or retried request holds up nothing but itself. ``requests`` are read as the stream goes, at most
    :data:`AHEAD_PER_SLOT` per slot asked and not yet answered, so a run of millions of requests holds only those
    in memory. A request that got no reply raises :class:`RequestFailedError` in one line once every other request
    was answered (:func:`generate_with`'s message: a rerun asks only the failed ones); failures in a row (a dead
    server) stop at once, in one line."""
    from queerbench.models.generation.collect import StreamCollector
    from queerbench.models.generation.settings import RunAbortedError

    collector = StreamCollector(runner, cache)
    ahead = AHEAD_PER_SLOT * max(1, int(getattr(runner, "concurrency", 1) or 1))
    source = enumerate(requests)
    prompts: dict[int, str] = {}  # the requests asked and not yet answered
    failed: list[tuple[int, str, str]] = []
    asked = 0

    def top_up() -> None:
        nonlocal asked
        while len(prompts) < ahead:
            nxt = next(source, None)
            if nxt is None:
                return
            i, request = nxt
            prompts[i] = request.prompt
            asked += 1
            collector.ask(i, request)

    try:
        top_up()
        for i, result in collector.results():
            done(1)
            prompt = prompts.pop(i)
            top_up()  # the next requests go out while this reply is handed on
            if result["error"] is not None:
                failed.append((i, str(result["error"]), prompt))
                continue
            truncated = (result["meta"] or {}).get("finish_reason") == "length"
            yield i, GenerateResult(result["response"], truncated)
    except RunAbortedError as exc:  # failures in a row (a dead server): one line; the replies so far are kept
        raise RequestFailedError(str(exc)) from None
    finally:
        collector.close()
    if failed:
        _, error, prompt = min(failed)
        raise RequestFailedError(
            f"{name} gave no reply to {len(failed)} of {asked} prompts (first: {prompt[:60]!r}: {error[:200]}); every "
            f"other reply is saved in {cache.path}: rerun the same command to ask only these"
        )
