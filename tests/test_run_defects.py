"""Issue 38's run-pipeline defects: credentials in an endpoint URL (S2) and an API key echoed in a reply (S5) are
never stored or printed, a reply far longer than asked for is cut (H5), a malicious pickle is one line (T7), a
zero-row parquet is one line (U2), an ``scm run --out`` of a foreign ``scm.json`` is refused (D1), and a long step
writes progress lines to a log that is not a terminal (N1)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from queerbench.base import progress as progress_module
from queerbench.base.redact import redact_url
from queerbench.cli import main
from queerbench.models.generation import GenerationSettings, ResponseCache, collect, load_runner

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--bootstrap", "20", "--permutations", "20", "--toxicity", "none", "--requests-per-minute", "100000"]
KEY = "sk-live-Q8x7TopSecretKey"
PASSWORD = "hunter2pass"
QUERY_KEY = "QsecretApiKey99"


class EchoServer:
    """A chat-completions server on any path under ``/v1/chat/completions`` (a query string allowed) that records
    each request's path and ``Authorization`` header and answers ``reply(auth)``."""

    def __init__(self, reply: Any) -> None:
        self.paths: list[str] = []
        self.auth: list[str | None] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                outer.paths.append(self.path)
                outer.auth.append(self.headers.get("Authorization"))
                if not self.path.startswith("/v1/chat/completions"):
                    self.send_response(404)
                    self.end_headers()
                    return
                text = reply(self.headers.get("Authorization") or "", body)
                payload = json.dumps(
                    {"choices": [{"index": 0, "finish_reason": "stop", "message": {"content": text}}]}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)

    def __enter__(self) -> EchoServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _all_text(folder: Path) -> str:
    """Everything under ``folder`` as text: parquet tables through pandas, other files as bytes."""
    parts = []
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            if path.suffix == ".parquet":
                parts.append(pd.read_parquet(path).to_json())
            else:
                parts.append(path.read_bytes().decode("utf-8", errors="replace"))
    return "\n".join(parts)


def test_redact_url_drops_userinfo_and_masks_secret_query_values():
    url = f"http://user:{PASSWORD}@127.0.0.1:8080/v1?api-key={QUERY_KEY}&api-version=2024&Token=abcd&sig=zzzz"
    assert redact_url(url) == "http://127.0.0.1:8080/v1?api-key=***&api-version=2024&Token=***&sig=***"
    assert redact_url(redact_url(url)) == redact_url(url)  # idempotent
    assert redact_url("https://api.openai.com/v1") == "https://api.openai.com/v1"


def test_endpoint_url_credentials_are_sent_but_never_stored_or_printed(tmp_path: Path, monkeypatch, capsys):
    # S2: the request carries the URL's credentials (basic auth from the userinfo, the key in the query); no file
    # of the run, no printed line, no signature holds them
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    out = tmp_path / "run"
    with EchoServer(lambda auth, body: "doctor") as server:
        url = f"http://user:{PASSWORD}@127.0.0.1:{server.port}/v1?api-key={QUERY_KEY}"
        args = ["run", "--endpoint", url, "--model", "served", "--limit", "1", "--top-k", "1", "--out", str(out)]
        assert main([*args, *FAST]) == 0
    printed = capsys.readouterr()
    assert server.paths and all(p == f"/v1/chat/completions?api-key={QUERY_KEY}" for p in server.paths)
    assert set(server.auth) == {"Bearer sk-test"}  # the API key wins over the userinfo, as requests did
    stored = _all_text(out)
    for secret in (PASSWORD, QUERY_KEY):
        assert secret not in stored and secret not in printed.out and secret not in printed.err
    scores = json.loads((out / "scores.json").read_text())
    assert scores["run"]["endpoint"] == f"http://127.0.0.1:{server.port}/v1?api-key=***"
    assert f"127.0.0.1:{server.port}/v1" in scores["signature"]


