"""What the soak asserts at the end, from the database and from what the fake Bot API received."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.invariants import rows
from tests.soak.harness import Soak
from tests.soak.model import ANSWER_PREFIX

SHUTDOWN_NOTICE = "⚠️ Bridge is shutting down and had to stop this answer"
ACTIVITY_MARK = "⚙"
ANSWERED = ("ok", "error", "timeout", "stopped")


@dataclass(slots=True)
class Run:
    id: str
    session_id: str
    status: str
    input_upto: int | None
    started_at: float


@dataclass(slots=True)
class Row:
    id: int
    kind: str
    state: str
    run_id: str | None
    dedupe_key: str | None
    chat_id: str
    text: str
    session_id: str | None
    created_at: float
    reason: str | None


@dataclass
class Findings:
    lost: int = 0
    doubled: int = 0
    unannounced: int = 0
    answered: int = 0
    interrupted: int = 0
    shut_down: int = 0
    # Answers a kill cut off while they streamed into their message (the chat was told).
    cut_drafts: int = 0
    # Voice notes kept but never read: their run was cut short and the chat told, and no later run
    # came (a /retry would read them). Their text is empty until then.
    unread_voice: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        self.problems.append(text)


def visible(text: str) -> str:
    """Text as compared between an outbox row and what Telegram shows: Markdown's line breaks differ."""
    return " ".join(text.split())


def check(soak: Soak) -> Findings:
    found = Findings(problems=list(soak.problems))
    db = soak.db
    check_intake(soak, db, found)
    outbox = [
        Row(*row)
        for row in rows(
            db,
            "SELECT id, kind, state, run_id, dedupe_key, CAST(chat_id AS TEXT), text, session_id, "
            "created_at, reason FROM outbox ORDER BY id",
        )
    ]
    check_answers(db, outbox, found)
    check_deliveries(soak, outbox, found)
    check_left_over(db, outbox, found)
    for last in soak.model.answered_last:
        found.problem(f"a model request ended with the bot's own answer: {last!r}")
    return found


def check_intake(soak: Soak, db: Path, found: Findings) -> None:
    """Every message the fake handed to the bot is stored exactly once, in order, with its platform id."""
    side = soak.side
    if side.unconfirmed():
        found.problem(f"messages never confirmed: {side.unconfirmed()}")
    known: set[str] = set()
    for chat_id, handed in soak.handed.items():
        chat = f"{side.surface}:{side.chat_key(chat_id)}"
        expected = [(text, f"{chat}:{message_id}") for message_id, text in handed]
        known.update(platform_id for _, platform_id in expected)
        words = dict((f"{chat}:{message_id}", text) for message_id, text in handed)
        stored = []
        for content, platform_id, media in rows(
            db,
            "SELECT content, platform_msg_id, media FROM messages WHERE kind = 'user' "
            "AND platform_msg_id LIKE ? ORDER BY id",
            f"{chat}:%",
        ):
            said = words.get(platform_id, "")
            if content == "" and said in soak.voiced and media and '"kind": "audio"' in media:
                # Kept, not yet transcribed: the message is there, its words come when it is read.
                found.unread_voice.add(said)
                content = said
            stored.append((content, platform_id))
        times = Counter(stored)
        for item in expected:
            if times[item] == 0:
                found.lost += 1
                found.problem(f"lost: {item[0]!r} ({item[1]}) was handed to the bot and never stored")
            elif times[item] > 1:
                found.problem(f"stored {times[item]} times: {item[0]!r} ({item[1]})")
        if sorted(stored) == sorted(expected) and stored != expected:
            found.problem(f"chat {chat_id}: messages stored out of order: {[s[0] for s in stored]}")
    for content, platform_id in rows(db, "SELECT content, platform_msg_id FROM messages WHERE kind = 'user'"):
        if platform_id not in known:
            found.problem(f"a user message nobody sent was stored: {content!r} ({platform_id})")


def check_answers(db: Path, outbox: list[Row], found: Findings) -> None:
    """Each message's run (the first with input_upto >= its id) had its reply delivered, or its chat was
    told it was interrupted; and no run took up again what an earlier run had taken up."""
    runs: defaultdict[str, list[Run]] = defaultdict(list)
    for values in rows(
        # Compactions answer nothing (they summarise old turns): only turns take messages up.
        db,
        "SELECT id, session_id, status, input_upto, started_at FROM runs WHERE kind = 'turn' "
        "ORDER BY started_at, rowid",
    ):
        runs[values[1]].append(Run(*values))
    for session, session_runs in runs.items():
        highest = 0
        for taken in session_runs:
            if taken.input_upto is None or taken.input_upto <= highest:
                found.problem(
                    f"run {taken.id} ({taken.status}) in session {session} took up messages up to "
                    f"{taken.input_upto}, which an earlier run had taken up (up to {highest})"
                )
            highest = max(highest, taken.input_upto or 0)
    for summary, session, upto in rows(db, "SELECT id, session_id, upto FROM summaries"):
        # A summary may only cover turns a finished run answered: never one still being answered.
        answered = max((r.input_upto or 0 for r in runs[session] if r.status != "running"), default=0)
        if upto > answered:
            found.problem(f"summary {summary} in session {session} covers message {upto}, never answered")
    answers = dict(rows(db, "SELECT run_id, content FROM messages WHERE kind = 'assistant'"))
    by_key: defaultdict[str, list[Row]] = defaultdict(list)
    for row in outbox:
        if row.dedupe_key:
            by_key[row.dedupe_key].append(row)
    shutdown_notices = [r for r in outbox if r.kind == "notice" and r.text.startswith(SHUTDOWN_NOTICE)]

    for message_id, session, text in rows(
        db, "SELECT id, session_id, content FROM messages WHERE kind = 'user' ORDER BY id"
    ):
        run = next((r for r in runs[session] if (r.input_upto or 0) >= message_id), None)
        outcome = _outcome(run, by_key, shutdown_notices)
        if outcome == "answered":
            assert run is not None
            found.answered += 1
            if run.status != "ok":
                found.problem(f"{text!r}: its run {run.id} ended {run.status!r}; the fake model never fails")
            elif text not in answers.get(run.id, ""):
                found.problem(f"{text!r}: the answer of its run {run.id} does not name it")
        elif outcome == "interrupted":
            found.interrupted += 1
        elif outcome == "shut down":
            found.shut_down += 1
        else:
            found.unannounced += 1
            found.problem(f"unannounced: {text!r} (message {message_id}): {outcome}")


