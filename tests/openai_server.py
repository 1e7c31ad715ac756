"""A fake OpenAI-compatible chat-completions server on 127.0.0.1 for the SCM endpoint tests.

``FakeOpenAI(script=[...])`` serves ``POST /v1/chat/completions``. Each request takes the next behaviour from
``script`` (then ``"ok"`` forever): ``"ok"``, ``"429"``, ``"500"``, ``"malformed"`` (HTTP 200, not JSON),
``"nochoices"`` (HTTP 200, JSON without choices), ``"401"``. ``calls`` counts requests; ``auth_headers`` records the
Authorization headers seen. The answer echoes the prompt's group so tests can check nothing was mixed up.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeOpenAI:
    """Context manager running the fake server in a thread; ``url`` is the base URL (``…/v1``)."""

    def __init__(self, script: list[str] | None = None, answer: str = "Rating: 4. Keywords: 1. Kind 2. Warm") -> None:
        self.script = list(script or [])
        self.answer = answer
        self.calls = 0
        self.auth_headers: list[str | None] = []
        self.bodies: list[dict] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with outer._lock:
                    outer.calls += 1
                    outer.auth_headers.append(self.headers.get("Authorization"))
                    outer.bodies.append(body)
                    mode = outer.script.pop(0) if outer.script else "ok"
                if self.path != "/v1/chat/completions":
                    return self._send(404, b'{"error": "not found"}')
                if mode in ("429", "500", "401"):
                    extra = {"Retry-After": "0"} if mode == "429" else {}
                    return self._send(int(mode), b'{"error": {"message": "injected"}}', extra)
                if mode == "malformed":
                    return self._send(200, b"<html>this is not json")
                if mode == "nochoices":
                    return self._send(200, b'{"id": "x", "object": "chat.completion"}')
                prompt = body["messages"][-1]["content"]
                reply = {
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": f"{outer.answer} [{len(prompt)}]"},
                        }
                    ]
                }
                return self._send(200, json.dumps(reply).encode())

            def _send(self, code: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
