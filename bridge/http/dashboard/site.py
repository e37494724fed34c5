"""The dashboard's own pages: overview, sessions, a session as a chat, run timelines, outbox, policy."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from aiohttp import web

from bridge.config.platforms import known_surfaces
from bridge.http.pages import Pages
from bridge.http.views import (
    SessionFilter,
    find_sessions,
    outbox_json,
    outbox_state,
    queues_json,
    run_detail,
    session_detail,
)
from bridge.sessions.keys import Kind

if TYPE_CHECKING:
    from bridge.app import Bridge

STATIC = Path(__file__).parent.parent / "static"
# Runs the overview counts from: enough for an hour of a busy bot, one indexed read.
OVERVIEW_RUNS = 500
TURNS_WINDOW_S = 600.0
ERRORS_WINDOW_S = 3600.0
OUTBOX_TABS = ("failed", "uncertain", "pending", "sending", "suppressed", "sent")
# A session page shows this many of the newest messages; the API pages further.
CHAT_MESSAGES = 200


@dataclass(frozen=True, slots=True)
class Bar:
    """One step of a run on its timeline, as parts of 1000 of the run's length."""

    step: dict[str, Any]
    start: int
    width: int


class Dashboard:
    """GET routes rendering server-side HTML; every change is a POST to the JSON API, sent by
    static/app.js with the page's CSRF value, so the dashboard and the API can never disagree."""

    def __init__(
        self,
        bridge: Bridge,
        platforms: Callable[[], dict[str, str]],
        pages: Pages,
        csrf: str,
        *,
        read_only: Callable[[], str | None],
    ) -> None:
        self.bridge = bridge
        # {platform: state}, from the server that knows the adapters.
        self.platforms = platforms
        self.pages = pages
        self.csrf = csrf
        # Why the policy editor can't save (no config file, or one it may not write), or None; asked at
        # each page, so a file made writable meanwhile needs no restart.
        self.read_only = read_only

    def routes(self, app: web.Application) -> None:
        add = app.router
        add.add_get("/", self.overview)
        add.add_get("/sessions", self.sessions)
        add.add_get("/sessions/{key}", self.session)
        add.add_get("/runs", self.runs)
        add.add_get("/runs/{run_id}", self.run)
        add.add_get("/outbox", self.outbox)
        add.add_get("/policy", self.policy)
        add.add_get("/pairing", self.pairing)
        add.add_static("/static/", STATIC, append_version=False)

    def render(self, template: str, page: str, *, status: int = 200, **context: Any) -> web.Response:
        return self.pages.render(template, status=status, page=page, csrf=self.csrf, **context)

    async def overview(self, request: web.Request) -> web.Response:
        bridge, now = self.bridge, time.time()
        runs = await bridge.store.list_runs(session_key=None, limit=OVERVIEW_RUNS)
        finished = [
            r for r, _ in runs if r.kind == "turn" and r.ended_at and r.ended_at >= now - TURNS_WINDOW_S
        ]
        errors = [
            (r, key) for r, key in runs if r.status == "error" and r.started_at >= now - ERRORS_WINDOW_S
        ]
        return self.render(
            "overview.html",
            "overview",
            running=bridge.lanes.running(),
            waiting=bridge.lanes.depth(),
            lanes=queues_json(bridge, now),
            turns_per_minute=len(finished) / (TURNS_WINDOW_S / 60),
            errors=errors,
            outbox=await bridge.store.outbox_counts(),
            platforms=self.platforms(),
            recent=runs[:10],
        )

    async def sessions(self, request: web.Request) -> web.Response:
        query = request.query
        try:
            minutes = max(0.0, float(query.get("active_minutes") or 0))
        except ValueError:
            minutes = 0.0
        wanted = SessionFilter(
            query.get("surface") or None, query.get("kind") or None, query.get("q") or None, minutes
        )
        return self.render(
            "sessions.html",
            "sessions",
            sessions=await find_sessions(self.bridge, wanted),
            wanted=wanted,
            surfaces=known_surfaces(),
            kinds=list(get_args(Kind)),
        )

    async def session(self, request: web.Request) -> web.Response:
        key = request.match_info["key"]
        row = await self.bridge.store.active_session(key)
        if row is None:
            return self.render("missing.html", "sessions", status=404, what=f"No session {key}.")
        detail = await session_detail(self.bridge, row, CHAT_MESSAGES)
        chat = chat_of(detail["history"], detail["delivery"])
        return self.render("session.html", "sessions", key=key, chat=chat, **detail)

    async def runs(self, request: web.Request) -> web.Response:
        key = request.query.get("session") or None
        listed = await self.bridge.store.list_runs(session_key=key, limit=100)
        return self.render("runs.html", "runs", runs=listed, session_key=key)

    async def run(self, request: web.Request) -> web.Response:
        run_id = request.match_info["run_id"]
        detail = await run_detail(self.bridge, run_id)
        if detail is None:
            return self.render("missing.html", "runs", status=404, what=f"No run {run_id}.")
        trace = detail["trace"]
        bars = timeline(trace) if trace else []
        return self.render(
            "run.html", "runs", run=detail["run"], trace=trace, bars=bars, children=detail["children"]
        )

    async def outbox(self, request: web.Request) -> web.Response:
        state = outbox_state(request.query.get("state"))
        rows = await self.bridge.store.outbox(state=state, newest=100)
        return self.render(
            "outbox.html",
            "outbox",
            rows=[outbox_json(row) for row in reversed(rows)],
            state=state,
            tabs=OUTBOX_TABS,
            counts=await self.bridge.store.outbox_counts(),
        )

    async def policy(self, request: web.Request) -> web.Response:
        settings = self.bridge.policy.settings
        return self.render(
            "policy.html",
            "policy",
            policy=settings.model_dump(mode="json"),
            surfaces=known_surfaces(),
            read_only=self.read_only(),
        )

    async def pairing(self, request: web.Request) -> web.Response:
        settings, surfaces = self.bridge.settings, self.bridge.access.surfaces
        # dm_policy as the access check has it now (a reload changes it live); enabled as started.
        enabled = {
            "telegram": settings.telegram.enabled,
            "discord": settings.discord.enabled,
            "slack": settings.slack.enabled,
            "matrix": settings.matrix.enabled,
        }
        return self.render(
            "pairing.html",
            "pairing",
            pending=await self.bridge.pairing.pending(),
            approved=await self.bridge.pairing.approved(),
            pairing_on=[
                name.capitalize()
                for name, rules in surfaces.items()
                if enabled.get(name) and rules.dm_policy == "pairing"
            ],
        )


