"""``scored`` over a completions endpoint at ``--concurrency 1`` vs the default 8, against a fixed-latency server.

The server (``tests/completions_server.py``) serves the tiny letters Llama of ``tests/tiny_models.py``; a first,
untimed pass warms its memory of answers (``memo``), so in the timed passes each request costs the fixed
``--latency`` only, like a remote engine that takes that long per batch of prompts. Each timed pass scores the same
``--n`` sentences with :class:`~queerbench.methods.scored.predictor.ScoredPredictor` (probe, propose, extend,
rank) on a fresh reply cache and no rate limit, alternating the two concurrencies ``--repeats`` times (best time
counts). Printed: requests and seconds per concurrency, the speed-up and the target ≥ 0.7 × concurrency; both passes
must give the same words.

Run: ``QUEERBENCH_DATA_DIR=<data folder> python benchmarks/endpoint_scored_concurrency.py [--n 32] [--latency 0.2]``
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from queerbench.methods.scored.predictor import ScoredPredictor
from queerbench.models.spec import ModelSpec
from queerbench.tasks.queerbench.templates import build_sentences
from tests.completions_server import CompletionsServer
from tests.tiny_models import tiny_letters_llama


def _once(url: str, concurrency: int, ids: list[str], sentences: list[str], folder: Path) -> tuple[float, float, dict]:
    """(seconds to load, i.e. identify and probe the server; seconds to score the sentences; the predictions)."""
    start = time.perf_counter()
    predictor = ScoredPredictor(
        "tiny",
        endpoint=url,
        top_k=5,
        cache_path=folder / f"c{concurrency}-{time.perf_counter_ns()}" / "replies.sqlite",  # probe.sqlite beside it
        spec=ModelSpec(concurrency=concurrency, requests_per_minute=None),
        log=lambda _: None,
    )
    loaded = time.perf_counter()
    try:
        out = predictor.predict(ids, sentences, lambda n: None)
    finally:
        predictor.close()  # its reply cache
    return loaded - start, time.perf_counter() - loaded, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=32, help="sentences per pass (default 32)")
    parser.add_argument("--latency", type=float, default=0.2, help="server latency per request in s (default 0.2)")
    parser.add_argument("--concurrency", type=int, default=8, help="the concurrency compared with 1 (default 8)")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    frame = build_sentences("default").head(args.n)
    ids, sentences = frame["id"].tolist(), frame["masked_sentence"].tolist()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model = tiny_letters_llama(folder)
        with CompletionsServer(model, memo=True) as server:
            *_, reference = _once(server.url, args.concurrency, ids, sentences, folder)  # warms the server's memory
            server.latency = args.latency
            best = {1: (float("inf"), 0.0), args.concurrency: (float("inf"), 0.0)}
            requests = {}
            for _ in range(args.repeats):
                for c in best:
                    before = server.calls
                    load, seconds, out = _once(server.url, c, ids, sentences, folder)
                    assert out["tokens"] == reference["tokens"], "the words depend on the concurrency"
                    if seconds < best[c][0]:
                        best[c], requests[c] = (seconds, load), server.calls - before
    print(f"endpoint scored, {args.n} sentences, top-5, {args.latency:g} s per request, no rate limit")
    for c, (seconds, load) in best.items():
        print(
            f"  --concurrency {c}: {requests[c]} requests, scoring {seconds:.2f} s ({args.n / seconds:.1f} sentences/s)"
            f" after a {load:.2f} s probe"
        )
    target = 0.7 * args.concurrency
    speedup = best[1][0] / best[args.concurrency][0]
    total = (best[1][0] + best[1][1]) / (best[args.concurrency][0] + best[args.concurrency][1])
    verdict = "met" if speedup >= target else "NOT met"
    print(f"  scoring speed-up {speedup:.2f}x (ideal {args.concurrency}x, target >= {target:.1f}x: {verdict})")
    print(f"  with the probe (its calls go one after another): {total:.2f}x")


if __name__ == "__main__":
    main()
