"""The dispatcher: an Inbound becomes a command answer or a stored message and a run in its lane."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging

from bridge.agent.compaction import Compactor
from bridge.agent.runner import RETRY_HINT, AgentRunner
from bridge.agent.runstate import CUT_SHORT_ERROR, MediaReader, RunResult
from bridge.config.runs import RunsSettings
from bridge.errors import IntakeUnavailable, StoreError
from bridge.events import Attachment, Inbound, Outbound, Route, dumps
from bridge.gateway.access import Admission, Verdict
from bridge.gateway.commands import Commands, parse_command
from bridge.gateway.delivery import Delivery
from bridge.gateway.lanes import Lanes, SharedLanes
from bridge.gateway.policy import PolicyGate
from bridge.gateway.streaming import DraftReply, LiveReply
from bridge.gateway.voice_out import Heard, SpokenReplies
from bridge.live import LiveEvents
from bridge.media.intake import MediaIntake
from bridge.sessions.service import SessionService
from bridge.store.base import MessageRow, OutboxItem, QueueFull, RunRow, SessionRow
from bridge.text import scrub
from bridge.tools.base import AGENT_CHANNEL

log = logging.getLogger(__name__)

Done = asyncio.Future[None]
# How long a finished turn waits for its activity display's last edit (rate limits can delay it).
ACTIVITY_CLOSE_S = 10.0


def unsupported_text(kind: str, voice: bool) -> str:
    what = "text, photos and voice messages" if voice else "text and photos"
    return f"Sorry, I can't open {kind} messages. I read {what}."


def interrupted_text(asked: str | None) -> str:
    quoted = f" (“{asked[:80]}{'…' if len(asked) > 80 else ''}”)" if asked else ""
    return (
        f"⚠️ I was interrupted (Bridge restarted) while answering your message{quoted}. "
        "It is saved: send /retry and I will answer it, or just write again."
    )


@dataclasses.dataclass(frozen=True, slots=True)
class DispatchServices:
    """The services the dispatcher hands an Inbound's work to, built once by the composition root."""

    sessions: SessionService
    runner: AgentRunner
    delivery: Delivery
    lanes: Lanes
    commands: Commands
    # Who may talk: access lists, DM pairing and mention gating, one verdict.
    admission: Admission
    gate: PolicyGate
    compactor: Compactor
    # The admin server's stream of what happens (messages in; runs and sends publish their own).
    live: LiveEvents = dataclasses.field(default_factory=LiveEvents)
    # Attachments: screened at intake, read (fetched, transcribed) by the run that answers them; and
    # with [tts], answers spoken back (its speaker).
    media: MediaIntake | None = None


