"""Whole ``queerbench run`` commands against a local endpoint that rate-limits and fails like a hosted API, at
concurrency 1, 8 and 64 and latency 100 ms and 500 ms, side by side in one run.

The server (``tests/openai_server.py``'s fake OpenAI server on 127.0.0.1, in this process) answers every request
after a fixed latency, like a remote model that takes that long per reply, keeps connections open (HTTP/1.1) as hosted
APIs and serving engines do, and misbehaves as hosted APIs do:

- **each call's first request** gets ``429`` with ``Retry-After: 0`` (a per-prompt rate limit; a call is a prompt
  and its sample's seed);
- after that, request ``j`` of call ``p`` gets a ``500`` (no ``Retry-After``) when ``sha256("500" p#j) mod 7 == 0``
  and a **truncated JSON body** (HTTP 200, half a completion) when ``sha256("cut" p#j) mod 11 == 0``: 1 in 7 and
  1 in 11 requests, the same faults for each prompt at every concurrency whatever the order of arrival;
- otherwise a one-word reply (``doctor``), which the instructed method parses.

Each measurement is the command a user types, in a fresh process and a fresh output folder (``--method`` instructed by
way of ``--endpoint``, ``--top-k`` 1, or 5 (the default: five sampled replies per sentence) for the row whose run is
otherwise too short to measure, ``--toxicity none`` so that the time is the endpoint's, the client's default
retry policy: the server's ``Retry-After``, else 0.5 s doubling up to 8 s, less 0–25 % jitter), with
``--requests-per-minute 1000000`` (a local server has no quota; the default 600/min would cap every row at
10 requests/s). The server records when each request arrived and was answered.

Printed per row: templates, requests, the command's wall time, the **summed latency ÷ wall** (the requests in flight
on average over the whole command, start-up and scoring included) and the same over the window from the first request
to the last answer; the ideal is the concurrency, the target ≥ 0.7 × it. Every run is checked to have finished with
every sentence predicted. A prompt that meets a fault on each of its 6 attempts (429 + 5 retries) fails; the run
finishes the others and exits 1 naming it, and the benchmark reruns the command as a user would (the rerun asks only
the failed prompts); the row's wall time is that of both commands.

Each row is sized to about 30–150 s of requests at the ideal rate, so that a command's start-up and the retry
policy's longest wait (a prompt that fails five times waits 0.5 + 1 + 2 + 4 + 8 s) do not decide the ratio alone:
at 64 × 100 ms all 103 templates with ``--top-k 1`` are about 28 s of requests, and the row runs them with the default
``--top-k 5``; ``--top-k 64x0.1=1`` measures that smaller run too.

Run: ``QUEERBENCH_DATA_DIR=<data folder> python benchmarks/endpoint_throughput.py`` (about 12 minutes on 2 cores;
``--rows 8x0.1,64x0.5`` measures only those rows, ``--templates 8x0.1=10`` and ``--top-k 64x0.1=1`` set a row's
size).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd

from tests.openai_server import FakeOpenAI

ROWS = {  # (concurrency, latency s): (templates, --top-k); 77 sentences a template, 103 templates in all
    (1, 0.1): (2, 1),
    (1, 0.5): (1, 1),
    (8, 0.1): (30, 1),
    (8, 0.5): (10, 1),
    (64, 0.1): (103, 5),
    (64, 0.5): (60, 1),
}


def _hit(salt: str, prompt: str, j: int, every: int) -> bool:
    digest = hashlib.sha256(f"{salt}{prompt}#{j}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % every == 0


class FaultyServer(FakeOpenAI):
    """The fake server with the faults of the module doc; records (arrival, answer) times of every request."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reset()

    def reset(self) -> None:
        """A new measurement: no prompt seen, no request recorded."""
        self.tries: dict[str, int] = {}
        self.statuses: dict[str, int] = {}
        self.spans: list[tuple[float, float]] = []
        self._local = threading.local()

    def _next_mode(self, body: dict) -> str:  # under the server's lock, once per request
        prompt = f"{body['messages'][-1]['content']}@{body.get('seed')}"  # a call: its prompt and its sample's seed
        self.tries[prompt] = j = self.tries.get(prompt, 0) + 1
        if j == 1:
            mode = "429"
        elif _hit("500", prompt, j, 7):
            mode = "500"
        elif _hit("cut", prompt, j, 11):
            mode = "truncated"
        else:
            mode = "ok"
        self.statuses[mode] = self.statuses.get(mode, 0) + 1
        return mode

    def _completion(self, body: dict, mode: str) -> dict[str, Any]:
        out = super()._completion(body, mode)
        out["choices"][0]["message"]["content"] = "doctor"
        return out


