"""A real serving engine: llama.cpp's OpenAI-compatible server (``llama-cpp-python[server]``) serving the embedded
SmolLM2-135M-Instruct GGUF on 127.0.0.1.

- ``scored`` is refused by the probe in one line: this server's echoed prompt log-probabilities are not the
  next-token log-probabilities it gives for the same prefix (the check and both figures are named);
- ``instructed`` runs on it: replies and labels, ``--concurrency`` requests in flight, a run stopped half-way
  resumes asking only for the missing replies, and a rerun of the finished run makes no call.

A counting proxy between queerbench and the server sees every request. ``llama-cpp-python`` is no dependency of
queerbench: ``.ci/engines.sh`` installs it (a portable build, see docs/engines.md). Without it these tests skip
locally and fail in CI (:mod:`tests.engines`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest
import requests

from queerbench.cli import main
from queerbench.methods.instructed.replies import LABELS
from tests.engines import need_engine
from tests.net import free_port

MODEL = "smollm2"
STOP_AFTER = 12  # the first run's proxy passes this many chat requests, then answers 404 (a fatal error)


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory):
    need_engine("llama_cpp", "llama-cpp-python[server]")
    from queerbench.models.generation.loading import resolve_model

    folder, name = resolve_model(None)  # the embedded SmolLM2 GGUF, through the project's own sources
    port = free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(Path(folder) / str(name)), "--model_alias", MODEL,
           "--host", "127.0.0.1", "--port", str(port), "--n_threads", "1", "--n_ctx", "1024", "--verbose", "False"]  # fmt: skip
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if requests.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"llama.cpp's server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


class CountingProxy:
    """Forwards every request to ``upstream``; counts chat requests and the most in flight at once. With ``stop``,
    chat requests after the first ``stop`` are answered 404 (the run stops at once, as on a fatal error)."""

    def __init__(self, upstream: str, stop: int | None = None) -> None:
        self.upstream, self.stop = upstream.removesuffix("/v1"), stop
        self.calls = self.in_flight = self.max_in_flight = 0
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _relay(self, method: str) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                chat = self.path.endswith("/chat/completions")
                with lock:
                    if chat:
                        outer.calls += 1
                        refused = outer.stop is not None and outer.calls > outer.stop
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                try:
                    if chat and refused:
                        code, data = 404, b'{"error": {"message": "stopped by the test proxy"}}'
                    else:
                        headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
                        resp = requests.request(
                            method, outer.upstream + self.path, data=body, headers=headers, timeout=300
                        )
                        code, data = resp.status_code, resp.content
                finally:
                    with lock:
                        outer.in_flight -= 1
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._relay("GET")

            def do_POST(self) -> None:
                self._relay("POST")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> CountingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _run(url: str, out: Path, *extra: str) -> int:
    return main(["run", "--endpoint", url, "--model", MODEL, "--limit", "1", "--toxicity", "none",
                 "--requests-per-minute", "60000", "--out", str(out), *extra])  # fmt: skip


def test_scored_is_refused_by_the_consistency_probe(llama_server: str, tmp_path: Path, capsys) -> None:
    with CountingProxy(llama_server) as proxy:
        code = _run(proxy.url, tmp_path / "run", "--method", "scored")
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "failed the log-probability consistency check" in err and "use --method instructed" in err
    import re

    figures = re.search(r"has log-probability (-?\d+\.\d{4}) as the next token but (-?\d+\.\d{4}) echoed", err)
    assert figures is not None and abs(float(figures[1]) - float(figures[2])) > 1e-3, err
    assert proxy.calls == 0 and not (tmp_path / "run").exists()  # no chat call, nothing left behind


def test_instructed_on_llamacpp_replies_resumes_and_reruns_for_free(llama_server: str, tmp_path: Path, capsys) -> None:
    from queerbench.models.generation import ResponseCache

    out = tmp_path / "run"
    args = ("--method", "instructed", "--top-k", "1", "--max-new-tokens", "8", "--concurrency", "2")
    with CountingProxy(llama_server, stop=STOP_AFTER) as proxy:  # one proxy: its URL is part of the run's key
        assert _run(proxy.url, out, *args) == 2  # stopped half-way by the proxy's 404
        assert "stopped by the test proxy" in capsys.readouterr().err
        with ResponseCache(out / ".chunks" / "replies.sqlite") as cache:
            kept = cache.count()
        assert 0 < kept <= STOP_AFTER

        proxy.stop, proxy.calls, proxy.max_in_flight = None, 0, 0
        assert _run(proxy.url, out, *args) == 0  # resumes
        predictions = pd.read_parquet(out / "predictions.parquet")
        assert proxy.calls == len(predictions) - kept  # only the missing replies were asked for
        assert proxy.max_in_flight >= 2  # --concurrency 2: two requests in flight
        assert all(len(r) == 1 and r[0].strip() for r in predictions["reply"])
        labels = [x[0] for x in predictions["label"]]
        # 8 tokens are short for SmolLM2, which often starts by repeating the sentence: some replies are one word
        assert set(labels) <= set(LABELS) and labels.count("ok") > 0, labels
        assert [len(w) for w in predictions["tokens"]] == [int(lab == "ok") for lab in labels]
        model = json.loads((out / "model.json").read_text())
        assert model["runner"]["kind"] == "openai-chat" and model["decoding"]["kind"] == "greedy"

        proxy.calls = 0
        assert _run(proxy.url, out, *args) == 0  # finished: reused
        assert proxy.calls == 0 and "reusing the finished predictions" in capsys.readouterr().out