def test_userinfo_becomes_basic_auth_without_an_api_key(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with EchoServer(lambda auth, body: "doctor") as server:
        runner = load_runner("served", f"http://user:{PASSWORD}@127.0.0.1:{server.port}/v1", concurrency=1)
        list(runner.generate(["hi"], [0], GenerationSettings(max_new_tokens=4)))
        assert PASSWORD not in runner.name and PASSWORD not in json.dumps(runner.fingerprint())
    import base64

    assert server.auth == ["Basic " + base64.b64encode(f"user:{PASSWORD}".encode()).decode()]


def test_a_reply_echoing_the_key_is_stored_scrubbed(tmp_path: Path, monkeypatch):
    # S5: a server that echoes the Authorization header: the key is in no stored reply, cache or predictions
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    out = tmp_path / "run"
    with EchoServer(lambda auth, body: f"doctor (you sent {auth})") as server:
        url = f"http://127.0.0.1:{server.port}/v1"
        args = ["run", "--endpoint", url, "--model", "served", "--limit", "1", "--top-k", "1", "--out", str(out)]
        assert main([*args, *FAST]) == 0
        runner = load_runner("served", url, concurrency=1)
        with ResponseCache(tmp_path / "cache.sqlite") as cache:
            rows = pd.DataFrame({"id": ["a"], "prompt": ["hi"]})
            got = collect(runner, rows, GenerationSettings(max_new_tokens=8), cache, show_progress=False)
    assert got["response"].tolist() == ["doctor (you sent Bearer ***)"]
    assert KEY.encode() not in (tmp_path / "cache.sqlite").read_bytes()
    preds = pd.read_parquet(out / "predictions.parquet")
    assert all(r == ["doctor (you sent Bearer ***)"] for r in preds["reply"].map(list))
    assert KEY not in _all_text(out)


def test_a_reply_echoing_the_urls_basic_credentials_is_stored_scrubbed(tmp_path: Path, monkeypatch):
    # S5 with S2's URL: without OPENAI_API_KEY the userinfo is sent as Basic auth; a server echoing that header puts
    # base64("user:password") in the reply, which is the password: masked like the key, in no stored file or cache
    import base64

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    token = base64.b64encode(f"user:{PASSWORD}".encode()).decode()
    out = tmp_path / "run"
    with EchoServer(lambda auth, body: f"doctor (you sent {auth})") as server:
        url = f"http://user:{PASSWORD}@127.0.0.1:{server.port}/v1?api-key={QUERY_KEY}"
        args = ["run", "--endpoint", url, "--model", "served", "--limit", "1", "--top-k", "1", "--out", str(out)]
        assert main([*args, *FAST]) == 0
    assert set(server.auth) == {f"Basic {token}"}  # the credentials were sent
    preds = pd.read_parquet(out / "predictions.parquet")
    assert all(r == ["doctor (you sent Basic ***)"] for r in preds["reply"].map(list))
    stored = _all_text(out)
    for secret in (token, PASSWORD, QUERY_KEY):
        assert secret not in stored


def test_a_reply_far_longer_than_asked_is_cut_and_marked(tmp_path: Path, monkeypatch, caplog):
    # H5: 8 tokens asked, 200,000 characters sent: the stored reply is cut at 8 x 32 characters, marked truncated
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with EchoServer(lambda auth, body: "word " * 40_000) as server:
        runner = load_runner("served", f"http://127.0.0.1:{server.port}/v1", concurrency=1)
        with ResponseCache(tmp_path / "cache.sqlite") as cache:
            rows = pd.DataFrame({"id": ["a", "b"], "prompt": ["hi", "ho"]})
            got = collect(runner, rows, GenerationSettings(max_new_tokens=8), cache, show_progress=False)
            stored = cache.get(got["key"][0]) if "key" in got else None
    assert got["response"].map(len).tolist() == [8 * 32, 8 * 32]
    assert got["truncated"].tolist() == [True, True] and runner.capped == 2
    assert "was cut at 256" in caplog.text and caplog.text.count("was cut at") == 1  # said once
    assert stored is None or len(stored["text"]) == 256


def test_malicious_pickle_in_a_masked_lm_is_one_line(tmp_path: Path, capsys):
    # T7: torch's safe loader refuses it (nothing runs); the user gets one line naming the file, why and the fix
    from tests.tiny_models import tiny_bert

    folder = tiny_bert(tmp_path)
    for weights in folder.glob("*.safetensors"):
        weights.unlink()
    marker = tmp_path / "PWNED"

    class Evil:
        def __reduce__(self) -> tuple[Any, ...]:
            return (os.system, (f"touch {marker}",))

    (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"w": Evil()}))
    capsys.readouterr()  # building the tiny model draws a bar
    code = main(["run", "--model", str(folder), "--limit", "1", "--top-k", "1", "--out", str(tmp_path / "o"), *FAST])
    err = capsys.readouterr().err
    assert code == 2 and not marker.exists()
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{folder / 'pytorch_model.bin'} is a pickle" in err and "weights_only" in err and "safetensors" in err


