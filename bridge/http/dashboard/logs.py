"""The dashboard's logs page: a live tail of the process log, with a level filter, search and download.

What it shows is bridge.logs' ring of recent lines, kept behind the same redacting filter as the
stderr log, so the page and the download never hold more than the log file does."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

from aiohttp import web

from bridge.http.api import KEEPALIVE_S
from bridge.http.pages import DashboardPart, Render
from bridge.http.replies import bad_request, not_found
from bridge.logs import LogEntry, recent_log

if TYPE_CHECKING:
    from bridge.app import Bridge
    from bridge.store.base import RunRow

log = logging.getLogger(__name__)

# The levels the page filters by: a line shows at this level or above.
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
# The log around a run: from its start to its end, and this much either side, where a line about it
# logged just before it started (the message arriving) or after it ended (the reply sent) falls.
RUN_PAD_S = 5.0
# Lines a page or an API answer holds unless ?limit= says otherwise; the download holds every match.
DEFAULT_LIMIT = 500
# As bridge.http.api's event stream: never cached, never held back by a proxy.
STREAM_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_LEVELNO = {name: logging.getLevelNamesMapping()[name] for name in LEVELS}


@dataclass(frozen=True, slots=True)
class LogQuery:
    """Which lines: at least `level`, containing `text` (any case), within [since, until]; with a run,
    its window, and any line that names it, wherever it falls."""

    level: str = ""  # one of LEVELS, or "" for every line
    text: str = ""  # found in any case
    since: float | None = None
    until: float | None = None
    run_id: str | None = None

    def names_run(self, entry: LogEntry) -> bool:
        # Only the runner's line per finished run carries run_id in `extra`; the others name it in
        # their text ("run 3f2a…: the model failed").
        run_id = self.run_id
        return run_id is not None and (entry.fields.get("run_id") == run_id or run_id in entry.message)

    def matches(self, entry: LogEntry) -> bool:
        if self.level and entry.levelno < _LEVELNO[self.level]:
            return False
        if self.text and self.text.casefold() not in _searched(entry):
            return False
        in_window = (self.since is None or entry.at >= self.since) and (
            self.until is None or entry.at <= self.until
        )
        return in_window or self.names_run(entry)

    def select(self, entries: Sequence[LogEntry], limit: int | None = None) -> tuple[list[LogEntry], int]:
        """The newest `limit` matching entries, oldest first, and how many matched in all."""
        matching = [entry for entry in entries if self.matches(entry)]
        return (matching[-limit:] if limit else matching), len(matching)

    def params(self) -> dict[str, str]:
        """The query string that asks for these lines again (the download link, the live tail)."""
        params = {"level": self.level, "q": self.text, "run": self.run_id or ""}
        return {name: value for name, value in params.items() if value}


def _searched(entry: LogEntry) -> str:
    fields = " ".join(f"{key}={value}" for key, value in entry.fields.items())
    return f"{entry.logger} {entry.level} {entry.message} {fields}".casefold()


class LogsPage(DashboardPart):
    """GET /logs (the page), /api/logs (the lines as JSON), /api/logs/stream (new lines as server-sent
    events) and /api/logs/download (the lines as the log file has them)."""

    def __init__(self, bridge: Bridge, render: Render) -> None:
        super().__init__(bridge, render)
        self.zone = ZoneInfo(bridge.settings.agent.timezone)

    def routes(self, app: web.Application) -> None:
        add = app.router
        add.add_get("/logs", self.page)
        add.add_get("/api/logs", self.lines)
        add.add_get("/api/logs/stream", self.stream)
        add.add_get("/api/logs/download", self.download)

    # ------------------------------------------------------------------ routes

    async def page(self, request: web.Request) -> web.Response:
        ring = recent_log()
        entries = ring.entries()
        context: dict[str, Any] = {
            "levels": LEVELS,
            "level": request.query.get("level", "").upper(),
            "q": request.query.get("q", ""),
            "run_id": request.query.get("run", ""),
            "capacity": ring.size,
            "kept": len(entries),
            # The live tail resumes after the newest line kept now, whether it matched or not.
            "after": entries[-1].seq if entries else 0,
        }
        try:
            query, run = await self._query(request)
            lines, matched = query.select(entries, _limit(request))
        except web.HTTPException as exc:
            # A bad filter or an unknown run, said on the page rather than as the API's JSON.
            detail = json.loads(exc.text or "{}").get("detail", exc.reason)
            return self.render("logs.html", "logs", status=exc.status, problem=detail, lines=[], **context)
        return self.render(
            "logs.html",
            "logs",
            lines=[self._json(entry, query) for entry in lines],
            matched=matched,
            run=run,
            window=self._window(query),
            query=urlencode(query.params()),
            download=_link("/api/logs/download", query.params()),
            whole_log=_link("/logs", {k: v for k, v in query.params().items() if k != "run"}),
            **context,
        )

    async def lines(self, request: web.Request) -> web.Response:
        """The kept lines that match, oldest first: ?level=, ?q=, ?since=, ?until= (Unix seconds), ?run=
        (the window around that run), ?limit= (the newest that many; 500 unless given)."""
        query, _ = await self._query(request)
        ring = recent_log()
        entries = ring.entries()
        lines, matched = query.select(entries, _limit(request))
        body = {
            "lines": [self._json(entry, query) for entry in lines],
            "matched": matched,
            "kept": len(entries),
            "capacity": ring.size,
            "last": entries[-1].seq if entries else 0,
        }
        return web.json_response(body, dumps=_dumps)

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events, one `line` event a new matching line (its seq as the event id); the same
        filters as /api/logs. ?after=SEQ (or a reconnecting browser's Last-Event-ID) first sends the
        kept lines after that one, so a page loses none between its render and the stream opening."""
        query, _ = await self._query(request)
        after = _after(request)
        response = web.StreamResponse(headers=STREAM_HEADERS)
        with recent_log().subscribe(after) as (backlog, queue):
            await response.prepare(request)
            try:
                await response.write(b": connected\n\n")
                for entry in backlog:
                    await self._send(response, entry, query)
                while True:
                    try:
                        entry = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
                    except TimeoutError:
                        await response.write(b": keepalive\n\n")
                        continue
                    await self._send(response, entry, query)
            except ConnectionResetError:
                # The viewer left (closed the tab, changed the filters): every page view ends so, as
                # bridge.http.api's event stream explains; no error.
                log.debug("a log tail's viewer left (%s)", request.remote)
        return response

    async def download(self, request: web.Request) -> web.Response:
        """Every kept line that matches (or the newest ?limit=), as the stderr log writes it."""
        query, _ = await self._query(request)
        lines, _ = query.select(recent_log().entries(), _limit(request, None))
        stamp = dt.datetime.now(self.zone).strftime("%Y%m%d-%H%M%S")
        name = f"bridge-run-{query.run_id}.log" if query.run_id else f"bridge-{stamp}.log"
        return web.Response(
            text="".join(entry.line + "\n" for entry in lines),
            content_type="text/plain",
            charset="utf-8",
            headers={"Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "no-store"},
        )

    # ------------------------------------------------------------------ helpers

    async def _query(self, request: web.Request) -> tuple[LogQuery, RunRow | None]:
        """The filters of a request, and the run it names (None without ?run=); 400 for a bad value,
        404 for a run the store does not have."""
        level = request.query.get("level", "").strip().upper()
        if level and level not in LEVELS:
            raise bad_request(f"level must be one of {', '.join(LEVELS)}")
        since, until = _seconds(request, "since"), _seconds(request, "until")
        run_id = request.query.get("run", "").strip() or None
        run = None
        if run_id is not None:
            run = await self.bridge.store.get_run(run_id)
            if run is None:
                raise not_found(f"no run {run_id} (it was never stored, or was pruned)")
            # An explicit since or until narrows or widens the run's window.
            since = since if since is not None else run.started_at - RUN_PAD_S
            if until is None and run.ended_at is not None:
                until = run.ended_at + RUN_PAD_S
        query = LogQuery(
            level=level,
            text=request.query.get("q", "").strip(),
            since=since,
            until=until,
            run_id=run_id,
        )
        return query, run

    def _json(self, entry: LogEntry, query: LogQuery) -> dict[str, Any]:
        when = dt.datetime.fromtimestamp(entry.at, self.zone)
        return {
            "seq": entry.seq,
            "at": entry.at,
            "time": when.strftime("%H:%M:%S.") + f"{when.microsecond // 1000:03d}",
            "date": when.strftime("%Y-%m-%d"),
            "level": entry.level,
            "logger": entry.logger,
            "message": entry.message,
            "fields": entry.fields,
            "of_run": query.names_run(entry),
        }

    async def _send(self, response: web.StreamResponse, entry: LogEntry, query: LogQuery) -> None:
        if query.matches(entry):
            data = _dumps(self._json(entry, query))
            await response.write(f"id: {entry.seq}\nevent: line\ndata: {data}\n\n".encode())

    def _window(self, query: LogQuery) -> str:
        """The time span a page shows, in words."""

        def clock(stamp: float) -> str:
            return dt.datetime.fromtimestamp(stamp, self.zone).strftime("%Y-%m-%d %H:%M:%S")

        if query.since is None and query.until is None:
            return ""
        start = clock(query.since) if query.since is not None else "the oldest line kept"
        end = clock(query.until) if query.until is not None else "now"
        return f"{start} to {end}"


def _link(path: str, params: dict[str, str]) -> str:
    return f"{path}?{urlencode(params)}" if params else path


def _seconds(request: web.Request, name: str) -> float | None:
    raw = request.query.get(name, "").strip()
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        raise bad_request(f"{name} must be Unix seconds (a number)") from None


def _limit(request: web.Request, default: int | None = DEFAULT_LIMIT) -> int | None:
    raw = request.query.get("limit", "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise bad_request("limit must be a whole number") from None
    if value < 1:
        raise bad_request("limit must be 1 or more")
    return value


def _after(request: web.Request) -> int | None:
    raw = request.headers.get("Last-Event-ID") or request.query.get("after", "")
    try:
        return int(raw) if raw.strip() else None
    except ValueError:
        raise bad_request("after must be a line's seq (a whole number)") from None


def _dumps(data: Any) -> str:
    # Extra fields are JSON already (bridge.logs keeps only those); default=str is for anything else.
    return json.dumps(data, default=str)


__all__ = ["LEVELS", "RUN_PAD_S", "LogQuery", "LogsPage"]