class Dispatcher:
    """Receives every Inbound from every adapter.

    `handle` is the intake: it returns once the message is stored (or its command has run and its
    answer is queued), without waiting for any platform, so an adapter can confirm it at once and a
    slow chat never holds up another. The returned future resolves when the work it started is done
    (a turn-by-turn surface such as the console waits on it; chat platforms do not).
    """

    def __init__(self, services: DispatchServices, runs: RunsSettings) -> None:
        self.runs = runs
        # Set at shutdown: answers in progress finish; new messages are stored for the next start.
        self.closing = False
        self.sessions = services.sessions
        self.runner = services.runner
        self.delivery = services.delivery
        self.lanes = services.lanes
        self.commands = services.commands
        self.admission = services.admission
        self.gate = services.gate
        self.compactor = services.compactor
        self.live = services.live
        self.media = media = services.media
        # [tts]: answers also spoken, where the chat's /voice (or a voice note) asks for it.
        self.voice = (
            SpokenReplies(media.settings.tts, self.delivery, media.speaker, media.blobs)
            if media is not None and media.speaker is not None
            else None
        )
        # Set where several workers share the database: stored messages are then claimed from the
        # shared intake queue by whichever worker has room, under the chat's lease.
        self.share: SharedLanes | None = None

    async def handle(self, inbound: Inbound) -> Done | None:
        """Take one message; IntakeUnavailable when it could not be stored (offer it again later)."""
        try:
            return await self._handle(dataclasses.replace(inbound, text=scrub(inbound.text)))
        except StoreError as exc:
            raise IntakeUnavailable(str(exc)) from exc

    async def _handle(self, inbound: Inbound) -> Done | None:
        verdict = await self.admission.decide(inbound)
        if verdict is Verdict.IGNORE:
            return None
        key = self.sessions.key_for(inbound)
        owner = self.sessions.is_owner(inbound)
        command = parse_command(inbound.text)
        if command is not None and command.name == "retry" and verdict is Verdict.ALLOW:
            return await self._retry(inbound, key, owner)
        if command is not None and command.name == "compact" and verdict is Verdict.ALLOW:
            return await self._compact(inbound, key, owner)
        if command is not None and owner:
            # An owner's command is answered whatever the send policy says: it is how they change it.
            answer = await self.commands.handle(
                command, key, surface=inbound.surface, is_owner=True, sender=inbound.sender
            )
            return await self._answer(
                Outbound(inbound.route, "notice", answer, session_key=key, policy_exempt=True)
            )
        decision = await self.gate.decide(key, inbound.surface)
        if not decision.processes:
            log.debug("ignoring a message in %s: %s", key, decision.reason)
            return None
        if verdict in (Verdict.REFUSE, Verdict.PAIR):
            # A refusal, or a stranger's code (or silence): the message is neither stored nor shown
            # to the model.
            said = await self.admission.answer(inbound, verdict)
            return None if said is None else await self._notice(inbound.route, key, said)
        voice = self.media is not None and self.media.transcriber is not None
        if inbound.unsupported:
            return await self._notice(inbound.route, key, unsupported_text(inbound.unsupported, voice))
        if command is not None:
            answer = await self.commands.handle(
                command, key, surface=inbound.surface, is_owner=False, sender=inbound.sender
            )
            return await self._notice(inbound.route, key, answer)
        attachments, told = await self._screen(inbound, key)
        if not inbound.text.strip() and (self.media is None or not self.media.usable(attachments)):
            if told is None and attachments:
                # Only files it never opens (a PDF with no caption): said, not stored.
                return await self._notice(inbound.route, key, unsupported_text("document", voice))
            return told
        if self.share is None and self.lanes.queued(key) >= self.runs.max_queued:
            return await self._too_many(inbound.route, key)
        session = await self.sessions.active(inbound)
        # Stored before any work begins: whatever happens next, the user's words are kept. In a
        # denied session too: shadow mode reads and answers, it only does not speak.
        try:
            stored = await self.sessions.store.add_user_message(
                session.id,
                inbound.text,
                sender=inbound.sender,
                platform_msg_id=inbound.platform_msg_id,
                media=dumps(attachments),
                # Sharing: the chat's queue is its intake rows, whichever worker runs it.
                queue_limit=self.runs.max_queued if self.share is not None else None,
            )
        except QueueFull:
            return await self._too_many(inbound.route, key)
        if stored is None:
            log.info("dropping redelivered message %s", inbound.platform_msg_id)
            return None
        self.live.publish(
            "message_in",
            session_key=key,
            surface=inbound.surface,
            sender=inbound.sender_id,
            text=inbound.text,
        )
        if self.closing:
            # Shutting down: the message is stored, and the next start answers it (see resume).
            log.info("message in %s stored; it is answered after the restart", key)
            return None
        if self.share is not None:
            # Queued for every worker (its intake row was written with it): one claims the chat.
            self.share.kick(session.id, stored)
            return None
        upto = stored if self.runs.queue_mode == "followup" else None
        return self.lanes.schedule(
            key,
            lambda: self.run_turn(key, inbound.route, inbound.surface, upto=upto),
            merge=upto is None,
        )

    async def _screen(self, inbound: Inbound, key: str) -> tuple[tuple[Attachment, ...], Done | None]:
        """The message's attachments with those it can't use marked, each such told to the user now
        (too large, voice not set up); the future of the last notice, if any."""
        if not inbound.attachments or self.media is None:
            return inbound.attachments, None
        attachments, notices = self.media.screen(inbound.attachments)
        told = None
        for index, text in enumerate(notices):
            # Once per platform message: a redelivery (Telegram, after a crash) is not told again.
            once = f"screened:{inbound.platform_msg_id}:{index}" if inbound.platform_msg_id else None
            told = await self._answer(
                Outbound(inbound.route, "notice", text, session_key=key, dedupe_key=once)
            )
        return attachments, told

    def _media_reader(self, session: SessionRow, route: Route, key: str) -> MediaReader | None:
        """How the run reads the attachments of the messages it answers, with this chat's platform."""
        media = self.media
        if media is None:
            return None

        async def tell(text: str, once: str | None) -> None:
            # `once`: e.g. "this model can't see images", said once per session.
            dedupe = f"{once}:{session.id}" if once else None
            await self.delivery.enqueue(Outbound(route, "notice", text, session_key=key, dedupe_key=dedupe))

        async def read(rows: list[MessageRow]) -> list[MessageRow]:
            profiles = self.runner.profiles
            llm = profiles.settings(profiles.resolve(self.runner.agents.model_profile(session)))
            sender = self.delivery.sender(route.surface)
            return await media.read(rows, sender=sender, tell=tell, vision=llm.vision, model=llm.model)

        return read

    async def _retry(self, inbound: Inbound, key: str, owner: bool) -> Done | None:
        """/retry: answer the session's last message again, e.g. after an interrupted run."""
        if not owner and not (await self.gate.decide(key, inbound.surface)).processes:
            return None
        session = await self.sessions.active(inbound)
        started, said = await self._answer_again(session, key, inbound.route)
        return started if said is None else await self._notice(inbound.route, key, said)

    async def answer_again(self, key: str) -> tuple[bool, str]:
        """The dashboard's "Answer again": what /retry does, in the chat the session last spoke in.
        Returns whether a run was started, and what happened in words."""
        session = await self.sessions.active_for_key(key)
        route = Route.from_json(session.last_route)
        if route is None or self.delivery.sender(route.surface) is None:
            return False, f"{key} can't be answered from this process (no chat of it on a platform here)."
        started, said = await self._answer_again(session, key, dataclasses.replace(route, reply_to=None))
        if said is not None:
            return False, said
        return started is not None, "Answering the last message again."

    async def _answer_again(
        self, session: SessionRow, key: str, route: Route
    ) -> tuple[Done | None, str | None]:
        """Run the session's last message again, or say why not: it has its answer, or a run is on."""
        last = await self.sessions.store.history(session.id, 1, chat_only=True)
        if not last or not (last[-1].kind == "user" or await self._cut_short(last[-1].run_id)):
            return None, "Nothing to retry: your last message has its answer."
        busy = "I am still answering; /stop first if you want me to start over."
        if self.lanes.busy(key):
            return None, busy
        job = functools.partial(self.run_turn, key, route, route.surface, force=True)
        if self.share is not None:
            leased = await self.share.run_leased(key, job)
            return (leased, None) if leased is not None else (None, busy)
        return self.lanes.schedule(key, job, merge=False), None

    async def _cut_short(self, run_id: str | None) -> bool:
        """Whether that run's answer broke off as it streamed (what was shown is stored)."""
        run = await self.sessions.store.get_run(run_id) if run_id else None
        return run is not None and (run.error or "").startswith(CUT_SHORT_ERROR)

    async def _compact(self, inbound: Inbound, key: str, owner: bool) -> Done | None:
        """/compact: summarise the session's older turns now, in the background; the chat is told how it
        went. It never takes the chat's lane, so a message sent meanwhile is answered at once."""
        if not owner and not (await self.gate.decide(key, inbound.surface)).processes:
            return None
        session = await self.sessions.active(inbound)
        compaction = self.compactor.start(session, force=True)

        async def report() -> None:
            outcome = await compaction
            await (await self._notice(inbound.route, key, outcome.text))

        return asyncio.get_running_loop().create_task(report())

    def interrupted_notices(
        self, run: RunRow, session: SessionRow | None, asked: str | None
    ) -> list[OutboxItem]:
        """The notice for a run a crash cut short: its message is safe and can be retried.

        Called by the store inside the transaction that marks the run aborted, so it must not await.
        """
        route = Route.from_json(session.last_route) if session else None
        if session is None or not session.active or route is None or run.channel == AGENT_CHANNEL:
            return []
        item = Outbound(
            route,
            "notice",
            interrupted_text(asked),
            session_key=session.key,
            dedupe_key=f"interrupted:{run.id}",
        )
        # No worker's yet: whoever recovers the outbox sends them (at a start, or a takeover).
        return [dataclasses.replace(row, worker_id=None) for row in self.delivery.plan_for(item, session)]

    async def resume(self, upto: int | None = None) -> int:
        """At start: answer messages that were stored but never taken up by a run (they came in while
        Bridge was stopping, or a crash came between storing and answering). `upto`: the newest
        message stored before this process began; later ones are the live traffic's, already on their
        way (the adapters listen before this runs). Returns how many chats."""
        resumed = 0
        for found in await self.sessions.store.unanswered(upto):
            session = found.session
            route = Route.from_json(session.last_route)
            # Only chats this process can answer in (`bridge chat` serves the console alone).
            if route is None or self.delivery.sender(route.surface) is None:
                continue
            if not (await self.gate.decide(session.key, route.surface)).processes:
                continue
            reply_to = found.platform_msg_id.rsplit(":", 1)[-1] if found.platform_msg_id else None
            route = dataclasses.replace(route, reply_to=reply_to)
            key = session.key
            log.info("answering a message in %s that came in before the restart", key)
            # partial binds this iteration's key and route (a plain lambda would see the last ones).
            self.lanes.schedule(key, functools.partial(self.run_turn, key, route, route.surface))
            resumed += 1
        return resumed

    async def _too_many(self, route: Route, key: str) -> Done:
        # Refused before it is stored, and said so: nothing is dropped silently.
        return await self._notice(
            route,
            key,
            f"⚠️ {self.runs.max_queued} messages are already waiting for an answer here, so I did not "
            "take this one. Please send it again once I have caught up.",
        )

    async def _notice(self, route: Route, key: str, text: str) -> Done:
        return await self._answer(Outbound(route, "notice", text, session_key=key))

    async def _answer(self, item: Outbound) -> Done:
        """Queue an item for its chat's courier; the future resolves once it has been sent."""
        sent = await self.delivery.enqueue(item)
        done: Done = asyncio.get_running_loop().create_future()

        def settle(_: asyncio.Future[str | None]) -> None:
            if not done.done():
                done.set_result(None)

        sent.add_done_callback(settle)
        return done

    async def run_turn(
        self, key: str, route: Route, channel: str, *, upto: int | None = None, force: bool = False
    ) -> bool:
        """Answer the chat's waiting messages. True once a run took them up; False if it found nothing
        new to answer, or failed (and the chat was told), which may have been before it took them up."""
        # Read the active session now, not when the message came: /clear may have replaced it.
        session = await self.sessions.active_for_key(key)

        display: LiveReply | DraftReply | None = None
        # Whether the messages this run answers held a voice note (noted as their attachments are read).
        heard = Heard()
        media = self._media_reader(session, route, key)

        async def plan_reply(run_id: str, text: str) -> list[OutboxItem]:
            return await self.delivery.plan_reply(
                route, text, run_id, session_key=key, dedupe_key=f"reply:{run_id}", draft=display
            )

        async with self.delivery.typing(route, key):
            reporter = self.delivery.activity(route, session_key=key)
            # Only where answers stream ([llm] stream): a display with nothing streaming into it would
            # show the whole answer as a draft, then replace it with itself.
            if self.runner.settings.llm.stream:
                display = await self.delivery.live_reply(route, key, reporter)
            try:
                result = await self.runner.run(
                    session,
                    channel=channel,
                    observer=reporter,
                    upto=upto,
                    force=force,
                    reply=plan_reply,
                    display=display,
                    media=heard.listening(media) if media is not None else None,
                )
            except asyncio.CancelledError:
                if display is not None:
                    # No draft edit may outlive the run (and reach an adapter stopping with it).
                    await asyncio.shield(display.close(final_edits=False))
                if self.closing:
                    # Stopped by the shutdown's grace period running out: say so, the message is kept.
                    await asyncio.shield(
                        self._notice(
                            route,
                            key,
                            "⚠️ Bridge is shutting down and had to stop this answer. Your message is "
                            "saved: send /retry once I am back.",
                        )
                    )
                raise
            except Exception as exc:
                log.exception("run for %s failed", key)
                if display is not None:
                    await display.close()
                await self._notice(
                    route, key, f"⚠️ Something went wrong while answering ({type(exc).__name__}). {RETRY_HINT}"
                )
                return False
        if display is not None:
            # Drafts of text written before tool calls get their last edit (the reply took the last).
            await display.close()
        if result.status == "skipped":
            log.debug("nothing new to answer in %s: an earlier run took the messages up", key)
            return False
        # The reply's rows were written with the answer and go at once; the activity display finishes
        # on its own (its last edit may follow the reply), and the turn ends when both are done.
        await self.delivery.deliver(result.outbox)
        if self.voice is not None and result.status in ("ok", "stopped"):
            await self._speak(session, route, result, heard.voice)
        if result.over_budget:
            # After the reply is sent, never before; in the background, so the chat is never held up.
            self.compactor.after_turn(session)
        try:
            await asyncio.wait_for(reporter.close(), ACTIVITY_CLOSE_S)
        except TimeoutError:
            log.info("the activity display of %s is still being edited; leaving it", key)
        return True

    async def _speak(self, session: SessionRow, route: Route, result: RunResult, heard_voice: bool) -> None:
        """The answer spoken after its text (bridge.gateway.voice_out), in the session it answered."""
        assert self.voice is not None
        current = await self.sessions.store.active_session(session.key)
        if current is None or current.id != session.id:
            return  # /clear while it answered: the new session's choice is not this answer's
        try:
            await self.voice.after_reply(current, route, result.run_id, result.reply, heard_voice=heard_voice)
        except Exception:  # a bug here must not undo a turn whose text reply is on its way
            log.exception("speaking the answer in %s failed", session.key)
