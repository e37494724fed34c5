"""A real PostgreSQL server for tests and benchmarks: initdb and pg_ctl in a temp folder, on a free port,
unprivileged.

Where it cannot start, `postgres_server()` raises `PostgresUnavailable` with the remedy; the tests turn
that into a skip or a failure (tests/pg.py), the benchmarks into a note. `unavailable()` says in advance
why a benchmark cannot use one here.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devkit.ports import free_port


class PostgresUnavailable(RuntimeError):
    """A server cannot be started on this machine; the message says why and what to do."""


class PostgresNotInstalled(PostgresUnavailable):
    """PostgreSQL's server programs are not on this machine (the tests skip, unless CI requires them)."""


NOT_INSTALLED = (
    "PostgreSQL is not installed (no initdb on PATH or in /usr/lib/postgresql/*/bin): "
    "apt-get install postgresql, as .ci/run does"
)


def pg_bindir() -> Path | None:
    """Where initdb and pg_ctl are: on PATH, or Debian's /usr/lib/postgresql/N/bin (newest)."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(candidates[-1]).parent if candidates else None


def unavailable() -> str | None:
    """Why Bridge cannot be run on a server started here, or None when it can: the client (psycopg and
    its pool, the `postgresql` extra, which the `bench` extra leaves out), the server programs, and a
    user to run them as."""
    if any(importlib.util.find_spec(name) is None for name in ("psycopg", "psycopg_pool")):
        return "psycopg is not installed: pip install -e '.[bench,postgresql]'"
    if pg_bindir() is None:
        return NOT_INSTALLED
    try:
        _unprivileged()
    except PostgresUnavailable as cannot:
        return str(cannot)
    return None


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
        # Imported here: the server itself needs only its programs, and the benchmarks run without it.
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
    raise PostgresUnavailable("running as root and there is no postgres or nobody user to run PostgreSQL as")


@contextlib.contextmanager
def postgres_server(*, settings: str = "") -> Iterator[PostgresServer]:
    """A server for the block. `settings`: more `-c name=value` options (a benchmark's
    shared_preload_libraries)."""
    bindir = pg_bindir()
    if bindir is None:
        raise PostgresNotInstalled(NOT_INSTALLED)
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
        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 "
        f"{settings}"
    )
    ctl: list[str | Path] = [bindir / "pg_ctl", "-D", data, "-o", options, "-l", folder / "server.log"]
    subprocess.run([*ctl, "-w", "-t", "60", "start"], **run)
    try:
        yield PostgresServer(port, folder, itertools.count(1), ctl, run)
    finally:
        subprocess.run([*ctl, "-m", "immediate", "-w", "stop"], **{**run, "check": False})
        shutil.rmtree(folder, ignore_errors=True)
