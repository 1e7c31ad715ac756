"""A local fake of the Perspective ``comments:analyze`` endpoint, for tests (127.0.0.1 only, port 0).

It speaks the API's request/response shape, records every call (text, key, body), and can be scripted: each
entry of :attr:`FakePerspective.script` is consumed by one call, in order — ``"ok"``, ``"429"`` (with
``Retry-After``), ``"500"``, ``"400"``, ``"timeout"`` (sleeps longer than the client's timeout, then answers),
``"malformed"`` (200 with a body that is not JSON), and any other HTTP status as digits (``"502"``, ``"403"``; ``"503@7"`` adds ``Retry-After: 7``). When
the script is empty every call is answered ``"ok"``. Scores are a deterministic function of the text
(:func:`expected_scores`), so tests can check nothing got mixed up; :attr:`FakePerspective.fixed` overrides them per
text (``{text: {attribute: probability}}``, other attributes 0) for tests that need exact values such as 0.5.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

PATH = "/v1alpha1/comments:analyze"


def expected_scores(text: str, attributes: list[str]) -> dict[str, float]:
    """The fake's score for ``text``: a stable pseudo-random probability per attribute."""
    out = {}
    for attr in attributes:
        digest = hashlib.sha256(f"{attr}|{text}".encode()).digest()
        out[attr] = int.from_bytes(digest[:4], "big") / 2**32
    return out


class FakePerspective:
    """Runs the fake server in a thread; use as a context manager. ``url`` is the endpoint to point clients at."""

    def __init__(self, *, retry_after: str = "2", timeout_sleep: float = 1.0) -> None:
        self.script: list[str] = []
        self.calls: list[dict] = []
        self.fixed: dict[str, dict[str, float]] = {}
        self.raw_requests: list[str] = []
        self.retry_after = retry_after
        self.timeout_sleep = timeout_sleep
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                fake._handle(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}{PATH}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> FakePerspective:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handle(self, req: BaseHTTPRequestHandler) -> None:
        length = int(req.headers.get("Content-Length", "0"))
        raw = req.rfile.read(length).decode("utf-8")
        parsed = urlparse(req.path)
        body = json.loads(raw)
        with self._lock:
            action = self.script.pop(0) if self.script else "ok"
            self.raw_requests.append(req.requestline + "\n" + raw)
            self.calls.append(
                {
                    "path": parsed.path,
                    "key": parse_qs(parsed.query).get("key", [None])[0],
                    "text": body["comment"]["text"],
                    "body": body,
                    "action": action,
                }
            )
        if parsed.path != PATH:
            return self._send(req, 404, {"error": {"code": 404, "message": "not found"}})
        if action == "429":
            return self._send(
                req, 429, {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED"}}, {"Retry-After": self.retry_after}
            )
        if action == "500":
            return self._send(req, 500, {"error": {"code": 500, "status": "INTERNAL"}})
        if action == "400":
            return self._send(req, 400, {"error": {"code": 400, "status": "INVALID_ARGUMENT"}})
        status, _, hint = action.partition("@")
        if status.isdigit():  # any other status, e.g. "502", "403", or "503@7" (with Retry-After: 7)
            return self._send(
                req, int(status), {"error": {"code": int(status)}}, {"Retry-After": hint} if hint else None
            )
        if action == "malformed":
            return self._send_raw(req, 200, b'{"attributeScores": {"TOXICITY": ')
        if action == "timeout":
            time.sleep(self.timeout_sleep)
        attrs = list(body["requestedAttributes"])
        text = body["comment"]["text"]
        scores = (
            {a: float(self.fixed[text].get(a, 0.0)) for a in attrs}
            if text in self.fixed
            else expected_scores(text, attrs)
        )
        answer = {
            "attributeScores": {
                a: {"summaryScore": {"value": v, "type": "PROBABILITY"}, "spanScores": []} for a, v in scores.items()
            },
            "languages": body.get("languages", ["en"]),
        }
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up (the timeout case)
            self._send(req, 200, answer)

    @staticmethod
    def _send(req: BaseHTTPRequestHandler, status: int, payload: dict, headers: dict | None = None) -> None:
        FakePerspective._send_raw(req, status, json.dumps(payload).encode(), headers)

    @staticmethod
    def _send_raw(req: BaseHTTPRequestHandler, status: int, data: bytes, headers: dict | None = None) -> None:
        req.send_response(status)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            req.send_header(name, value)
        req.end_headers()
        req.wfile.write(data)