def test_score_of_a_zero_row_parquet_is_one_line(tmp_path: Path, capsys):
    # U2: the columns of a run's predictions, no row
    from queerbench.run.pipeline import RunOptions, run_items

    items = run_items(RunOptions(limit=1))
    path = tmp_path / "empty.parquet"
    items.assign(tokens=[["doctor"]] * len(items)).iloc[:0].to_parquet(path)
    assert main(["score", str(path), "--toxicity", "none"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"queerbench: error: {path} has no rows") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ('{"project": "mine"}', "no SCM signature"),
        ('{"signature": "task:scm|model:x", "run": []}', "no run record"),
        ("not json at all", "not JSON"),
    ],
)
def test_scm_run_refuses_a_foreign_scm_json(tmp_path: Path, monkeypatch, capsys, content: str, why: str):
    # D1: a folder holding some other scm.json (and a report.md) is not an SCM run: refused, nothing touched
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    out = tmp_path / "mine"
    out.mkdir()
    (out / "scm.json").write_text(content)
    (out / "report.md").write_text("# my notes\n")
    with EchoServer(lambda auth, body: "x") as server:
        url = f"http://127.0.0.1:{server.port}/v1"
        code = main(["scm", "run", "--endpoint", url, "--model", "served", "--limit", "7", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and server.paths == []
    assert err.startswith(f"queerbench: error: --out {out} holds a scm.json that is not an SCM run's ({why}")
    assert err.count("\n") == 1
    assert (out / "scm.json").read_text() == content and (out / "report.md").read_text() == "# my notes\n"
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["report.md", "scm.json"]


def test_progress_log_writes_a_line_every_interval():
    # N1: with a fake clock, one line per 30 s whether items finish or not, with done/total, rate and ETA
    now = [0.0]
    lines: list[str] = []
    bar = progress_module.ProgressLog(100, "predicting", "sent", every=30, clock=lambda: now[0], write=lines.append)
    bar.update(5)
    now[0] = 10
    bar.update(5)
    assert lines == []  # not 30 s yet
    now[0] = 30
    bar.refresh()  # nothing finished since, the clock thread's call
    assert lines == ["queerbench: predicting: 10/100 sent (10.0%), 0.333 sent/s, elapsed 0:30, ETA 4:30"]
    now[0] = 45
    bar.update(10)
    assert len(lines) == 1
    now[0] = 60
    bar.update(20)
    assert lines[-1].startswith("queerbench: predicting: 40/100 sent (40.0%), 0.667 sent/s, elapsed 1:00, ETA 1:30")
    bar.close()
    assert len(lines) == 3  # a last line, since it wrote any


def test_progress_goes_to_a_pipe_as_lines():
    # N1: stderr a pipe (not a terminal): progress_bar gives the log, not a silent bar; the clock is a counter
    script = (
        "import itertools, time\n"
        "ticks = itertools.count(0, 40)\n"
        "time.monotonic = lambda: next(ticks)\n"
        "from queerbench.base.progress import progress_bar\n"
        "with progress_bar(3, 'predicting', 'sent', refresh_s=0) as bar:\n"
        "    for _ in range(3):\n"
        "        bar.update(1)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines and all(line.startswith("queerbench: predicting: ") for line in lines)
    assert lines[-1].startswith("queerbench: predicting: 3/3 sent (100.0%)")


def test_a_logged_step_writes_its_lines_while_nothing_finishes(monkeypatch: pytest.MonkeyPatch):
    # N1: one long step (a local model's first reply) finishes nothing for minutes; with stderr not a terminal the
    # clock thread still writes the log line at each interval (here 0.05 s), not only when an item finishes
    lines: list[str] = []
    written = threading.Event()

    class Log:  # stderr redirected to a file: no isatty() True
        def write(self, text: str) -> int:
            if text.strip():
                lines.append(text.strip())
                if len(lines) >= 2:
                    written.set()
            return len(text)

        def flush(self) -> None:
            pass

        def isatty(self) -> bool:
            return False

    monkeypatch.setattr(sys, "stderr", Log())
    with progress_module.progress_bar(5, "predicting", "sent", refresh_s=0.01, log_every_s=0.05) as bar:
        assert written.wait(30), lines
        assert bar.n == 0
    assert all(line.startswith("queerbench: predicting: 0/5 sent (0.0%), 0 sent/s") for line in lines), lines


def test_an_embedder_urls_credentials_are_not_in_its_recorded_name() -> None:
    """S2 for the SCM probes' --embedder URL#MODEL: the name a run records keeps host and path, not the secrets."""
    from queerbench.tasks.scm.axes import make_embedder

    _, name = make_embedder("http://user:hunter2@127.0.0.1:9/v1?api-key=s3cret#text-embedding-3-small")
    assert "hunter2" not in name and "s3cret" not in name
    assert name.startswith("http://127.0.0.1:9/v1") and name.endswith("#text-embedding-3-small")
