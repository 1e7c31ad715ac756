"""The test servers' handler errors: a client that hung up is silent, any other error is still printed.

Several tests time their client out or cut its connection on purpose; the server's handler thread, still sleeping,
then writes into a closed socket after its test has ended. Printed, that traceback lands in whichever test the worker
runs next and breaks its one-line stderr check (tests/conftest.py silences it). A real handler bug must still show.
"""

from __future__ import annotations

import http.server
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest


class _Raises(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/hung-up":
            raise BrokenPipeError(32, "Broken pipe")
        raise ValueError("a real bug in the handler")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture()
def url() -> Iterator[str]:
    httpd = http.server.HTTPServer(("127.0.0.1", 0), _Raises)  # one thread: the error is printed before the reply
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize(("path", "printed"), [("/hung-up", False), ("/bug", True)])
def test_a_hung_up_client_is_silent_and_a_handler_bug_is_printed(
    url: str, path: str, printed: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
        urllib.request.urlopen(url + path, timeout=5)
    err = capfd.readouterr().err
    assert ("Exception occurred during processing of request" in err) is printed, err
    assert ("a real bug in the handler" in err) is printed
