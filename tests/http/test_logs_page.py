"""The Logs page and its API: the recent lines of the process log, filtered by level, text, time or run,
followed live and downloaded as the log file has them; redacted as the file is, and only for the
operator. Also the ring behind it (bridge.logs): bounded, fed from any thread, at the loggers' levels."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from bridge.logs import LIBRARY_LOGGERS, OWN_LOGGERS, LogRing, RingHandler, recent_log, setup_logging
from devkit.fakes.openai_server import FakeOpenAI, http_error
from tests.harness import Harness
from tests.http.conftest import admin_bridge, client_of

API_KEY = "sk-live-the-model-key-0123"
BOT_TOKEN = "123456:AAE-the-telegram-token"
log = logging.getLogger("bridge.logs_test")
# A generous bound on waiting for one line of the live tail.
WAIT_S = 5.0


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """setup_logging changes process-wide loggers; other tests must not see its handlers or levels."""
    root = logging.getLogger()
    names = (*OWN_LOGGERS, *LIBRARY_LOGGERS)
    saved_handlers, saved_root = root.handlers[:], root.level
    saved_levels = {name: logging.getLogger(name).level for name in names}
    yield
    root.handlers = saved_handlers
    root.setLevel(saved_root)
    for name, level in saved_levels.items():
        logging.getLogger(name).setLevel(level)


@dataclass
class LogSite:
    harness: Harness
    client: httpx.AsyncClient
    base: str
    stderr: io.StringIO  # what the stderr handler wrote

    async def lines(self, status: int = 200, **params: Any) -> list[dict[str, Any]]:
        answer = await self.client.get("/api/logs", params=params)
        assert answer.status_code == status, answer.text
        lines: list[dict[str, Any]] = answer.json().get("lines", [])
        return lines

    async def messages(self, **params: Any) -> list[str]:
        return [line["message"] for line in await self.lines(**params)]


@pytest.fixture
async def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[LogSite]:
    """A Bridge with its admin server, its logging set up as `bridge run` sets it up (stderr captured),
    with a bot token and a model key among its settings."""
    async with (
        FakeOpenAI() as llm,
        admin_bridge(tmp_path, llm, telegram={"token": BOT_TOKEN}) as (harness, _, base),
        client_of(base) as client,
    ):
        stderr = io.StringIO()
        monkeypatch.setattr("sys.stderr", stderr)
        settings = harness.bridge.settings
        # The fake model takes no key; the logging's settings have one all the same.
        keyed = settings.llm.model_copy(update={"api_key": SecretStr(API_KEY)})
        setup_logging(settings.model_copy(update={"llm": keyed}))
        yield LogSite(harness, client, base, stderr)


async def failed_turn(site: LogSite) -> str:
    """A turn whose model request fails with a 500; its run's id."""
    site.harness.llm.push(http_error(500, "the model is down"))
    await site.harness.say("hello?")
    [(run, _)] = await site.harness.bridge.store.list_runs(session_key=None, limit=1)
    assert run.status == "error"
    return run.id


def log_at(at: float, message: str, level: int = logging.INFO) -> None:
    """A line logged as if at `at` (through the loggers and handlers like any other)."""
    record = logging.makeLogRecord(
        {"name": log.name, "levelno": level, "levelname": logging.getLevelName(level), "msg": message}
    )
    record.created = at
    log.handle(record)


# ---------------------------------------------------------------------------- filters


async def test_lines_are_filtered_by_level_at_least_and_by_text_in_any_case(site: LogSite) -> None:
    log.debug("filter-test debug")
    log.info("filter-test info")
    log.warning("filter-test warning")
    log.error("filter-test error")
    # DEBUG is below the configured log_level (INFO): the ring holds what the log file holds.
    assert await site.messages(q="filter-test") == [
        "filter-test info",
        "filter-test warning",
        "filter-test error",
    ]
    assert await site.messages(q="FILTER-TEST", level="warning") == [
        "filter-test warning",
        "filter-test error",
    ]
    assert await site.messages(q="filter-test", level="ERROR") == ["filter-test error"]
    assert await site.messages(q="filter-test w") == ["filter-test warning"]
    [line] = await site.lines(q="filter-test error")
    assert (line["level"], line["logger"]) == ("ERROR", "bridge.logs_test")
    assert await site.lines(400, level="LOUD") == []


async def test_lines_carry_their_extra_fields_and_traceback(site: LogSite) -> None:
    try:
        raise RuntimeError("the disk is full")
    except RuntimeError:
        log.exception("saving failed", extra={"session_key": "main", "attempt": 2})
    [line] = await site.lines(q="saving failed")
    assert line["fields"] == {"session_key": "main", "attempt": 2}
    assert line["message"].startswith("saving failed\nTraceback")
    assert "RuntimeError: the disk is full" in line["message"]
    # Searching finds a line by its fields too.
    assert [line["message"] for line in await site.lines(q="session_key=main")] == [line["message"]]


