"""The library's one HTTP client (queerbench.base.http): a reply has a deadline and a size cap, a secret is scrubbed
only where it appears as a token, a URL that cannot be called is one line before any request, and every remote
caller (endpoints, Perspective, the SCM embedder, the package index, the pinned sources) goes through it."""

from __future__ import annotations

import ast
import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from queerbench.base.http import BadReply, HttpClient, RetryRules, Unreachable, check_endpoint_url, scrub
from queerbench.models.generation import GenerationSettings, OpenAIChatRunner

PACKAGE = Path(__file__).resolve().parents[1] / "queerbench"
GREEDY = GenerationSettings(temperature=0.0, top_p=None, max_new_tokens=4, samples=1, batch_size=1)


class _Handler(http.server.BaseHTTPRequestHandler):
    """``/drip``: a valid reply one byte every 0.25 s; ``/huge``: 3 MB; ``/ok``: a small chat completion."""

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def _head(self, length: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def do_GET(self) -> None:
        """``/status/<code>``: an empty JSON answer with that status."""
        code = int(self.path.rsplit("/", 1)[-1])
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b'{"choices": [{"message": {"content": "nurse"}, "finish_reason": "stop"}]}'
        if self.path.endswith("/drip/chat/completions"):
            self._head(len(body))
            try:
                for byte in body:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(0.25)
            except (BrokenPipeError, ConnectionResetError):
                return
        elif self.path.endswith("/huge/chat/completions"):
            payload = b'{"choices": [{"message": {"content": "' + b"x" * 3_000_000 + b'"}}]}'
            self._head(len(payload))
            try:
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                return
        else:
            self._head(len(body))
            self.wfile.write(body)


@pytest.fixture()
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_a_secret_is_scrubbed_only_as_a_token() -> None:
    assert scrub("max exceeded; key x rejected", "x") == "max exceeded; key *** rejected"
    assert scrub("Incorrect API key provided: sk-abc123.", "sk-abc123") == "Incorrect API key provided: ***."
    assert scrub("https://h/analyze?key=SECRET&x=1 failed", None) == "https://h/analyze?key=***&x=1 failed"
    assert scrub("line one\n  line two", None) == "line one line two"


def test_a_short_api_key_does_not_garble_the_endpoints_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QB_SHORT_KEY", "x")
    runner = OpenAIChatRunner("http://127.0.0.1:9/v1", "m", api_key_env="QB_SHORT_KEY", sleep=lambda s: None)
    assert runner._scrub("max exceeded for x") == "max exceeded for ***"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("", "--endpoint is empty"),
        ("ftp://h/v1", "must be an http(s) URL"),
        ("http://", "names no host"),
        ("http://127.0.0.1:99999/v1", "is not a valid URL"),
        ("http://[::1/v1", "is not a valid URL"),
        ("http://127.0.0.1:0/v1", "port 0 cannot be called"),
    ],
)
def test_a_url_that_cannot_be_called_is_one_line_before_any_request(url: str, says: str) -> None:
    with pytest.raises(ValueError) as info:
        check_endpoint_url(url)
    assert says in str(info.value) and "\n" not in str(info.value)


def test_a_dripping_reply_is_cut_at_the_deadline(server: str) -> None:
    runner = OpenAIChatRunner(f"{server}/drip", "m", timeout=1.0, max_retries=1, sleep=lambda s: None)
    start = time.monotonic()
    reply = runner.call("hi", 0, GREEDY)
    took = time.monotonic() - start
    assert reply.error == "gave up after 2 attempts: no complete answer within 1 s; no complete answer within 1 s"
    assert took < 4.0, took  # two deadlines of 1 s, not the ~18 s the whole drip takes


def test_a_reply_over_the_size_cap_is_refused(server: str) -> None:
    client = HttpClient(max_retries=0, max_bytes=1_000_000)
    outcome = client.request("POST", f"{server}/huge/chat/completions", json={}, parse=lambda a: a.json())
    assert not outcome.ok and outcome.problems == ["reply larger than 1000000 bytes"]
    small = client.request("POST", f"{server}/ok/chat/completions", json={}, parse=lambda a: a.json())
    assert small.ok and small.value["choices"][0]["message"]["content"] == "nurse" and client.calls == 2


class _KeepAlive(_Handler):
    """HTTP/1.1: a connection stays open for the next request unless the client closes it."""

    protocol_version = "HTTP/1.1"
    connections: ClassVar[set[int]] = set()

    def setup(self) -> None:
        super().setup()
        _KeepAlive.connections.add(id(self.connection))


