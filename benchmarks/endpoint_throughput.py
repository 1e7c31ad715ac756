"""Endpoint throughput at ``--concurrency 1`` vs the default 8, against the local fake OpenAI server.

The server (``tests/openai_server.py``) answers every request after a fixed latency (default 100 ms), like a remote
model that takes that long per reply. The same :func:`queerbench.llm.collect` run (``--n`` prompts, fresh cache,
no rate limit) is timed at each concurrency, alternating the two ``--repeats`` times in one run (the machine may be
shared, so the best time of each counts). Printed: requests/s per concurrency, the ratio, and the ideal
(``concurrency``, a latency-bound client) with the target ≥ 0.7 × concurrency; each run is checked to have lost no
row and kept the rows' order.

Run: ``QUEERBENCH_DATA_DIR=../shared python benchmarks/endpoint_throughput.py [--n 80] [--latency 0.1]``
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd

from queerbench.llm import GenerationSettings, OpenAIChatRunner, ResponseCache, collect
from tests.openai_server import FakeOpenAI


def _once(url: str, concurrency: int, n: int, folder: Path) -> float:
    rows = pd.DataFrame({"id": [f"p{i}" for i in range(n)], "prompt": [f"prompt {i}" for i in range(n)]})
    runner = OpenAIChatRunner(url, "fake", concurrency=concurrency, requests_per_minute=None)
    path = folder / f"c{concurrency}-{time.perf_counter_ns()}.sqlite"
    with ResponseCache(path) as cache:
        start = time.perf_counter()
        frame = collect(runner, rows, GenerationSettings(temperature=0, top_p=None), cache)
        elapsed = time.perf_counter() - start
    assert (frame["status"] == "ok").all() and frame["id"].tolist() == rows["id"].tolist()
    assert (frame["response"] == [f"echo: prompt {i}" for i in range(n)]).all()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=80, help="requests per measurement (default 80)")
    parser.add_argument("--latency", type=float, default=0.1, help="server latency per request in s (default 0.1)")
    parser.add_argument("--concurrency", type=int, default=8, help="the concurrency compared with 1 (default 8)")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "not-a-secret")  # the fake server ignores the key
    best = {1: float("inf"), args.concurrency: float("inf")}
    with FakeOpenAI(latency=args.latency, echo=True) as server, tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for c in best:
                best[c] = min(best[c], _once(server.url, c, args.n, Path(tmp)))
        calls = server.calls
    assert calls == args.n * len(best) * args.repeats, calls  # exactly one request per prompt, no retries
    rate = {c: args.n / t for c, t in best.items()}
    ratio = rate[args.concurrency] / rate[1]
    print(
        f"fake OpenAI server on 127.0.0.1, {args.latency * 1000:.0f} ms per request, {args.n} requests, best of "
        f"{args.repeats}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    for c, r in rate.items():
        print(f"concurrency {c}: {r:7.2f} requests/s ({best[c]:.2f} s)")
    print(f"ideal (latency-bound): {1 / args.latency:.2f} requests/s per request in flight")
    print(
        f"speedup at concurrency {args.concurrency} vs 1: {ratio:.2f}x "
        f"(target >= {0.7 * args.concurrency:.1f}x = 0.7 x concurrency: {'met' if ratio >= 0.7 * args.concurrency else 'NOT met'})"
    )


if __name__ == "__main__":
    main()
