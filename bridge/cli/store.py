"""The `bridge` commands that read or move the bot's database: runs, trace, status, backup, migrate."""

from __future__ import annotations

import json
import socket
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from bridge.cli.exits import EXIT_RUNTIME, fail
from bridge.config import Settings
from bridge.config.base import mask_url
from bridge.errors import StoreError


async def show_trace(settings: Settings, run_id: str, *, as_json: bool) -> int:
    """`bridge trace RUN_ID`: the run's stored trace, readable or as JSON."""
    from bridge.agent.trace import expand_trace, format_trace
    from bridge.store.backends import existing_store

    try:
        async with existing_store(settings.storage) as store:
            run = await store.get_run(run_id)
            text = await store.get_trace(run_id) if run else None
            children = await store.child_runs(run_id) if run else []
    except StoreError as exc:
        return fail(exc, settings)
    if run is None:
        print(f"bridge: no run with id {run_id!r}; `bridge runs` lists them", file=sys.stderr)
        return EXIT_RUNTIME
    if text is None:
        print(
            f"bridge: run {run_id} has no trace (pruned past [runs] keep_traces, or traces are off)",
            file=sys.stderr,
        )
        return EXIT_RUNTIME
    if as_json:
        print(json.dumps(expand_trace(json.loads(text)), ensure_ascii=False))
        return 0
    print(format_trace(text))
    # The run's place in a tree of sub-agents (spawn_agent): each of them has a trace of its own.
    if run.parent_run_id:
        print(f"started as a sub-agent by run {run.parent_run_id} (bridge trace {run.parent_run_id})")
    for child in children:
        print(f"sub-agent run {child.id}: {child.status} (bridge trace {child.id})")
    return 0


async def list_runs(settings: Settings, session_key: str | None, limit: int) -> int:
    """`bridge runs`: newest first, one line each."""
    from bridge.store.backends import existing_store

    try:
        async with existing_store(settings.storage) as store:
            runs = await store.list_runs(session_key=session_key, limit=limit)
    except StoreError as exc:
        return fail(exc, settings)
    row = "{:<16}  {:<19}  {:<9}  {:>5}  {:>7}  {:>6}  {}"
    print(row.format("run id", "started (UTC)", "status", "steps", "tokens", "secs", "session"))
    for run, key in runs:
        started = datetime.fromtimestamp(run.started_at, UTC).strftime("%Y-%m-%d %H:%M:%S")
        seconds = f"{run.ended_at - run.started_at:.1f}" if run.ended_at else "-"
        tokens = run.prompt_tokens + run.completion_tokens
        # A compaction is not an answer: marked, so `bridge trace` is the place to read its summary.
        what = f"{key} (compaction)" if run.kind == "compaction" else key
        if run.parent_run_id:
            what += f" (sub-agent of {run.parent_run_id})"
        print(row.format(run.id, started, run.status, run.iterations, tokens, seconds, what))
    if not runs:
        print("(no runs)")
    return 0


async def show_status(settings: Settings) -> int:
    """`bridge status`: the workers on the database, the active one first, and what each holds."""
    from bridge.store.backends import existing_store

    try:
        async with existing_store(settings.storage) as store:
            workers = await store.workers()
    except StoreError as exc:
        return fail(exc, settings)
    now = time.time()
    print(f"database: {settings.storage.describe()}")
    row = "{:<16}  {:<8}  {:<24}  {:<19}  {:<16}  {}"
    print(row.format("worker", "role", "host:pid", "started (UTC)", "last seen", "holds"))
    for worker in workers:
        started = datetime.fromtimestamp(worker.started_at, UTC).strftime("%Y-%m-%d %H:%M:%S")
        ago = f"{now - worker.seen_at:.0f} s ago"
        seen = ago if worker.alive(now) else f"gone ({ago})"
        role = worker.role if worker.alive(now) else "-"
        place = f"{worker.host}:{worker.pid}"
        if worker.host == socket.gethostname():
            place += " (here)"
        print(row.format(worker.id, role, place, started, seen, worker.holds or "-"))
    if not workers:
        print("(no Bridge process is running on this database)")
    return 0


async def backup_database(settings: Settings, target: Path) -> int:
    """`bridge backup PATH`: an online, consistent copy, safe while `bridge run` is writing."""
    from bridge.store.backends import existing_store

    try:
        async with existing_store(settings.storage) as store:
            await store.backup(target)
    except StoreError as exc:
        return fail(exc, settings, doing="backup failed")
    print(f"backed up {settings.storage.describe()} to {target}")
    return 0


async def migrate_database(source: Path, url: str) -> int:
    """`bridge migrate --from sqlite:PATH --to postgresql://...`: copy, then compare counts per table."""
    from bridge.store.transfer import sqlite_to_postgres

    try:
        copied = await sqlite_to_postgres(source, url)
    except StoreError as exc:
        return fail(exc, doing="migrate failed")
    print(f"{'table':<10}  {'in SQLite':>10}  {'in PostgreSQL':>13}")
    for count in copied:
        print(f"{count.table:<10}  {count.source:>10}  {count.target:>13}{'' if count.ok else '  MISMATCH'}")
    if not all(count.ok for count in copied):
        print("bridge: migrate failed: the counts differ; nothing was committed", file=sys.stderr)
        return EXIT_RUNTIME
    print(f"copied {source} to {mask_url(url)}; set [storage] url to it and start the workers")
    return 0