def test_a_reply_read_whole_leaves_its_connection_open_for_the_next() -> None:
    """A keep-alive server (vLLM, OpenAI) gets every request of a client on the connections it keeps, not one new TCP
    (and TLS) handshake per request."""
    _KeepAlive.connections.clear()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _KeepAlive)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        client = HttpClient(max_retries=0)
        url = f"http://127.0.0.1:{httpd.server_address[1]}/ok/chat/completions"
        for _ in range(5):
            outcome = client.request("POST", url, json={}, parse=lambda a: a.json())
            assert outcome.ok and outcome.value["choices"][0]["message"]["content"] == "nurse"
        assert client.calls == 5 and len(_KeepAlive.connections) <= 2  # reused (a request that closes opens 4-5)
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_malformed_answer_is_retried_and_named(server: str) -> None:
    def parse(answer: object) -> None:
        raise BadReply("malformed reply (no words)")

    sleeps: list[float] = []
    client = HttpClient(max_retries=2, backoff_base=0.5, jitter=lambda: 0.0, sleep=sleeps.append)
    outcome = client.request("POST", f"{server}/ok/chat/completions", json={}, parse=parse)
    assert outcome.problems == ["malformed reply (no words)"] * 3 and outcome.attempts == 3 and sleeps == [0.5, 1.0]


def test_a_5xx_is_retried_unless_it_says_the_server_cannot_do_it(server: str) -> None:
    """503 is asked again; 501 (Not Implemented, e.g. a server without ``GET /models``) and 505 once only."""
    for code, attempts in ((503, 3), (501, 1), (505, 1)):
        sleeps: list[float] = []
        client = HttpClient(max_retries=2, jitter=lambda: 0.0, sleep=sleeps.append)
        outcome = client.request("GET", f"{server}/status/{code}", parse=lambda a: a)
        assert not outcome.ok and outcome.attempts == attempts and len(sleeps) == attempts - 1, code


def test_a_refused_connection_is_unreachable_or_retried_as_the_rules_say() -> None:
    with pytest.raises(Unreachable) as info:
        HttpClient(max_retries=3).request("GET", "http://127.0.0.1:9/x", parse=lambda a: a)
    assert info.value.kind == "connection refused or unknown host"
    sleeps: list[float] = []
    client = HttpClient(rules=RetryRules(retry_refused=True), max_retries=1, sleep=sleeps.append, jitter=lambda: 0.0)
    outcome = client.request("GET", "http://127.0.0.1:9/x", parse=lambda a: a)
    assert not outcome.ok and outcome.attempts == 2 and len(sleeps) == 1
    assert outcome.problems[0].startswith("connection error (NewConnectionError: ")
    assert outcome.problems[0].endswith("Connection refused (http://127.0.0.1:9/x))")


def test_the_environments_proxy_is_used_and_no_proxy_exempts_a_host(server: str, monkeypatch: pytest.MonkeyPatch):
    """As with requests: ``HTTP_PROXY`` sends a request through the proxy (here the test server, which answers it),
    ``NO_PROXY`` sends it to the host itself (which does not exist)."""
    url = "http://model-host.invalid/v1/ok/chat/completions"
    for name in ("HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, server)
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    outcome = HttpClient(max_retries=0).request("POST", url, json={}, parse=lambda a: a.json())
    assert outcome.ok and outcome.value["choices"][0]["message"]["content"] == "nurse"
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "model-host.invalid")
    with pytest.raises(Unreachable):
        HttpClient(max_retries=0).request("POST", url, json={}, parse=lambda a: a.json())


def test_every_remote_call_goes_through_the_one_client() -> None:
    """No module but queerbench.base.http makes HTTP requests of its own (requests, urllib3, urllib, http.client)."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.match("base/http.py"):
            continue
        reads_settings_only = path.match("base/env.py")  # urllib.request's proxy-variable parsers; no request
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            calls = ("get", "post", "put", "request", "Session", "head")
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "requests" and node.attr in calls:  # fmt: skip
                found.append(f"{path.relative_to(PACKAGE)}: requests.{node.attr}")
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                clients = ("urllib.request", "http.client", "urllib3", "requests", "httpx")
                if any(n.startswith(clients) for n in names) and not (
                    reads_settings_only and names[0] == "urllib.request"
                ):
                    found.append(f"{path.relative_to(PACKAGE)}: {names}")
    assert found == []
