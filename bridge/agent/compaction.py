"""Context compaction: the oldest whole turns of a long session become one summary the model wrote."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from bridge.agent.history import Turn, split_turns, truncate
from bridge.agent.trace import Redact, RunTrace
from bridge.config import Settings
from bridge.config.agent import AgentSettings
from bridge.errors import ProviderError
from bridge.llm.base import ChatMessage, Provider
from bridge.store.base import CompactionInput, NewSummary, SessionRow, SummaryRow
from bridge.store.sessions import new_id
from bridge.store.tables import DatabaseStore

log = logging.getLogger(__name__)

# Rows read for one compaction; a session further behind is compacted again after its next turn.
MAX_ROWS = 2_000
# A tool result is cut to this many characters in the text the summary is written from.
RESULT_CHARS = 600
# After a failed compaction, later turns of that session do not try again for this long (/compact
# still does): a model whose context cannot take the request would fail on every turn.
RETRY_AFTER_S = 600.0
SUMMARY_SYSTEM = (
    "You write the memory of a chat assistant. Summarise the conversation you are given so the "
    "assistant can carry on without it: keep every fact, name, number, date, file name, decision, "
    "preference and open request, and what tools were used for and what they found. Write plain "
    "text in the conversation's language, at most {limit} characters, with no preamble."
)

Status = Literal["compacted", "nothing", "failed", "busy"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one compaction did, worded for /compact."""

    status: Status
    summary: SummaryRow | None = None
    error: str = ""

    @property
    def text(self) -> str:
        if self.status == "compacted" and self.summary is not None:
            s = self.summary
            return (
                f"Compacted {s.turns} older turn{'s' if s.turns != 1 else ''} ({s.replaced_chars:,} "
                f"characters) into a summary of {len(s.content):,} characters. Loaded tool groups stay "
                "loaded."
            )
        if self.status == "busy":
            return "This session is being compacted already."
        if self.status == "failed":
            return (
                f"⚠️ Compaction failed ({self.error}). Nothing is lost: when the history is too long, "
                "its oldest turns are left out of what the model sees, as before."
            )
        return "Nothing to compact yet: only the newest turn would be left to summarise."


def choose(
    turns: list[Turn], summary_chars: int, finished_upto: int, agent: AgentSettings, *, force: bool
) -> list[Turn]:
    """The oldest turns to summarise, or [] when the history fits its budget (or nothing can go).

    It compacts when the replay would pass `history_max_chars` or `history_limit` rows, down to half of
    each, so it does not run again on the very next turn. The newest turn is always kept, and only
    turns a finished run answered are eligible: a turn still being answered cannot be summarised.
    `force` (/compact) summarises every eligible turn but the newest.
    """
    if len(turns) < 2:
        return []
    total = summary_chars + sum(t.chars for t in turns)
    rows = sum(t.rows for t in turns)
    if not force and total <= agent.history_max_chars and rows <= agent.history_limit:
        return []
    keep = 1
    if not force:
        chars, count = turns[-1].chars, turns[-1].rows
        for turn in reversed(turns[:-1]):
            chars, count = chars + turn.chars, count + turn.rows
            if chars > agent.history_max_chars // 2 or count > agent.history_limit // 2:
                break
            keep += 1
    cover = turns[: len(turns) - keep]
    eligible = next((i for i, t in enumerate(cover) if t.upto > finished_upto), len(cover))
    cover = cover[:eligible]
    # The summary request itself must fit the model: a session far behind (compaction was off, or
    # failed for a while) is caught up one budget's worth at a time, oldest first.
    total, fits = 0, 0
    for turn in cover:
        total += turn.chars
        if fits and total > agent.history_max_chars:
            break
        fits += 1
    return cover[:fits]


def transcript(turns: list[Turn]) -> str:
    """The turns as plain text for the summary request; tool calls and results in short form."""
    lines: list[str] = []
    for turn in turns:
        for message in turn.messages:
            if message.role == "user":
                lines.append(f"User: {message.content}")
            elif message.role == "tool":
                lines.append(f"Result of {message.name}: {truncate(message.content, RESULT_CHARS)}")
            elif message.tool_calls:
                if message.content.strip():
                    lines.append(f"Assistant: {message.content}")
                lines += [f"Assistant called {c.name}({c.arguments})" for c in message.tool_calls]
            else:
                lines.append(f"Assistant: {message.content}")
    return "\n".join(lines)


