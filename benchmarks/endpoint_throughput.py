"""Endpoint throughput at ``--concurrency 1`` vs 8 against a local server that rate-limits and fails like a real one.

The server (``tests/openai_server.py``'s fake OpenAI server on 127.0.0.1) answers each request after a fixed latency
(default 100 ms), like a remote model that takes that long per reply, and by default misbehaves as hosted APIs do:

- it rate-limits **each prompt once**: a prompt's first request that does not fail gets ``429`` with
  ``Retry-After: 0``;
- it fails **1 in 7 requests** with ``500`` and no ``Retry-After``: request ``j`` of prompt ``p`` fails when
  ``sha256(p#j) mod 7 == 0``, so each prompt meets the same faults in the same order at every concurrency (a
  counter over all requests would hand the faults to other prompts depending on the order of arrival);
- it serves at most ``--max-requests`` requests per measurement (then ``400``), so a client that retried without end
  would show up as failed rows instead of a benchmark that never ends.

The client is the project's :class:`~queerbench.models.generation.OpenAIChatRunner` with its default retry policy
(:mod:`queerbench.base.http`: the server's ``Retry-After`` sets the wait, so a ``Retry-After: 0`` is retried at once;
without one, 1 s · 2^attempt less 0–25 % jitter) and no rate limit of its own. The same
:func:`queerbench.models.generation.collect` run (``--n`` prompts, a fresh cache, new prompts each time) is timed at each
concurrency, alternating the two ``--repeats`` times in one run (the machine may be shared, so the best time of each
counts). Every measurement asks the same prompts of a reset server with a fresh cache, so both concurrencies meet
exactly the same faults. Printed: replies/s per concurrency, the ratio and the target ≥ 0.7 × concurrency. Each run is
checked to have lost no row, kept the rows' order and got a reply for every prompt; the requests are counted.
``--no-faults`` measures the plain latency-bound case (one request per prompt).

Run: ``QUEERBENCH_DATA_DIR=<data folder> python benchmarks/endpoint_throughput.py [--n 160] [--latency 0.1]``
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd

from queerbench.models.generation import GenerationSettings, OpenAIChatRunner, ResponseCache, collect
from tests.openai_server import FakeOpenAI


class FlakyServer(FakeOpenAI):
    """The fake server, rate-limiting each prompt once (429, ``Retry-After: 0``) and failing 1 in ``fail_every``
    requests (500) by a hash of (prompt, its request number); at most ``max_requests`` requests per :meth:`reset`."""

    def __init__(self, *, fail_every: int, max_requests: int, faults: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fail_every, self.max_requests, self.faults = fail_every, max_requests, faults
        self.reset()

    def reset(self) -> None:
        """Start a new measurement: no prompt seen, request and status counts from zero."""
        self.tries: dict[str, int] = {}
        self.limited: set[str] = set()
        self.served = 0
        self.statuses: dict[str, int] = {}

    def _fails(self, prompt: str, j: int) -> bool:
        digest = hashlib.sha256(f"{prompt}#{j}".encode()).digest()
        return int.from_bytes(digest[:8], "big") % self.fail_every == 0

    def _next_mode(self, body: dict) -> str:  # called under the server's lock, once per request
        self.served += 1
        prompt = str(body["messages"][-1]["content"])
        self.tries[prompt] = j = self.tries.get(prompt, 0) + 1
        if self.served > self.max_requests:
            mode = "400"
        elif self.faults and self._fails(prompt, j):
            mode = "500"
        elif self.faults and prompt not in self.limited:
            self.limited.add(prompt)
            mode = "429"  # the fake server sends Retry-After: 0 with it
        else:
            mode = "ok"
        self.statuses[mode] = self.statuses.get(mode, 0) + 1
        return mode


def _once(server: FlakyServer, concurrency: int, n: int, folder: Path, tag: str) -> tuple[float, dict[str, int]]:
    prompts = [f"prompt {i}" for i in range(n)]  # the same prompts (and so faults) every time, on a reset server
    rows = pd.DataFrame({"id": [f"p{i}" for i in range(n)], "prompt": prompts})
    runner = OpenAIChatRunner(server.url, "fake", concurrency=concurrency, requests_per_minute=None)
    with server._cond:
        server.reset()
    with ResponseCache(folder / f"{tag}.sqlite") as cache:  # a fresh cache: every prompt is asked
        start = time.perf_counter()
        frame = collect(runner, rows, GenerationSettings(temperature=0, top_p=None), cache, show_progress=False)
        elapsed = time.perf_counter() - start
    failed = frame[frame["status"] != "ok"]
    assert failed.empty, failed[["id", "error"]].to_string()
    assert frame["id"].tolist() == rows["id"].tolist()
    assert (frame["response"] == [f"echo: {p}" for p in prompts]).all()
    return elapsed, dict(server.statuses)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=160, help="prompts per measurement (default 160)")
    parser.add_argument("--latency", type=float, default=0.1, help="server latency per request in s (default 0.1)")
    parser.add_argument("--concurrency", type=int, default=8, help="the concurrency compared with 1 (default 8)")
    parser.add_argument("--fail-every", type=int, default=7, help="every N-th request fails with 500 (default 7)")
    parser.add_argument("--no-faults", action="store_true", help="no 429s, no 500s: one request per prompt")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "not-a-secret")  # the fake server ignores the key
    faults = not args.no_faults
    bound = 3 * args.n if faults else args.n  # about 2.33 requests per prompt with faults: a generous ceiling
    best = {1: float("inf"), args.concurrency: float("inf")}
    counts: dict[int, dict[str, int]] = {}
    server = FlakyServer(fail_every=args.fail_every, max_requests=bound, faults=faults, latency=args.latency, echo=True)
    with server, tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for c in best:
                elapsed, counts[c] = _once(server, c, args.n, Path(tmp), f"r{r}c{c}")
                best[c] = min(best[c], elapsed)
    rate = {c: args.n / t for c, t in best.items()}
    ratio = rate[args.concurrency] / rate[1]
    what = (
        f"each prompt rate-limited once (429, Retry-After: 0), 1 in {args.fail_every} requests a 500"
        if faults
        else "no faults"
    )
    print(
        f"fake OpenAI server on 127.0.0.1, {args.latency * 1000:.0f} ms per request, {what}; {args.n} prompts per "
        f"measurement (at most {bound} requests), best of {args.repeats}; load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} CPUs"
    )
    for c, r in rate.items():
        shown = ", ".join(f"{k} {v}" for k, v in sorted(counts[c].items()))
        print(f"concurrency {c}: {r:7.2f} replies/s ({best[c]:.2f} s; requests of the last run: {shown})")
    target = 0.7 * args.concurrency
    print(
        f"speedup at concurrency {args.concurrency} vs 1: {ratio:.2f}x "
        f"(target >= {target:.1f}x = 0.7 x concurrency: {'met' if ratio >= target else 'NOT met'})"
    )


if __name__ == "__main__":
    main()
