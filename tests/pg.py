"""The tests' PostgreSQL server: devkit/postgres.py's, where a server that cannot start skips the test.

The launcher itself lives in devkit/ because the benchmarks use it too, without pytest; this module
keeps the names the tests import and turns "cannot start" into pytest's outcome.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

from devkit.ports import free_port
from devkit.postgres import PostgresNotInstalled, PostgresServer, PostgresUnavailable, pg_bindir
from devkit.postgres import postgres_server as _launch

__all__ = ["REQUIRED", "PostgresServer", "free_port", "pg_bindir", "postgres_server"]

# .ci/run sets it: there PostgreSQL is installed first, so a missing server is a failure, not a skip.
REQUIRED = os.environ.get("BRIDGE_REQUIRE_POSTGRES") == "1"


@contextlib.contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """A running server for the block; the test is skipped where PostgreSQL is not installed (failed
    under .ci/run), and failed where it cannot be run (as root with no user to run it as)."""
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(_launch())
        except PostgresNotInstalled as missing:
            if REQUIRED:
                pytest.fail(str(missing))
            pytest.skip(str(missing))
        except PostgresUnavailable as unavailable:
            pytest.fail(str(unavailable))
        yield server
