"""A real PostgreSQL server for tests: initdb and pg_ctl in a temp folder, on a free port, unprivileged."""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# .ci/run sets it: there PostgreSQL is installed first, so a missing server is a failure, not a skip.
REQUIRED = os.environ.get("BRIDGE_REQUIRE_POSTGRES") == "1"


def pg_bindir() -> Path | None:
    """Where initdb and pg_ctl are: on PATH, or Debian's /usr/lib/postgresql/N/bin (newest)."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(candidates[-1]).parent if candidates else None


def free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PostgresServer:
    """A running server; `database()` makes a fresh, empty database and returns its URL."""

    port: int
    folder: Path
    _names: Iterator[int]
    _ctl: list[str | Path]
    _run: dict[str, Any]

    @property
    def admin_url(self) -> str:
        return f"postgresql://bridge@127.0.0.1:{self.port}/postgres"

    def url(self, name: str) -> str:
        return f"postgresql://bridge@127.0.0.1:{self.port}/{name}"

    def database(self) -> str:
        import psycopg

        name = f"t{next(self._names)}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}".encode())
        return self.url(name)

    def restart(self) -> None:
        """Stop the server (every connection is closed; with "fast", what was committed is kept,
        which "immediate" with this server's fsync=off would not promise) and start it again."""
        subprocess.run([*self._ctl, "-m", "fast", "-w", "-t", "60", "restart"], **self._run)


def _unprivileged() -> dict[str, int]:
    """PostgreSQL refuses to run as root: as root, run its programs as the `postgres` user (made by
    Debian's package) or `nobody`."""
    if os.geteuid() != 0:
        return {}
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            user = pwd.getpwnam(name)
            return {"user": user.pw_uid, "group": user.pw_gid}
    pytest.fail("running as root and there is no postgres or nobody user to run PostgreSQL as")


@contextlib.contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    bindir = pg_bindir()
    if bindir is None:
        message = (
            "PostgreSQL is not installed (no initdb on PATH or in /usr/lib/postgresql/*/bin): "
            "apt-get install postgresql, as .ci/run does"
        )
        if REQUIRED:
            pytest.fail(message)
        pytest.skip(message)
    ids = _unprivileged()
    folder = Path(tempfile.mkdtemp(prefix="bridge-pg-"))
    data = folder / "data"
    if ids:
        os.chown(folder, ids["user"], ids["group"])
    env = {**os.environ, "LC_ALL": "C", "TZ": "UTC"}
    run: dict[str, Any] = {"check": True, "capture_output": True, "env": env, "cwd": folder, **ids}
    initdb: list[str | Path] = [
        bindir / "initdb",
        "-D",
        data,
        "-U",
        "bridge",
        "--auth=trust",
        "-E",
        "UTF8",
        "--no-sync",
    ]
    subprocess.run(initdb, **run)
    port = free_port()
    options = (
        f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories='{folder}' "
        # A test server: the workers under test are killed, never the server, so it need not sync.
        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
    )
    ctl: list[str | Path] = [bindir / "pg_ctl", "-D", data, "-o", options, "-l", folder / "server.log"]
    subprocess.run([*ctl, "-w", "-t", "60", "start"], **run)
    try:
        yield PostgresServer(port, folder, itertools.count(1), ctl, run)
    finally:
        subprocess.run([*ctl, "-m", "immediate", "-w", "stop"], **{**run, "check": False})
        shutil.rmtree(folder, ignore_errors=True)