def summary_limit(agent: AgentSettings) -> int:
    """How long a summary may be: a small part of the budget it saves."""
    return max(500, min(4_000, agent.history_max_chars // 6))


class Compactor:
    """Runs compactions in the background, at most one per session, never in a chat's lane.

    A compaction reads in one snapshot, asks the session's model for a summary with no tools, and
    writes the summary with its run row in one transaction. If the request fails, nothing is written
    but a failed run with its trace: the replay keeps leaving the oldest turns out, as before.
    """

    def __init__(
        self,
        settings: Settings,
        store: DatabaseStore,
        provider_for: Callable[[SessionRow], Provider],
        redact: Redact,
    ) -> None:
        self.agent = settings.agent
        self._keep_traces = settings.runs.keep_traces > 0
        self.store = store
        self.provider_for = provider_for
        self._redact = redact
        self._tasks: dict[str, asyncio.Task[Outcome]] = {}
        self._failed: dict[str, float] = {}  # session id -> when its last compaction failed

    def after_turn(self, session: SessionRow) -> None:
        """A turn found its history over budget: compact it soon, unless that is off, under way, or
        failed a short while ago."""
        failed = self._failed.get(session.id)
        if failed is not None and time.monotonic() - failed < RETRY_AFTER_S:
            return
        if self.agent.compaction and session.id not in self._tasks:
            self.start(session, force=False)

    def start(self, session: SessionRow, *, force: bool) -> asyncio.Task[Outcome]:
        """The session's compaction: the one under way, or a new one."""
        running = self._tasks.get(session.id)
        if running is not None:
            return running
        task = asyncio.get_running_loop().create_task(self.compact(session, force=force))
        self._tasks[session.id] = task
        task.add_done_callback(lambda done: self._done(session.id, done))
        return task

    def _done(self, session_id: str, task: asyncio.Task[Outcome]) -> None:
        self._tasks.pop(session_id, None)
        if task.cancelled():
            return
        if task.result().status == "failed":
            self._failed[session_id] = time.monotonic()
        else:
            self._failed.pop(session_id, None)

    async def compact(self, session: SessionRow, *, force: bool = False) -> Outcome:
        try:
            return await self._compact(session, force)
        except Exception as exc:  # a failed compaction costs nothing but itself
            log.exception("compacting %s failed", session.key)
            return Outcome("failed", error=type(exc).__name__)

    async def _compact(self, session: SessionRow, force: bool) -> Outcome:
        found = await self.store.compaction_input(session.id, MAX_ROWS)
        turns = split_turns(found.rows, self.agent.max_tool_result_chars)
        previous = found.summary.content if found.summary else ""
        cover = choose(turns, len(previous), found.finished_upto, self.agent, force=force)
        if not cover:
            return Outcome("nothing")
        return await self._summarise(session, found, cover)

    async def _summarise(self, session: SessionRow, found: CompactionInput, cover: list[Turn]) -> Outcome:
        run_id, started = new_id(), time.time()
        text = transcript(cover)
        trace = RunTrace(
            run_id, session.id, session.key, "compaction", hashlib.sha256(text.encode()).hexdigest()
        )
        limit = summary_limit(self.agent)
        earlier = (
            f"Summary of the conversation before this part:\n{found.summary.content}\n\n"
            if found.summary
            else ""
        )
        messages = [
            ChatMessage("system", SUMMARY_SYSTEM.format(limit=limit)),
            ChatMessage(
                "user",
                f"{earlier}Conversation to summarise:\n{text}\n\n"
                "Write the summary now" + (", covering both parts." if earlier else "."),
            ),
        ]
        clock = RunTrace.clock()
        replaced = sum(t.chars for t in cover)
        trace.header.update(kind="compaction", turns=len(cover), upto=cover[-1].upto, replaced_chars=replaced)
        usage = (0, 0)
        try:
            completion = await self.provider_for(session).complete(messages, [])
        except ProviderError as exc:
            trace.model_call(clock, messages, [], error=exc.message, error_detail=exc.detail)
            return await self._record(session, run_id, started, trace, usage=usage, error=exc.message)
        trace.model_call(clock, messages, [], completion)
        usage = (completion.usage.prompt_tokens, completion.usage.completion_tokens)
        content = completion.content.strip()
        if not content or completion.tool_calls:
            return await self._record(
                session, run_id, started, trace, usage=usage, error="the model wrote no summary"
            )
        # A model that ignores the limit still may not fill the budget it was meant to free.
        summary = NewSummary(cover[-1].upto, truncate(content, 2 * limit), len(cover), replaced)
        return await self._record(session, run_id, started, trace, usage=usage, summary=summary)

    async def _record(
        self,
        session: SessionRow,
        run_id: str,
        started: float,
        trace: RunTrace,
        *,
        usage: tuple[int, int],
        summary: NewSummary | None = None,
        error: str | None = None,
    ) -> Outcome:
        status = "ok" if error is None else "error"
        if error is not None:
            log.warning("compacting %s failed: %s", session.key, error)
        stored = await self.store.record_compaction(
            run_id,
            session.id,
            started_at=started,
            status=status,
            error=error,
            trace=trace.to_json(
                status, {"prompt_tokens": usage[0], "completion_tokens": usage[1]}, self._redact
            )
            if self._keep_traces
            else None,
            prompt_tokens=usage[0],
            completion_tokens=usage[1],
            summary=summary,
        )
        if error is not None:
            return Outcome("failed", error=error)
        if stored is None:
            return Outcome("nothing")
        log.info(
            "compacted %d turns of %s into a summary (%d characters)",
            stored.turns,
            session.key,
            len(stored.content),
        )
        return Outcome("compacted", stored)

    async def idle(self) -> None:
        """Wait for the compactions under way (tests, benchmarks)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)

    async def close(self) -> None:
        """Stop compactions under way; a cancelled one has written nothing."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
