"""The admin server's connection limits (issue 30, break 11): 1,034 half-open connections had left
/healthz unanswered for 14 s and logged 45,473 "Too many open files". Now a cap on open connections
([admin] max_connections) makes room by closing the oldest connection still without a request
header, a connection gets [admin] header_timeout_s to send one, and the cap logs one line a minute."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from bridge.http.server import AdminServer
from devkit.fakes.openai_server import FakeOpenAI
from tests.harness import running_bridge
from tests.http.conftest import TOKEN, client_of
from tests.pg import free_port
from tests.rawhttp import HALF_BODY, HALF_HEADER, SILENT, count_closed, holding

SERVING_LOG = "bridge.serving"
CAP = 20


@asynccontextmanager
async def limited_admin(tmp_path: Path, **limits: Any) -> AsyncIterator[tuple[AdminServer, int]]:
    port = free_port()
    admin = {"enabled": True, "port": port, "token": TOKEN, **limits}
    async with FakeOpenAI() as llm, running_bridge(tmp_path, llm, admin=admin) as harness:
        server = AdminServer(harness.bridge, [], harness.bridge.settings)
        await server.start()
        try:
            yield server, port
        finally:
            await server.stop()


def serving_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == SERVING_LOG]


async def healthz(port: int) -> int:
    async with client_of(f"http://127.0.0.1:{port}") as client:
        return (await client.get("/healthz", timeout=5)).status_code


async def test_half_open_connections_past_the_cap_make_room_and_healthz_answers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=SERVING_LOG)
    # A header timeout far longer than the test: the cap alone must keep the server answering.
    async with limited_admin(tmp_path, max_connections=CAP, header_timeout_s=120) as (server, port):
        payloads = [SILENT, HALF_HEADER] * (3 * CAP // 2)
        async with holding(port, payloads) as held:
            assert await healthz(port) == 200
            # The oldest ones made room, each as a newer one came; the newest are still held.
            oldest = held[: len(held) - CAP]
            assert await count_closed(oldest, within=5) == len(oldest)
            assert server.open_connections <= CAP
            assert await healthz(port) == 200
    lines = serving_lines(caplog)
    assert len(lines) == 1, lines
    assert f"cap of {CAP} open connections" in lines[0]
    assert "[admin] max_connections" in lines[0]


async def test_a_connection_without_a_whole_header_in_time_is_closed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=SERVING_LOG)
    async with limited_admin(tmp_path, header_timeout_s=0.5) as (server, port):
        async with holding(port, [SILENT, HALF_HEADER, SILENT, HALF_HEADER]) as held:
            assert await count_closed(held, within=5) == len(held)
        # An idle keep-alive connection is closed as late: it holds no place under the cap for long.
        request = (
            b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
            + TOKEN.encode()
            + b"\r\n\r\n"
        )
        async with holding(port, [request]) as (kept,):
            assert (await kept.reader.readline()).startswith(b"HTTP/1.1 200")
            assert await kept.closed_by_server(within=5)
        assert server.open_connections == 0
    assert serving_lines(caplog) == []  # under the cap nothing is logged


async def test_at_the_cap_with_every_connection_mid_request_a_new_one_is_refused_with_503(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=SERVING_LOG)
    cap = 5
    async with limited_admin(tmp_path, max_connections=cap, header_timeout_s=120) as (server, port):
        async with holding(port, [HALF_BODY] * cap) as busy:
            assert server.open_connections == cap
            async with holding(port, [SILENT] * 10) as refused:
                answers = await asyncio.gather(*(one.answer(within=5) for one in refused))
            for answer in answers:
                assert answer.startswith(b"HTTP/1.1 503")
                assert b"Retry-After: 1" in answer
            # A request in progress is never what makes room.
            assert not any([one.reader.at_eof() for one in busy])
            assert server.open_connections == cap
        assert await healthz(port) == 200
    lines = serving_lines(caplog)
    assert len(lines) == 1, lines
    assert "refused 1 with 503" in lines[0]  # the first, told at once; the rest within the minute