def _timed(server: FaultyServer) -> None:
    """Wrap the server's latency so that each request's arrival and answer are recorded."""
    latency = server.latency

    def delay(body: dict) -> float:
        start = time.monotonic()
        time.sleep(latency)
        with server._cond:
            server.spans.append((start, time.monotonic()))
        return 0.0

    server.latency = delay


def _measure(
    server: FaultyServer, concurrency: int, templates: int, top_k: int, folder: Path, config: str = "default"
) -> dict[str, Any]:
    with server._cond:
        server.reset()
    out = folder / f"c{concurrency}-t{templates}-{time.monotonic_ns()}"
    cmd = [sys.executable, "-m", "queerbench", "run", "--endpoint", server.url, "--model", "served"]
    if config != "default":  # a task on the request runner: its own items, no --top-k or --toxicity
        cmd += ["--config", config, "--method", "instructed"]
    else:
        cmd += ["--top-k", str(top_k), "--toxicity", "none"]
    cmd += ["--limit", str(templates), "--concurrency", str(concurrency)]
    cmd += ["--requests-per-minute", "1000000", "--out", str(out)]
    env = {**os.environ, "OPENAI_API_KEY": "not-a-secret"}
    wall, commands = 0.0, 0
    while True:  # a run whose prompts failed every retry exits 1 and lists them; the user reruns it to ask only those
        start = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall += time.monotonic() - start
        commands += 1
        if proc.returncode == 0:
            break
        if proc.returncode != 1 or commands == 3:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    preds = pd.read_parquet(out / "predictions.parquet")
    if config == "default":
        assert len(preds) == 77 * templates and preds["tokens"].map(list).tolist() == [["doctor"] * top_k] * len(preds)
    else:  # every item answered ("doctor" is no pronoun: read as no choice)
        assert len(preds) == 11 * templates and preds["reply"].eq("doctor").all()
    with server._cond:
        spans, statuses = list(server.spans), dict(server.statuses)
    busy = sum(end - begin for begin, end in spans)
    window = max(end for _, end in spans) - min(begin for begin, _ in spans)
    return {
        "wall": wall,
        "busy": busy,
        "window": window,
        "requests": len(spans),
        "statuses": statuses,
        "commands": commands,
    }


def _parse_rows(text: str | None) -> list[tuple[int, float]]:
    if not text:
        return list(ROWS)
    rows = []
    for item in text.split(","):
        c, _, latency = item.partition("x")
        rows.append((int(c), float(latency)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=None, help="CONCURRENCYxLATENCY,... (default: all six rows)")
    parser.add_argument("--templates", default=None, help="CONCURRENCYxLATENCY=N,... templates of those rows")
    parser.add_argument("--top-k", default=None, help="CONCURRENCYxLATENCY=K,... --top-k of those rows")
    parser.add_argument(
        "--config",
        default="default",
        help="the task run (misgendered: the request runner's stream, 11 items a template)",
    )
    args = parser.parse_args()
    sizes = {row: list(size) for row, size in ROWS.items()}
    for option, where in ((args.templates, 0), (args.top_k, 1)):
        for item in option.split(",") if option else []:
            key, _, n = item.partition("=")
            c, _, latency = key.partition("x")
            sizes[(int(c), float(latency))][where] = int(n)
    rows = _parse_rows(args.rows)
    print(
        f"whole `queerbench run --config {args.config}` commands (instructed) against a fake OpenAI server on 127.0.0.1 that "
        "keeps connections open: each prompt's first request 429 (Retry-After: 0), then 1 in 7 requests a 500 and 1 in 11 a "
        f"truncated JSON body; {os.cpu_count()} CPUs shared by the server and the client"
    )
    print(
        "| concurrency | latency | templates | top-k | requests | wall time | summed latency ÷ wall "
        "| over the requests' window | ideal |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for concurrency, latency in rows:
            server = FaultyServer(latency=latency, keep_alive=True)
            _timed(server)
            with server:
                templates, top_k = sizes[(concurrency, latency)]
                m = _measure(server, concurrency, templates, top_k, Path(tmp), args.config)
            ratio, inner = m["busy"] / m["wall"], m["busy"] / m["window"]
            reruns = f" (+{m['commands'] - 1} rerun for the failed prompts)" if m["commands"] > 1 else ""
            verdict = "met" if ratio >= 0.7 * concurrency else "NOT met"
            print(
                f"| {concurrency} | {latency * 1000:.0f} ms | {templates} | {top_k} | {m['requests']:,} | "
                f"{m['wall']:.0f} s{reruns} | **{ratio:.2f}×** ({ratio / concurrency:.2f} of ideal, ≥ 0.7: {verdict}) | "
                f"{inner:.2f}× | {concurrency}× |",
                flush=True,
            )


if __name__ == "__main__":
    main()