async def test_since_until_and_limit_choose_the_lines(site: LogSite) -> None:
    now = time.time()
    for minutes in (30, 20, 10):
        log_at(now - minutes * 60, f"window-test {minutes} minutes ago")
    since, until = now - 25 * 60, now - 5 * 60
    assert await site.messages(q="window-test", since=since, until=until) == [
        "window-test 20 minutes ago",
        "window-test 10 minutes ago",
    ]
    assert await site.messages(q="window-test", limit=1) == ["window-test 10 minutes ago"]
    assert await site.lines(400, since="yesterday") == []


async def test_a_run_shows_the_lines_of_its_window_and_the_lines_that_name_it(site: LogSite) -> None:
    run_id = await failed_turn(site)
    run = await site.harness.bridge.store.get_run(run_id)
    assert run is not None and run.ended_at is not None
    log_at(run.started_at - 60, "a minute before the run")
    log_at(run.started_at - 120, f"two minutes before, about run {run_id}")
    log_at(run.ended_at + 60, "a minute after the run")

    lines = await site.lines(run=run_id)
    messages = [line["message"] for line in lines]
    assert "a minute before the run" not in messages
    assert "a minute after the run" not in messages
    assert f"two minutes before, about run {run_id}" in messages
    # The runner's warning about the model, and its one line per run (run_id in `extra`), are marked
    # as the run's own.
    [failed] = [line for line in lines if "the model failed" in line["message"]]
    assert failed["level"] == "WARNING" and failed["of_run"]
    [summary] = [line for line in lines if line["fields"].get("run_id") == run_id]
    assert summary["of_run"] and summary["logger"] == "bridge.runs"

    assert (await site.client.get("/api/logs", params={"run": "0123456789abcdef"})).status_code == 404


# ---------------------------------------------------------------------------- download


async def test_the_download_holds_the_matching_lines_as_the_log_file_writes_them(site: LogSite) -> None:
    log.info("download-test info")
    log.warning("download-test warning")
    answer = await site.client.get("/api/logs/download", params={"q": "download-test", "level": "WARNING"})
    assert answer.status_code == 200
    assert answer.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert answer.headers["Content-Disposition"].startswith('attachment; filename="bridge-')
    [line] = answer.text.splitlines()
    assert line.endswith(" WARNING bridge.logs_test: download-test warning")
    assert line in site.stderr.getvalue().splitlines()


async def test_a_runs_download_is_named_after_the_run(site: LogSite) -> None:
    run_id = await failed_turn(site)
    answer = await site.client.get("/api/logs/download", params={"run": run_id})
    assert answer.headers["Content-Disposition"] == f'attachment; filename="bridge-run-{run_id}.log"'
    assert "the model failed" in answer.text


# ---------------------------------------------------------------------------- live


async def next_event(lines: AsyncIterator[str]) -> dict[str, str]:
    """The fields of the next server-sent event (comments skipped)."""
    event: dict[str, str] = {}
    while True:
        line = await asyncio.wait_for(anext(lines), WAIT_S)
        if not line:
            if event:
                return event
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(": ")
        event[name] = value


async def test_the_stream_delivers_new_matching_lines_live_even_from_another_thread(site: LogSite) -> None:
    async with site.client.stream("GET", "/api/logs/stream", params={"q": "live-test"}) as stream:
        lines = stream.aiter_lines()
        assert await asyncio.wait_for(anext(lines), WAIT_S) == ": connected"
        log.info("not for this viewer")
        log.info("live-test from the loop")
        await asyncio.to_thread(log.warning, "live-test from a thread")
        first, second = await next_event(lines), await next_event(lines)
    assert first["event"] == "line"
    assert json.loads(first["data"])["message"] == "live-test from the loop"
    assert json.loads(second["data"])["message"] == "live-test from a thread"
    assert int(second["id"]) > int(first["id"])


async def test_the_stream_resumes_after_the_last_line_a_viewer_had(site: LogSite) -> None:
    log.info("resume-test one")
    [one] = await site.lines(q="resume-test")
    log.info("resume-test two")
    # As a reconnecting browser asks: the lines after the one it had come first, then the live ones.
    headers = {"Last-Event-ID": str(one["seq"])}
    async with site.client.stream(
        "GET", "/api/logs/stream", params={"q": "resume-test"}, headers=headers
    ) as s:
        lines = s.aiter_lines()
        assert json.loads((await next_event(lines))["data"])["message"] == "resume-test two"
        log.info("resume-test three")
        assert json.loads((await next_event(lines))["data"])["message"] == "resume-test three"


