"""Attachments from intake to the model: screened when a message comes in, read by the run answering it."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from bridge.config import Settings
from bridge.errors import MediaError, Unsupported
from bridge.events import Attachment, dumps, loads, megabytes
from bridge.media.blobs import MediaStore
from bridge.media.parts import image_type
from bridge.media.speech import Speaker
from bridge.media.stt import Transcriber
from bridge.metrics import Metrics
from bridge.store.base import MessageRow
from bridge.store.tables import DatabaseStore

if TYPE_CHECKING:
    from bridge.platform import Sender

log = logging.getLogger(__name__)

# Says something to the chat; with a key, at most once per key (the outbox's dedupe key).
Tell = Callable[[str, "str | None"], Awaitable[None]]

VOICE_NOT_SET_UP = (
    "🎤 Voice messages aren't set up on this bot, so I can't listen to this one. Please type it instead."
)


def no_vision_text(model: str) -> str:
    return (
        f"🖼️ The model answering here ({model}) can't see images, so I only read the text that comes "
        "with them. (I'll say this once in this chat.)"
    )


def _once(tell: Tell, key: str) -> Tell:
    """`tell`, each thing it says said once under `key` (whatever key the caller gives)."""

    async def told(text: str, _: str | None) -> None:
        await tell(text, key)

    return told


def _outcome(attachment: Attachment) -> str:
    """What became of an attachment a run read, as /metrics counts it."""
    if attachment.problem:
        return "failed"
    return "transcribed" if attachment.transcribed else "stored"


class MediaIntake:
    """What becomes of attachments: refused at once when they can't be used, else fetched, stored by
    content and (voice) transcribed by the run that answers them, which then sees them as they read."""

    def __init__(self, settings: Settings, store: DatabaseStore, blobs: MediaStore) -> None:
        self.settings = settings
        self.store = store
        self.blobs = blobs
        self.transcriber = Transcriber(settings.stt) if settings.stt.enabled else None
        # [tts]: answers spoken back (bridge.gateway.voice_out), closed with the transcriber.
        self.speaker = Speaker(settings.tts) if settings.tts.speaks else None
        # Set by the composition root: attachments counted by kind and outcome on /metrics.
        self.metrics: Metrics | None = None

    def screen(self, attachments: tuple[Attachment, ...]) -> tuple[tuple[Attachment, ...], list[str]]:
        """At intake, before anything is stored: attachments marked with what rules them out now (too
        large by the size the platform announced, voice with no [stt]), and what to tell the user."""
        limit = self.settings.media.max_bytes
        screened, notices = [], []
        for attachment in attachments:
            problem = None
            if attachment.kind == "audio" and self.transcriber is None:
                problem, notice = "voice is not set up", VOICE_NOT_SET_UP
            elif attachment.kind != "file" and attachment.size is not None and attachment.size > limit:
                size, most = megabytes(attachment.size), megabytes(limit)
                if size == most:
                    # Just over the limit: rounded, the two would read the same.
                    size, most = f"{attachment.size:,} bytes", f"{limit:,} bytes"
                problem = f"too large: {size}"
                notice = f"📎 {attachment.name} is {size}; I can take files up to {most}, so I left it out."
            if problem is None:
                screened.append(attachment)
            else:
                screened.append(dataclasses.replace(attachment, problem=problem))
                notices.append(notice)
                self._count(attachment, "refused")
        return tuple(screened), notices

    @staticmethod
    def usable(attachments: tuple[Attachment, ...]) -> bool:
        """Whether any attachment may still reach the model (a message of nothing else is not stored)."""
        return any(a.pending for a in attachments)

    async def read(
        self, rows: list[MessageRow], *, sender: Sender | None, tell: Tell, vision: bool, model: str
    ) -> list[MessageRow]:
        """The rows with each pending attachment fetched into the media store and voice transcribed;
        each message so read is written back, so no later run or restart fetches it again."""
        out: list[MessageRow] = []
        images = False
        for row in rows:
            attachments = loads(row.media)
            if row.kind != "user" or not any(a.pending for a in attachments):
                out.append(row)
                continue
            read, transcripts = [], []
            for index, attachment in enumerate(attachments):
                if attachment.pending:
                    # What went wrong is said once per attachment: a run a kill cut short reads it
                    # again after the restart, and must not tell the chat twice.
                    once = _once(tell, f"media-{row.id}-{index}")
                    attachment, transcript = await self._read_one(attachment, sender, once)
                    self._count(attachment, _outcome(attachment))
                    if transcript:
                        transcripts.append(transcript)
                    images = images or (attachment.kind == "image" and attachment.sha256 is not None)
                read.append(attachment)
            content = "\n\n".join(part for part in (row.content, *transcripts) if part)
            media = dumps(read)
            await self.store.set_user_message(row.session_id, row.id, content, media)
            out.append(dataclasses.replace(row, content=content, media=media))
        if images and not vision:
            await tell(no_vision_text(model), "no-vision")
        return out

    async def _read_one(
        self, attachment: Attachment, sender: Sender | None, tell: Tell
    ) -> tuple[Attachment, str]:
        """The attachment once read (its hash, or its problem), and its transcript if it is voice."""
        limit = self.settings.media.max_bytes
        if attachment.kind == "audio" and self.transcriber is None:
            # Screened at intake; [stt] was taken out of the config since.
            await tell(VOICE_NOT_SET_UP, None)
            return dataclasses.replace(attachment, problem="voice is not set up"), ""
        cannot = dataclasses.replace(attachment, problem="this chat can't fetch it"), ""
        if sender is None:
            return cannot
        try:
            data = await sender.download(attachment, limit)
            if len(data) > limit:
                raise MediaError(f"too large: {megabytes(len(data))}")
        except Unsupported:  # a surface that cannot fetch attachments (Sender.download's default)
            return cannot
        except MediaError as exc:
            await tell(f"⚠️ I couldn't fetch {attachment.name}: {exc}.", None)
            return dataclasses.replace(attachment, problem=str(exc)), ""
        except Exception as exc:  # a platform failing in a way its adapter did not name
            log.warning("downloading %s failed: %r", attachment.name, exc)
            await tell(f"⚠️ I couldn't fetch {attachment.name}: the download failed.", None)
            return dataclasses.replace(attachment, problem="the download failed"), ""
        if attachment.kind == "image":
            mime = image_type(data)
            if mime is None:
                problem = "not an image format I can read (JPEG, PNG, GIF or WebP)"
                await tell(f"⚠️ {attachment.name} is {problem}.", None)
                return dataclasses.replace(attachment, problem=problem), ""
            attachment = dataclasses.replace(attachment, mime=mime)
        digest = await self.blobs.put(data)
        attachment = dataclasses.replace(attachment, sha256=digest)
        if attachment.kind != "audio":
            return attachment, ""
        assert self.transcriber is not None  # checked above
        try:
            transcript = await self.transcriber.transcribe(data, attachment.name, attachment.mime)
        except MediaError as exc:
            await tell(
                f"⚠️ I couldn't transcribe your voice message: {exc}. Please try again, or type it.", None
            )
            return dataclasses.replace(attachment, problem=f"not transcribed: {exc}"), ""
        if not transcript:
            return dataclasses.replace(attachment, problem="no speech was heard"), ""
        return dataclasses.replace(attachment, transcribed=True), transcript

    def _count(self, attachment: Attachment, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.attachment(attachment.kind, outcome)

    async def aclose(self) -> None:
        if self.transcriber is not None:
            await self.transcriber.aclose()
        if self.speaker is not None:
            await self.speaker.aclose()