def chat_of(history: list[dict[str, Any]], delivery: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """History rows as chat entries: user and assistant bubbles, and each tool call joined with its
    result into one foldable entry (results are found by call id; a call with none is still shown).

    With `delivery` (views.delivery_of), each run's answer carries how its sending went, and what
    the bot said outside the history (notices: command answers, failures) is placed by its time,
    so the conversation shows what the chat was sent, and what it was not."""
    entries: list[dict[str, Any]] = []
    calls: dict[str, dict[str, Any]] = {}
    replies = (delivery or {}).get("replies", {})
    notices = sorted(
        [*(delivery or {}).get("notices", []), *_unanswered(history, replies)],
        key=lambda notice: notice["created_at"],
    )
    answers: dict[str, dict[str, Any]] = {}
    for row in history:
        while notices and notices[0]["created_at"] < row.get("created_at", 0.0):
            entries.append(_notice_entry(notices.pop(0)))
        kind = row["kind"]
        if kind == "tool_call":
            entry = {"kind": "tool", "row": row, "result": None}
            calls[row.get("tool_call_id") or f"row-{row['id']}"] = entry
            entries.append(entry)
        elif kind == "tool_result":
            call = calls.get(row.get("tool_call_id") or "")
            if call is not None and call["result"] is None:
                call["result"] = row
            else:
                entries.append({"kind": "tool", "row": row, "result": row})
        else:
            entry = {"kind": kind, "row": row}
            if kind == "assistant" and row.get("run_id") in replies:
                # A run's answer is its last assistant row; text before its tool calls is not sent.
                answers[row["run_id"]] = entry
            entries.append(entry)
    for run_id, entry in answers.items():
        entry["delivery"] = replies[run_id]
    entries.extend(_notice_entry(notice) for notice in notices)
    return entries


def _unanswered(history: list[dict[str, Any]], replies: dict[str, Any]) -> list[dict[str, Any]]:
    """Replies of runs that left no answer in the history (a failed run's notice), as notices, from
    the time the history shown begins."""
    answered = {row.get("run_id") for row in history if row["kind"] == "assistant"}
    since = history[0].get("created_at", 0.0) if history else 0.0
    return [reply for run, reply in replies.items() if run not in answered and reply["created_at"] >= since]


def _notice_entry(notice: dict[str, Any]) -> dict[str, Any]:
    row = {"content": notice["text"], "created_at": notice["created_at"]}
    return {"kind": "notice", "row": row, "delivery": notice}


def timeline(trace: dict[str, Any]) -> list[Bar]:
    """Each step placed after the one before it (a run's steps happen one at a time), scaled to the
    run's length, or to the steps' sum where that is longer."""
    steps = trace.get("steps") or []
    total = max(float(trace.get("duration_ms") or 0), sum(float(s.get("ms") or 0) for s in steps), 1.0)
    bars, at = [], 0.0
    for step in steps:
        ms = float(step.get("ms") or 0)
        start = round(at / total * 1000)
        bars.append(Bar(step, start, max(2, round(ms / total * 1000))))
        at += ms
    return bars