async def test_a_viewer_leaving_the_tail_is_no_error(site: LogSite) -> None:
    setup_logging(site.harness.bridge.settings.model_copy(update={"log_level": "DEBUG"}))
    async with site.client.stream("GET", "/api/logs/stream") as stream:
        assert await asyncio.wait_for(anext(stream.aiter_lines()), WAIT_S) == ": connected"
    # The next line finds the connection closed and ends the stream; its end is logged, at DEBUG.
    log.info("after the viewer left")
    deadline = time.monotonic() + WAIT_S
    while not any("viewer left" in entry.message for entry in recent_log().entries()):
        assert time.monotonic() < deadline, "the tail did not end"
        log.info("still logging")
        await asyncio.sleep(0.05)
    assert [entry.line for entry in recent_log().entries() if entry.levelno >= logging.ERROR] == []


# ---------------------------------------------------------------------------- redaction, access


async def test_a_secret_of_the_settings_never_reaches_the_page_the_api_the_stream_or_the_download(
    site: LogSite,
) -> None:
    async with site.client.stream("GET", "/api/logs/stream", params={"q": "secret-test"}) as stream:
        lines = stream.aiter_lines()
        assert await asyncio.wait_for(anext(lines), WAIT_S) == ": connected"
        log.warning(
            "secret-test calling with key %s", API_KEY, extra={"url": f"https://x/bot{BOT_TOKEN}/getMe"}
        )
        try:
            raise ConnectionError(f"secret-test /bot{BOT_TOKEN}/sendMessage refused")
        except ConnectionError:
            log.exception("secret-test send failed")
        streamed = [await next_event(lines), await next_event(lines)]
    answers = [
        json.dumps(await site.lines(q="secret-test")),
        json.dumps(streamed),
        (await site.client.get("/api/logs/download", params={"q": "secret-test"})).text,
        (await site.client.get("/logs", params={"q": "secret-test"}, headers={"Accept": "text/html"})).text,
    ]
    for answer in answers:
        assert "secret-test" in answer
        assert API_KEY not in answer and BOT_TOKEN not in answer
        assert "&lt;redacted&gt;" in answer or "<redacted>" in answer


async def test_the_logs_need_the_admin_token(site: LogSite) -> None:
    async with client_of(site.base, token=None) as stranger:
        for path in ("/api/logs", "/api/logs/stream", "/api/logs/download"):
            assert (await stranger.get(path)).status_code == 401, path
        page = await stranger.get("/logs", headers={"Accept": "text/html"})
        assert page.status_code == 303 and page.headers["Location"].startswith("/login")


# ---------------------------------------------------------------------------- the page


async def test_the_page_shows_the_matching_lines_with_a_download_link_that_keeps_the_filters(
    site: LogSite,
) -> None:
    log.info("page-test <b>info</b>")
    log.warning("page-test warning")
    answer = await site.client.get("/logs", params={"level": "WARNING", "q": "page-test"})
    assert answer.status_code == 200
    page = answer.text
    assert 'class="line WARNING"' in page and "page-test warning" in page
    assert "page-test &lt;b&gt;info" not in page
    assert 'href="/api/logs/download?level=WARNING&amp;q=page-test"' in page
    assert '<script src="/static/logs.js" defer></script>' in page
    missing = await site.client.get("/logs", params={"run": "0123456789abcdef"})
    assert missing.status_code == 404 and "no run 0123456789abcdef" in missing.text


async def test_a_runs_page_links_to_the_log_around_it(site: LogSite) -> None:
    run_id = await failed_turn(site)
    run_page = (await site.client.get(f"/runs/{run_id}")).text
    assert f'<a href="/logs?run={run_id}">Log around this run</a>' in run_page
    page = (await site.client.get("/logs", params={"run": run_id})).text
    assert "The log around run" in page
    assert 'class="line WARNING of-run"' in page


# ---------------------------------------------------------------------------- the ring


def test_the_ring_keeps_only_its_newest_lines() -> None:
    ring = LogRing(size=3)
    logger = logging.getLogger("test.ring.bounded")
    handler = RingHandler(ring)
    logger.addHandler(handler)
    logger.propagate = False
    try:
        for n in range(5):
            logger.warning("line %d", n)
    finally:
        logger.removeHandler(handler)
    assert [(entry.seq, entry.message) for entry in ring.entries()] == [
        (3, "line 2"),
        (4, "line 3"),
        (5, "line 4"),
    ]


def test_without_logging_set_up_the_ring_is_empty_and_a_page_can_still_read_it() -> None:
    # A fresh interpreter: in this one, other tests have set logging up.
    code = (
        "import logging; from bridge.logs import recent_log\n"
        "logging.getLogger('bridge').warning('not kept')\n"
        "assert recent_log().entries() == [], recent_log().entries()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
