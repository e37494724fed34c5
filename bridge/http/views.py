"""What the admin API and the dashboard show, read once: sessions, one session in full, runs, outbox."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, get_args

from bridge.agent.trace import expand_trace
from bridge.errors import SessionKeyError
from bridge.gateway.policy import Place
from bridge.sessions.keys import kind as key_kind
from bridge.store.base import OutboxRow, OutboxState, SessionRow

if TYPE_CHECKING:
    from bridge.app import Bridge

MAX_LIMIT = 500
OUTBOX_STATES: frozenset[OutboxState] = frozenset(get_args(OutboxState))
# How a message's chunks sum up: the worst state of any of them, worst first.
_WORST_FIRST: tuple[OutboxState, ...] = ("failed", "uncertain", "suppressed", "sending", "pending", "sent")
# Outbox rows a session page reads to show how its messages went: a page of history's worth.
SESSION_OUTBOX_ROWS = 600


@dataclass(frozen=True, slots=True)
class SessionFilter:
    """A listing's filters; each left empty matches every session."""

    surface: str | None = None
    kind: str | None = None
    query: str | None = None
    active_minutes: float = 0.0
    limit: int = 100

    @property
    def narrowed(self) -> bool:
        return bool(self.surface or self.kind or self.query)


async def find_sessions(bridge: Bridge, wanted: SessionFilter) -> list[dict[str, Any]]:
    """Active sessions, newest activity first, that pass the filter."""
    since = time.time() - wanted.active_minutes * 60 if wanted.active_minutes else None
    # Filtered here, from a generous page of the newest (the store lists by activity only); each
    # session listed costs a count of its messages, so without filters only `limit` are read.
    page = MAX_LIMIT * 4 if wanted.narrowed else wanted.limit
    query = (wanted.query or "").lower()
    found = []
    for summary in await bridge.store.list_sessions(limit=page, active_since=since):
        row = summary.session
        if wanted.surface and row.surface != wanted.surface:
            continue
        if wanted.kind and session_kind(row.key) != wanted.kind:
            continue
        if query and query not in f"{row.key} {row.display_name or ''}".lower():
            continue
        found.append({**session_json(row), "messages": summary.message_count})
        if len(found) >= wanted.limit:
            break
    return found


async def session_detail(bridge: Bridge, row: SessionRow, limit: int) -> dict[str, Any]:
    """One session: its history with tool calls and results, loaded groups and skills, memories,
    policy with its explanation, agent, model profile, queue depth and runs."""
    store = bridge.store
    # The groups and skills its next run restores: those its agent may use.
    agent = bridge.runner.agents.for_run(row)
    loaded = await store.loaded(row.id)
    history = await store.history(row.id, limit)
    place = Place.of(row.key, row.surface)
    decision = bridge.gate.decide_for(row.key, row.surface, row)
    runs = await store.list_runs(session_key=row.key, limit=20)
    sent = await store.outbox(session_id=row.id, newest=SESSION_OUTBOX_ROWS)
    return {
        "session": session_json(row),
        "history": [dataclasses.asdict(message) for message in history],
        "delivery": delivery_of(sent),
        "loaded_groups": sorted(agent.registry.known_groups(loaded.groups)),
        "loaded_skills": sorted(agent.skills.known(loaded.skills)),
        "memories": await store.memories(row.key, bridge.settings.agent.memory_limit),
        "policy": {
            "action": decision.action,
            "reason": decision.reason,
            "override": row.send_policy,
            "explain": bridge.policy.explain(place, row.send_policy),
        },
        # The chat's agent and why it has it (bridge.config.agents.AgentsSettings.resolve).
        "agent": {"name": agent.name, "reason": agent.choice.reason, "source": agent.choice.source},
        # The profile its runs use: its /model choice, else its agent's, else "default".
        "model_profile": bridge.runner.agents.profile_of(row),
        "queue_depth": bridge.lanes.queued(row.key),
        "running": bridge.lanes.busy(row.key),
        "runs": [dataclasses.asdict(run) for run, _ in runs],
    }


async def run_detail(bridge: Bridge, run_id: str) -> dict[str, Any] | None:
    """A run's row, its whole trace (None when the trace was pruned) and the runs of the sub-agents it
    started, or None for no such run."""
    row = await bridge.store.get_run(run_id)
    if row is None:
        return None
    trace = await bridge.store.get_trace(run_id)
    children = [dataclasses.asdict(child) for child in await bridge.store.child_runs(run_id)]
    return {
        "run": dataclasses.asdict(row),
        "trace": expand_trace(json.loads(trace)) if trace else None,
        "children": children,
    }


def outbox_state(value: str | None) -> OutboxState | None:
    """A state named in a request, typed; None for none or a name that is not a state."""
    for state in OUTBOX_STATES:
        if state == value:
            return state
    return None


def session_json(row: SessionRow) -> dict[str, Any]:
    return {**dataclasses.asdict(row), "kind": session_kind(row.key)}


def outbox_json(row: OutboxRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "platform_msg_id": row.platform_msg_id,
        "created_at": row.created_at,
        **dataclasses.asdict(row.item),
    }


def session_kind(key: str) -> str:
    try:
        return str(key_kind(key))
    except SessionKeyError:
        return "unknown"


def delivery_of(rows: list[OutboxRow]) -> dict[str, Any]:
    """How a session's messages went, from its outbox rows: `replies` by run id (a reply's chunks
    summed up: its worst state, the reason, the rows that may be sent again) and `notices` (what the
    bot said outside its history: command answers, failures, refusals), each with its state."""
    by_run: dict[str, list[OutboxRow]] = {}
    notices = []
    for row in rows:
        item = row.item
        if item.kind == "reply" and item.run_id:
            by_run.setdefault(item.run_id, []).append(row)
        elif item.kind == "notice":
            notices.append(summed([row]))
    return {"replies": {run: summed(chunks) for run, chunks in by_run.items()}, "notices": notices}


def summed(rows: list[OutboxRow]) -> dict[str, Any]:
    """One message's delivery from its chunks: the worst state, its reason, and the rows to retry."""
    states = {row.item.state for row in rows}
    state = next((s for s in _WORST_FIRST if s in states), "sent")
    reason = next((row.item.reason for row in rows if row.item.state == state and row.item.reason), None)
    retry = [
        {"id": row.id, "part": row.item.part, "parts": row.item.parts, "state": row.item.state}
        for row in rows
        if row.item.state in ("failed", "uncertain")
    ]
    # The text as sent (a failed run's answer is its failure notice, which is in no history row).
    text = "".join(row.item.text for row in rows)
    return {"state": state, "reason": reason, "retry": retry, "text": text, "created_at": rows[0].created_at}


def queues_json(bridge: Bridge, now: float) -> list[dict[str, Any]]:
    """Chats with a run in progress or messages waiting in this process, with how long each has run
    and waited (seconds), longest first."""
    return [
        {
            "session_key": lane.key,
            "running": lane.running_since is not None,
            "running_since": lane.running_since,
            "waiting_since": lane.waiting_since,
            "running_s": now - lane.running_since if lane.running_since is not None else None,
            "waiting": lane.waiting,
            "waiting_s": now - lane.waiting_since if lane.waiting_since is not None else None,
        }
        for lane in bridge.lanes.active()
    ]
