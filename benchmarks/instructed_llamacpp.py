"""``instructed`` on the embedded SmolLM2-135M-Instruct: llama.cpp's server vs the in-process transformers loop.

The same ``--n`` QueerBench prompts (QueerGen's instruction, greedy, up to ``--max-new-tokens`` tokens) go through
:func:`queerbench.models.generation.collect` on a fresh reply cache each time: to llama.cpp's OpenAI-compatible server
(``llama-cpp-python[server]``, the Q4_1 GGUF as it is, ``--threads`` threads) at ``--concurrency 1`` and at
``--concurrency`` (the server of llama-cpp-python has one slot: it queues concurrent requests), and to the
in-process :class:`~queerbench.models.generation.TransformersRunner` (the same GGUF dequantised to float32, torch on ``--threads``
threads, ``--batch-size`` prompts per batch). Model loading is not timed; each measurement runs ``--repeats`` times,
alternating, and the best counts. Printed: replies per second side by side, their ratio, and how many of the parsed
words agree between the two engines (the quantised weights differ, so not all do).

Needs ``llama-cpp-python[server]`` (``.ci/engines.sh``). Run:
``QUEERBENCH_DATA_DIR=<data folder> python benchmarks/instructed_llamacpp.py [--n 16] [--threads 1]``
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd
import requests

from queerbench.methods.instructed.replies import build_prompt, instructed_settings, parse_reply
from queerbench.models.generation import OpenAIChatRunner, ResponseCache, TransformersRunner, collect
from queerbench.models.generation.loading import resolve_model
from queerbench.tasks.queerbench.templates import build_sentences


def _serve(threads: int, log: Path) -> tuple[subprocess.Popen, str]:
    folder, name = resolve_model(None)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(Path(folder) / str(name)), "--model_alias",
           "smollm2", "--host", "127.0.0.1", "--port", str(port), "--n_threads", str(threads), "--n_ctx", "1024",
           "--verbose", "False"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{url}/models", timeout=2).status_code == 200:
                return proc, url
        except requests.RequestException:
            time.sleep(0.5)
    proc.terminate()
    raise SystemExit(f"llama.cpp's server did not start: {log.read_text()[-1000:]}")


def _timed(runner, rows: pd.DataFrame, settings, folder: Path) -> tuple[float, list[str]]:
    with ResponseCache(folder / f"{time.perf_counter_ns()}.sqlite") as cache:
        start = time.perf_counter()
        frame = collect(runner, rows, settings, cache)
        seconds = time.perf_counter() - start
    assert (frame["status"] == "ok").all(), frame["error"].dropna().head().tolist()
    return seconds, frame["response"].tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=16, help="prompts per measurement (default 16)")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1, help="threads for each engine (default 1)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8, help="transformers: prompts per batch (default 8)")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    frame = build_sentences("default").head(args.n)
    rows = pd.DataFrame({"id": frame["id"], "prompt": [build_prompt(s) for s in frame["masked_sentence"]]})
    settings = instructed_settings(1, 0, args.batch_size, args.max_new_tokens)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        proc, url = _serve(args.threads, folder / "server.log")
        try:
            local = TransformersRunner(None, device="cpu")
            engines = {
                "llama.cpp server, --concurrency 1": OpenAIChatRunner(
                    url, "smollm2", concurrency=1, requests_per_minute=None
                ),
                f"llama.cpp server, --concurrency {args.concurrency}": OpenAIChatRunner(
                    url, "smollm2", concurrency=args.concurrency, requests_per_minute=None
                ),
                f"transformers in-process, batch {args.batch_size}": local,
            }
            best = dict.fromkeys(engines, float("inf"))
            replies: dict[str, list[str]] = {}
            for _ in range(args.repeats):
                for name, runner in engines.items():
                    seconds, replies[name] = _timed(runner, rows, settings, folder)
                    best[name] = min(best[name], seconds)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(f"instructed on SmolLM2-135M-Instruct (Q4_1 GGUF), {args.n} prompts, greedy, <= {args.max_new_tokens} new "
          f"tokens, {args.threads} threads per engine")  # fmt: skip
    for name, seconds in best.items():
        print(f"  {name:<40} {args.n / seconds:6.2f} replies/s  ({seconds:.1f} s)")
    names = list(engines)
    fastest = min(best[names[0]], best[names[1]])
    print(
        f"  llama.cpp server (faster setting) vs transformers: {best[names[2]] / fastest:.2f}x the replies per second"
    )
    words = {
        n: [parse_reply(r, s).word for r, s in zip(replies[n], frame["masked_sentence"], strict=True)] for n in names
    }
    same = sum(a == b for a, b in zip(words[names[0]], words[names[2]], strict=True))
    print(f"  parsed words equal between llama.cpp and transformers: {same} of {args.n}")


if __name__ == "__main__":
    main()
