"""A free TCP port on 127.0.0.1, for the servers the tests and benchmarks start."""

from __future__ import annotations

import contextlib
import socket


def free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