def _outcome(run: Run | None, by_key: dict[str, list[Row]], shutdown_notices: list[Row]) -> str:
    if run is None:
        return "no run ever took it up"
    if run.status in ANSWERED:
        replies = by_key.get(f"reply:{run.id}", [])
        if replies and all(r.state == "sent" for r in replies):
            return "answered"
        return f"run {run.id} ended {run.status!r}; its reply rows: {[(r.id, r.state) for r in replies]}"
    if run.status == "aborted":
        notices = by_key.get(f"interrupted:{run.id}", [])
        if notices and all(r.state == "sent" for r in notices):
            return "interrupted"
        return f"run {run.id} was aborted; its notice rows: {[(r.id, r.state) for r in notices]}"
    if run.status == "cancelled":
        told = [
            r
            for r in shutdown_notices
            if r.session_id == run.session_id and r.created_at >= run.started_at and r.state == "sent"
        ]
        return "shut down" if told else f"run {run.id} was cancelled and no shutdown notice was sent"
    return f"run {run.id} is still {run.status!r}"


def check_deliveries(soak: Soak, outbox: list[Row], found: Findings) -> None:
    """Each reply or notice chunk arrived once; more only for a row a kill caught `sending`, and only
    where the platform has no idempotent send."""
    # Each message as it reads now: an answer streams into its message, which the reply then edits.
    received = Counter((chat, visible(text)) for chat, text in soak.side.received())
    grouped: defaultdict[tuple[str, str], list[Row]] = defaultdict(list)
    for row in outbox:
        if row.kind in ("reply", "notice"):
            grouped[(row.chat_id, visible(row.text))].append(row)
    for key, group in grouped.items():
        got = received.pop(key, 0)
        sent = [r for r in group if r.state == "sent"]
        if got < len(sent):
            found.problem(f"marked sent but never received in chat {key[0]}: {key[1][:100]!r}")
        extra = got - len(sent)
        if extra > 0:
            found.doubled += extra
            allowed = sum(soak.caught[r.id] for r in group) if soak.side.doubles_allowed else 0
            if extra > allowed:
                found.problem(
                    f"chat {key[0]} received {got} times {key[1][:100]!r} (rows "
                    f"{[(r.id, r.kind, r.state) for r in group]}), but kills caught those rows `sending` "
                    f"only {allowed} time(s)"
                )
    # Tool activity: what arrived is explained by activity rows sent, or caught in flight by a kill.
    activity: defaultdict[str, int] = defaultdict(int)
    for row in outbox:
        if row.kind == "activity":
            if soak.side.doubles_allowed:
                activity[row.chat_id] += (row.state == "sent") + soak.caught[row.id]
            else:
                # Idempotent sends: a row arrives at most once, whether marked sent or caught on its
                # way by a kill and then given up (activity is not resent after a restart).
                activity[row.chat_id] += row.state == "sent" or soak.caught[row.id] > 0
    for (chat_id, text), got in received.items():
        if text.startswith(ACTIVITY_MARK):
            activity[chat_id] -= got
        elif ANSWER_PREFIX.startswith(text) or text.startswith(ANSWER_PREFIX.strip()):
            # A draft no reply replaced: the kill came while the answer streamed into it. Its run was
            # then interrupted (and the chat told) or answered anew in a message of its own.
            found.cut_drafts += got
        else:
            found.problem(f"chat {chat_id} received {got} message(s) no outbox row explains: {text[:100]!r}")
    for chat_id, left in activity.items():
        if left < 0:
            found.problem(f"chat {chat_id} received {-left} more tool activity message(s) than were sent")


def check_left_over(db: Path, outbox: list[Row], found: Findings) -> None:
    running = rows(db, "SELECT id, session_id FROM runs WHERE status = 'running'")
    if running:
        found.problem(f"runs left running: {running}")
    for row in outbox:
        if row.state in ("pending", "sending"):
            found.problem(f"outbox row left {row.state}: {_describe(row)}")
        elif row.state in ("uncertain", "suppressed") or (row.state == "failed" and row.kind != "activity"):
            found.problem(f"outbox row {row.state} ({row.reason}): {_describe(row)}")


def _describe(row: Row) -> str:
    fields: dict[str, Any] = {"id": row.id, "kind": row.kind, "run": row.run_id, "chat": row.chat_id}
    return f"{fields} {row.text[:80]!r}"
