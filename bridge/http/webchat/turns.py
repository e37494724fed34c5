"""A web chat's turn: the message handed to the dispatcher like any surface's, and its answer found.

The dispatcher stores the message and schedules its run (or answers its command) as for Telegram or
the terminal; nothing here decides what a message may do. What this adds is the caller's side of a
turn-by-turn surface: which session the message went to, and, for a caller that waits (the chat
completions endpoint), the answer. That is the assistant's message the store holds after the caller's
message, never text picked up on the way, so it is the same whichever worker ran the turn: where
workers share a database (`bridge.shared`) the run may happen in another process, and the store is
polled for it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bridge.config.llm import DEFAULT_PROFILE
from bridge.http.webchat.names import OPERATOR_ID, SURFACE, WebTalker
from bridge.store.base import MessageRow, SessionRow

if TYPE_CHECKING:
    from bridge.app import Bridge
    from bridge.gateway.dispatcher import Done

log = logging.getLogger(__name__)

# How often the store is asked for an answer a run in another worker writes (bridge.shared).
POLL_S = 0.5
# The newest rows read to find a message and its answer: a turn's tool calls and results, and what
# else the session got meanwhile, fit many times over.
ANSWER_ROWS = 300


class NotOwner(Exception):
    """The operator cannot talk in `main` here: the web surface's operator is not an owner."""


@dataclass(frozen=True, slots=True)
class Sent:
    """A message handed to the dispatcher: where it went, and how to find what came after it."""

    talker: WebTalker
    # Who wrote it, as the store records it (surface:user_id).
    sender: str
    # The session it went to, and that session's newest message before it (0: none).
    session: SessionRow
    before: int
    # Resolves when the work it started is done, in this process (None: nothing runs here for it now:
    # ignored, stored while shutting down, or queued for whichever worker claims it).
    done: Done | None


@dataclass(frozen=True, slots=True)
class Answer:
    """The run's answer to a message, as stored."""

    text: str
    run_id: str | None
    prompt_tokens: int
    completion_tokens: int


class WebTurns:
    """Hands web chat messages to the dispatcher and finds their answers in the store."""

    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge

    def check(self, talker: WebTalker) -> None:
        """NotOwner when this talker's messages would not land where its name says: `main` needs the
        web operator to be an owner, which bridge run makes it where the admin server runs."""
        probe = talker.inbound("?")
        if self.bridge.sessions.key_for(probe) != talker.key:
            raise NotOwner(
                f"the dashboard talks in main as {SURFACE}:{OPERATOR_ID}, which is not an owner of this "
                "bot here (bridge run adds it when [admin] is enabled)"
            )

    async def send(
        self, talker: WebTalker, text: str, *, message_id: str | None = None, profile: str | None = None
    ) -> Sent:
        """Hand one message to the dispatcher; IntakeUnavailable when it could not be stored.

        `profile`: switch the session to that model profile first, as /model NAME does (it stays).
        """
        self.check(talker)
        inbound = talker.inbound(text, message_id)
        bridge = self.bridge
        # Read, not written to: the chat's address (where tasks for main are delivered) is the
        # dispatcher's to move, for a message, and not for a command.
        session = await bridge.sessions.active_for_key(talker.key)
        newest = await bridge.store.history(session.id, 1)
        if profile is not None:
            # "default" is stored as no choice, as /model stores it: the chat follows [llm].
            await bridge.store.set_model_profile(session.id, None if profile == DEFAULT_PROFILE else profile)
        done = await bridge.handle(inbound)
        return Sent(talker, inbound.sender, session, newest[-1].id if newest else 0, done)

    async def answer(self, sent: Sent, timeout_s: float) -> Answer | None:
        """The stored answer to `sent`, once its run has written it; None when no run answers it (a
        command, a message the policy ignores; a failed run's notice is the chat's). TimeoutError
        after `timeout_s`: the message stays stored and its run goes on."""
        async with asyncio.timeout(timeout_s):
            if sent.done is not None:
                # Shielded: a caller that gives up must not cancel the chat's run with it.
                await asyncio.shield(sent.done)
                return await self.stored_answer(sent)
            while self.bridge.shared:
                found = await self._lookup(sent)
                if found is None or found[1] is not None:
                    return await self._answer_of(found[1]) if found else None
                await asyncio.sleep(POLL_S)
            return await self.stored_answer(sent)

    async def stored(self, sent: Sent) -> bool:
        """Whether the message was stored (it is not when it was a command, or ignored)."""
        return await self._lookup(sent) is not None

    async def stored_answer(self, sent: Sent) -> Answer | None:
        found = await self._lookup(sent)
        return await self._answer_of(found[1]) if found is not None else None

    async def _lookup(self, sent: Sent) -> tuple[MessageRow, MessageRow | None] | None:
        """The stored message and its answer (None until written); None when it was not stored."""
        rows = await self.bridge.store.history(sent.session.id, ANSWER_ROWS)
        later = [row for row in rows if row.id > sent.before]
        mine = next(
            (
                row
                for row in later
                if row.kind == "user" and row.sender == sent.sender and not row.via_session
            ),
            None,
        )
        if mine is None:
            return None
        # The answer of the run that took this message up: in followup mode an earlier message's run may
        # write its answer after this message came in, and its input stops before it (the anchor).
        answer = next(
            (
                row
                for row in later
                if row.kind == "assistant"
                and row.id > mine.id
                and (row.anchor is None or row.anchor >= mine.id)
            ),
            None,
        )
        return mine, answer

    async def _answer_of(self, row: MessageRow | None) -> Answer | None:
        if row is None:
            return None
        run = await self.bridge.store.get_run(row.run_id) if row.run_id else None
        return Answer(
            row.content,
            row.run_id,
            run.prompt_tokens if run is not None else 0,
            run.completion_tokens if run is not None else 0,
        )
