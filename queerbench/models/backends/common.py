"""What every backend shares: the lm-evaluation-harness whitespace rule for a context, the order requests are run
in, progress ticks, and the one error for a request that got no answer.

Importing this module does not import torch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = [
    "RequestFailedError",
    "batches",
    "by_length",
    "by_top_k",
    "check_batch_size",
    "refuse_chat",
    "split_context",
    "ticker",
]


class RequestFailedError(ValueError):
    """A request got no answer (a failed batch, an endpoint that gave up after its retries): the results of a
    backend call are all or nothing, so the call raises this one line naming the request and the reason."""


def split_context(context: str, continuation: str) -> tuple[str, str]:
    """lm-evaluation-harness's rule: the spaces that end ``context`` move to the start of ``continuation`` (a word
    is scored with the space before it, as a byte-level BPE writes it: ``Ġword``), so ``("The person is ", "gay")``
    scores ``" gay"`` after ``"The person is"``. An all-space context becomes empty."""
    stripped = context.rstrip()
    return stripped, context[len(stripped) :] + continuation


def refuse_chat(name: str, requests: Sequence[Any], why: str) -> None:
    """A one-line :class:`~queerbench.models.requests.UnsupportedRequestError` when any of ``requests`` is a
    ``chat`` loglikelihood request, which a backend without a prompt format to reply to cannot answer (``why``)."""
    from queerbench.models.requests import UnsupportedRequestError

    if any(getattr(r, "chat", False) for r in requests):
        raise UnsupportedRequestError(
            f"{name} cannot score a reply to a chat prompt ({why}): use a local causal LM for these requests"
        )


def by_top_k(name: str, requests: Sequence[Any], *, served: bool = False) -> dict[int, list[int]]:
    """The positions of ``requests`` by their ``top_k``, for a backend that answers only the top-k whole words of a
    blank (a causal LM's, local or ``served``): a candidate-word or ``raw`` request is a one-line
    :class:`~queerbench.models.requests.UnsupportedRequestError`, before any work."""
    from queerbench.models.requests import FILL_MASK_MODES, UnsupportedRequestError

    name = f"{name} serves a causal LM" if served else f"{name} is a causal LM"
    groups: dict[int, list[int]] = {}
    for i, request in enumerate(requests):
        if not request.top_k:
            shown = ", ".join(repr(c) for c in request.candidates[:5]) + (", …" if len(request.candidates) > 5 else "")
            raise UnsupportedRequestError(
                f"{name}: it answers fill_mask requests for the top-k whole words of a blank, "
                f"not for the candidate words [{shown}]; ask loglikelihood of each filled sentence instead"
            )
        if request.mode != FILL_MASK_MODES[0]:
            raise UnsupportedRequestError(
                f"{name}: it answers fill_mask requests for the top-k whole words of a blank, "
                f"not raw top-k tokens (a masked LM's vocabulary entries); ask mode {FILL_MASK_MODES[0]!r}, or "
                "use a masked LM"
            )
        groups.setdefault(request.top_k, []).append(i)
    return groups


def by_length(lengths: Sequence[int]) -> list[int]:
    """Indices ordered longest first (less padding per batch, and a memory error shows at the first batch)."""
    return sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))


def batches(order: Sequence[int], size: int) -> Iterator[list[int]]:
    """``order`` in consecutive chunks of ``size``."""
    for start in range(0, len(order), size):
        yield list(order[start : start + size])


def ticker(tick: Callable[[int], None] | None) -> Callable[[int], None]:
    """``tick``, or a no-op when there is none (so callers always call it)."""
    return tick if tick is not None else _no_tick


def _no_tick(_: int) -> None:
    return None


def check_batch_size(batch_size: Any) -> int:
    """``batch_size`` if it is a whole number >= 1, else a one-line ``ValueError``."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"--batch-size must be a whole number >= 1, got {batch_size!r}")
    return batch_size
