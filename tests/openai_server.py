"""A fake OpenAI-compatible chat-completions server on 127.0.0.1 for the endpoint tests and benchmarks.

``FakeOpenAI(script=[...])`` serves ``POST /v1/chat/completions`` (other paths: 404). Each request takes the next
behaviour from ``script`` (then ``"ok"`` forever), or, when its prompt contains a key of ``by_prompt``, the next
behaviour from that key's list:

- ``"ok"``: a chat completion (``finish_reason`` ``stop``); ``"length"``: the same with ``finish_reason`` ``length``;
  ``"null"``: ``content`` null (as for a filtered reply);
- ``"429"`` (``Retry-After: 0``), ``"429:S"`` (``Retry-After: S``), ``"500"``, ``"502"``, ``"503"``, ``"504"``,
  ``"400"``, ``"401"``, ``"403"``, ``"404"``: that status with a JSON error body;
- ``"malformed"`` (HTTP 200, HTML), ``"nochoices"`` (JSON without choices), ``"truncated"`` (a completion's JSON
  cut in half, consistent ``Content-Length``), ``"cut"`` (headers promise more bytes than are sent, then the
  connection closes), ``"drop"`` (the connection closes before any answer).

``latency`` (seconds, or a function of the request body) delays every answer; ``hold=N`` makes each request wait
until N requests have been in flight at once (or ``hold_timeout`` passes), so overlap is checked without timing.
``keep_alive=True`` speaks HTTP/1.1 and keeps each connection open across requests (as hosted APIs and vLLM do);
by default every answer closes its connection.
Recorded: ``calls``, ``bodies``, ``auth_headers``, ``content_types``, ``in_flight`` and ``max_in_flight``. The reply text is
``answer`` plus ``[len(prompt)]``, or with ``echo=True`` ``"echo: " + prompt``, so tests can check nothing was mixed.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128


class FakeOpenAI:
    """Context manager running the fake server in a thread; ``url`` is the base URL (``…/v1``)."""

    def __init__(
        self,
        script: list[str] | None = None,
        answer: str = "Rating: 4. Keywords: 1. Kind 2. Warm",
        *,
        by_prompt: dict[str, list[str]] | None = None,
        latency: float | Callable[[dict[str, Any]], float] = 0.0,
        hold: int = 0,
        hold_timeout: float = 5.0,
        echo: bool = False,
        keep_alive: bool = False,
    ) -> None:
        self.script = list(script or [])
        self.by_prompt = {k: list(v) for k, v in (by_prompt or {}).items()}
        self.answer, self.latency, self.hold, self.hold_timeout, self.echo = answer, latency, hold, hold_timeout, echo
        self.calls = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.auth_headers: list[str | None] = []
        self.content_types: list[str | None] = []
        self.bodies: list[dict] = []
        self._cond = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            # HTTP/1.1 keeps each client connection open across requests, as hosted APIs and vLLM do; HTTP/1.0 (the
            # default here) closes it after every answer
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"
            # TCP_NODELAY, as real servers set it: else the body, written after the headers, waits for the client's
            # delayed ACK (40 ms) on a connection kept open
            disable_nagle_algorithm = True

            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with outer._cond:
                    outer.calls += 1
                    outer.auth_headers.append(self.headers.get("Authorization"))
                    outer.content_types.append(self.headers.get("Content-Type"))
                    outer.bodies.append(body)
                    mode = outer._next_mode(body)
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                    outer._cond.notify_all()
                    if outer.hold:
                        # max_in_flight, not in_flight: a waiter woken late must not miss a moment that has passed
                        outer._cond.wait_for(lambda: outer.max_in_flight >= outer.hold, timeout=outer.hold_timeout)
                self._counted = True
                try:
                    delay = outer.latency(body) if callable(outer.latency) else outer.latency
                    if delay:
                        time.sleep(delay)
                    self._answer(mode, body)
                finally:
                    self._leave()

            def _leave(self) -> None:
                # a request stops being in flight when its answer starts: the client may send its next request
                # as soon as it has read this one, before this handler returns
                if getattr(self, "_counted", False):
                    self._counted = False
                    with outer._cond:
                        outer.in_flight -= 1

            def _answer(self, mode: str, body: dict) -> None:
                if self.path != "/v1/chat/completions":
                    return self._send(404, b'{"error": {"message": "no such route"}}')
                code, _, arg = mode.partition(":")
                if code.isdigit():
                    extra = {"Retry-After": arg or "0"} if code == "429" else {}
                    return self._send(int(code), b'{"error": {"message": "injected"}}', extra)
                if mode == "drop":
                    self._leave()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return None
                if mode == "malformed":
                    return self._send(200, b"<html>this is not json")
                if mode == "nochoices":
                    return self._send(200, b'{"id": "x", "object": "chat.completion"}')
                payload = json.dumps(outer._completion(body, mode)).encode()
                if mode == "truncated":
                    return self._send(200, payload[: len(payload) // 2])
                if mode == "cut":
                    self._leave()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload[: len(payload) // 2])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return None
                return self._send(200, payload)

            def _send(self, code: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
                self._leave()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(payload)

        self._server = _Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        # a short poll interval: shutdown() waits up to one interval (0.5 s by default, per server, per test)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)

    def _next_mode(self, body: dict) -> str:
        prompt = str(body.get("messages", [{}])[-1].get("content", ""))
        for key, modes in self.by_prompt.items():
            if key in prompt and modes:
                return modes.pop(0)
        return self.script.pop(0) if self.script else "ok"

    def _completion(self, body: dict, mode: str) -> dict[str, Any]:
        prompt = body["messages"][-1]["content"]
        text = f"echo: {prompt}" if self.echo else f"{self.answer} [{len(prompt)}]"
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "length" if mode == "length" else "stop",
                    "message": {"role": "assistant", "content": None if mode == "null" else text},
                }
            ],
        }

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._cond:  # release any held requests so shutdown does not wait for them
            self.hold = 0
            self._cond.notify_all()
        self._server.shutdown()
        self._server.server_close()
