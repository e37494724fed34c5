"""Spoken replies: an answer to a voice note also goes as a voice message ([tts], /voice).

The text reply is planned and sent as always; once it is on its way, the answer is spoken by the
[tts] server and queued like any file, through the outbox and the send policy, so the courier sends
it after the text, a restart sends it if a crash came first, and a chat the policy keeps quiet gets
a `suppressed` row (and nothing is spoken for it). A speech server that fails costs the chat nothing
but the voice message: one WARNING, and the text stands.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from bridge.agent.runstate import MediaReader
from bridge.config.media import TtsSettings
from bridge.errors import MediaError
from bridge.events import Outbound, OutFile, Route, loads, megabytes
from bridge.gateway.delivery import Delivery
from bridge.gateway.files_out import DEFAULT_MAX_BYTES
from bridge.media.blobs import MediaStore
from bridge.media.speech import Speaker, speakable, within
from bridge.store.base import MessageRow, SessionRow

log = logging.getLogger(__name__)

# The file a spoken reply is sent as where a platform has no voice messages (Discord, the console).
VOICE_FILE = "spoken-reply.ogg"
# A spoken reply in a chat the send policy keeps quiet: recorded by name, never synthesized.
SUPPRESSED_TEXT = "🔊 (the spoken reply)"
# /voice's choices as stored on the session; None (auto) speaks answers to voice notes only.
VOICE_CHOICES: dict[str, str | None] = {"on": "on", "off": "off", "auto": None}


def wants_voice(choice: str | None, heard_voice: bool) -> bool:
    """Whether an answer is spoken: always (/voice on), never (/voice off), or, by default, when it
    answers a voice note."""
    if choice == "on":
        return True
    if choice == "off":
        return False
    return heard_voice


def voice_state(choice: str | None) -> str:
    """`/voice`'s and `/status`'s words for a chat's choice."""
    if choice == "on":
        return "on: every answer here is also sent as a voice message"
    if choice == "off":
        return "off: answers here are text only"
    return "auto: answers to voice messages are also sent as voice messages"


def answers_voice(rows: list[MessageRow]) -> bool:
    """Whether the messages a run answers (the user messages after the last answer of its window)
    hold a voice note that was heard (transcribed)."""
    for row in reversed(rows):
        if row.kind != "user":
            return False
        if any(a.kind == "audio" and a.voice and a.transcribed for a in loads(row.media)):
            return True
    return False


@dataclass(slots=True)
class Heard:
    """Whether the run's messages held a voice note, noted as the run reads their attachments."""

    voice: bool = False

    def listening(self, read: MediaReader) -> MediaReader:
        async def noted(rows: list[MessageRow]) -> list[MessageRow]:
            rows = await read(rows)
            self.voice = answers_voice(rows)
            return rows

        return noted


class SpokenReplies:
    """Speaks a run's answer and queues the audio as the chat's next reply (a voice message)."""

    def __init__(
        self, settings: TtsSettings, delivery: Delivery, speaker: Speaker, blobs: MediaStore
    ) -> None:
        self.settings = settings
        self.delivery = delivery
        self.speaker = speaker
        self.blobs = blobs

    async def after_reply(
        self, session: SessionRow, route: Route, run_id: str, answer: str, *, heard_voice: bool
    ) -> None:
        """Speak `answer` into the chat, where the session's /voice choice (and a voice note heard)
        asks for it; called once its text reply is queued."""
        if not wants_voice(session.voice_replies, heard_voice):
            return
        key, dedupe = session.key, f"voice:{run_id}"
        if not await self.delivery.may_speak(route, key):
            await self.delivery.enqueue(
                Outbound(route, "reply", SUPPRESSED_TEXT, run_id, session_key=key, dedupe_key=dedupe)
            )
            return
        text = speakable(answer)
        if not text:
            log.debug("the answer in %s is code only; nothing to speak", key)
            return
        spoken = within(text, self.settings.max_chars)
        if len(spoken) < len(text):
            log.info(
                "the answer in %s is %s characters; the first %s are spoken ([tts] max_chars %s), the "
                "text reply has it all",
                key,
                f"{len(text):,}",
                f"{len(spoken):,}",
                f"{self.settings.max_chars:,}",
            )
        try:
            audio = await self.speaker.speak(spoken)
        except MediaError as exc:
            log.warning("the answer in %s was not spoken: %s; its text reply went as usual", key, exc)
            return
        sender = self.delivery.sender(route.surface)
        limit = (
            sender.max_upload_bytes if sender is not None and sender.max_upload_bytes else DEFAULT_MAX_BYTES
        )
        if len(audio) > limit:
            log.warning(
                "the spoken answer in %s is %s, more than %s takes; not sent (lower [tts] max_chars)",
                key,
                megabytes(len(audio)),
                route.surface,
            )
            return
        digest = await self.blobs.put(audio)
        file = OutFile(VOICE_FILE, str(self.blobs.path(digest)), len(audio), "audio/ogg", voice=True)
        await self.delivery.enqueue(
            Outbound(route, "reply", "", run_id, session_key=key, dedupe_key=dedupe, file=file)
        )
