"""Network helpers for tests, written once: a free loopback port (nothing listens on it once returned), for servers
the tests start and for "connection refused" cases."""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port() -> int:
    """A loopback TCP port that was free a moment ago; nothing listens on it until a test starts a server there."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
