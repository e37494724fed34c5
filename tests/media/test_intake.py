"""MediaIntake: attachments screened when a message comes in, then fetched, stored, checked and
(voice) transcribed by the run that answers it, with the user told what could not be used."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from bridge.config import Settings
from bridge.errors import MediaError
from bridge.events import Attachment, dumps, loads, megabytes
from bridge.media import stt
from bridge.media.blobs import MediaStore
from bridge.media.intake import VOICE_NOT_SET_UP, MediaIntake, no_vision_text
from bridge.retry import Backoff
from bridge.store.base import MessageRow
from bridge.store.sqlite import SQLiteStore
from devkit.fakes.openai_server import FakeOpenAI, http_error
from tests.harness import RecordingSender
from tests.media.samples import GIF89, JPEG, NOT_AN_IMAGE, PNG, VOICE, WEBP

MB = 1024 * 1024
PHOTO = Attachment("image", "photo.jpg", "file-1", "image/jpeg", 1234)
NOTE = Attachment("audio", "voice.ogg", "file-2", "audio/ogg", 900, voice=True)
REPORT = Attachment("file", "report.pdf", "file-3", "application/pdf", 50 * MB)


def make_settings(tmp_path: Path, *, stt_url: str | None = None, max_bytes: int = 20 * MB) -> Settings:
    stt_section: dict[str, Any] = {"base_url": stt_url, "language": "en"} if stt_url else {}
    return Settings(
        storage={"path": tmp_path / "state" / "bridge.db"},
        media={"max_bytes": max_bytes},
        stt=stt_section,
    )


class Told:
    """A recording `tell`: each (text, once key) in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []

    async def __call__(self, text: str, once: str | None) -> None:
        self.calls.append((text, once))

    @property
    def texts(self) -> list[str]:
        return [text for text, _ in self.calls]


class Sender(RecordingSender):
    """A platform that hands out the bytes of each attachment by its ref; an exception is raised."""

    def __init__(self, files: dict[str, bytes | BaseException]) -> None:
        super().__init__()
        self.files = files
        self.downloads: list[tuple[str, int]] = []

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        self.downloads.append((attachment.ref, max_bytes))
        found = self.files[attachment.ref]
        if isinstance(found, BaseException):
            raise found
        return found


class NoDownloads(RecordingSender):
    """A chat surface that cannot fetch attachments at all (the console, say)."""


@pytest.fixture
def blobs(tmp_path: Path) -> MediaStore:
    return MediaStore(tmp_path / "media")


@pytest.fixture
async def fake_stt() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


MakeIntake = Callable[..., MediaIntake]


@pytest.fixture
async def make_intake(tmp_path: Path, store: SQLiteStore, blobs: MediaStore) -> AsyncIterator[MakeIntake]:
    made: list[MediaIntake] = []

    def make(**settings: Any) -> MediaIntake:
        intake = MediaIntake(make_settings(tmp_path, **settings), store, blobs)
        made.append(intake)
        return intake

    yield make
    for intake in made:
        await intake.aclose()


async def user_row(store: SQLiteStore, content: str, *attachments: Attachment) -> MessageRow:
    session = await store.ensure_active_session("main")
    await store.add_user_message(session.id, content, media=dumps(attachments))
    return (await store.history(session.id, 10))[-1]


async def stored_row(store: SQLiteStore, row: MessageRow) -> MessageRow:
    [found] = [r for r in await store.history(row.session_id, 50) if r.id == row.id]
    return found


# -- screen -----------------------------------------------------------------------------------


def test_megabytes_reads_as_people_write_sizes() -> None:
    assert megabytes(20 * MB) == "20 MB"
    assert megabytes(int(1.5 * MB)) == "1.5 MB"
    assert megabytes(300 * 1024) == "300 KB"
    assert megabytes(100) == "100 bytes"


def test_an_attachment_larger_than_announced_max_is_marked_and_the_user_told(make_intake: MakeIntake) -> None:
    intake = make_intake(max_bytes=10 * MB)
    big = Attachment("image", "huge.png", "r", "image/png", size=30 * MB)

    [screened], notices = intake.screen((big,))

    assert screened.problem == "too large: 30 MB"
    assert not screened.pending
    assert notices == ["📎 huge.png is 30 MB; I can take files up to 10 MB, so I left it out."]


def test_an_attachment_of_exactly_the_limit_or_of_unknown_size_passes(make_intake: MakeIntake) -> None:
    intake = make_intake(max_bytes=10 * MB)
    exact = Attachment("image", "a.png", "r", size=10 * MB)
    unknown = Attachment("image", "b.png", "r", size=None)

    screened, notices = intake.screen((exact, unknown))

    assert screened == (exact, unknown) and notices == []


def test_a_voice_note_too_large_is_marked_when_stt_is_set_up(make_intake: MakeIntake) -> None:
    intake = make_intake(stt_url="http://127.0.0.1:9/v1", max_bytes=1 * MB)
    long_note = Attachment("audio", "voice.ogg", "r", "audio/ogg", size=3 * MB, voice=True)

    [screened], notices = intake.screen((long_note,))

    assert screened.problem == "too large: 3 MB"
    assert notices == ["📎 voice.ogg is 3 MB; I can take files up to 1 MB, so I left it out."]


def test_the_notice_for_a_file_just_over_the_limit_does_not_give_the_limit_as_its_size(
    make_intake: MakeIntake,
) -> None:
    intake = make_intake(max_bytes=20 * MB)
    just_over = Attachment("image", "big.png", "r", size=20 * MB + 1)

    [screened], [notice] = intake.screen((just_over,))

    assert screened.problem is not None
    # Neither the label the model sees nor the notice the user gets gives the limit as the size.
    assert screened.problem != "too large: 20 MB"
    assert "is 20 MB;" not in notice


def test_voice_without_stt_is_marked_and_the_user_told(make_intake: MakeIntake) -> None:
    intake = make_intake()

    [screened], notices = intake.screen((NOTE,))

    assert screened.problem == "voice is not set up"
    assert notices == [VOICE_NOT_SET_UP]
    assert not intake.usable((screened,))


def test_voice_with_stt_passes(make_intake: MakeIntake) -> None:
    intake = make_intake(stt_url="http://127.0.0.1:9/v1")
    assert intake.screen((NOTE,)) == ((NOTE,), [])


def test_a_file_passes_untouched_whatever_its_size(make_intake: MakeIntake) -> None:
    intake = make_intake(max_bytes=1 * MB)
    assert intake.screen((REPORT,)) == ((REPORT,), [])


def test_each_attachment_is_screened_on_its_own_and_order_is_kept(make_intake: MakeIntake) -> None:
    intake = make_intake(max_bytes=1 * MB)
    big = Attachment("image", "big.png", "r", size=2 * MB)

    screened, notices = intake.screen((PHOTO, big, NOTE, REPORT))

    assert [a.name for a in screened] == ["photo.jpg", "big.png", "voice.ogg", "report.pdf"]
    assert [a.problem for a in screened] == [None, "too large: 2 MB", "voice is not set up", None]
    assert len(notices) == 2
    assert intake.usable(screened)  # the photo may still reach the model


def test_usable_means_something_is_still_to_fetch(make_intake: MakeIntake) -> None:
    intake = make_intake()
    assert intake.usable((PHOTO,))
    assert not intake.usable(())
    assert not intake.usable((REPORT,))  # a file is named to the model, never fetched
    assert not intake.usable((Attachment("image", "x", "r", problem="too large: 30 MB"),))


# -- read: images -----------------------------------------------------------------------------


async def test_an_image_is_fetched_stored_and_written_back(
    make_intake: MakeIntake, store: SQLiteStore, blobs: MediaStore
) -> None:
    intake = make_intake(max_bytes=5 * MB)
    # The platform called it a JPEG; the bytes say PNG, and the bytes win.
    row = await user_row(store, "what is this?", PHOTO)
    sender, told = Sender({"file-1": PNG}), Told()

    [out] = await intake.read([row], sender=sender, tell=told, vision=True, model="m")

    digest = hashlib.sha256(PNG).hexdigest()
    [read] = loads(out.media)
    assert read.sha256 == digest and read.mime == "image/png" and read.problem is None
    assert out.content == "what is this?"
    assert await blobs.get(digest) == PNG
    assert sender.downloads == [("file-1", 5 * MB)]
    assert told.calls == []
    again = await stored_row(store, row)
    assert (again.content, loads(again.media)) == ("what is this?", (read,))


@pytest.mark.parametrize(("data", "mime"), [(JPEG, "image/jpeg"), (GIF89, "image/gif"), (WEBP, "image/webp")])
async def test_each_readable_format_is_taken(
    make_intake: MakeIntake, store: SQLiteStore, data: bytes, mime: str
) -> None:
    row = await user_row(store, "", PHOTO)
    [out] = await make_intake().read(
        [row], sender=Sender({"file-1": data}), tell=Told(), vision=True, model="m"
    )
    [read] = loads(out.media)
    assert read.mime == mime and read.sha256 is not None


async def test_bytes_that_are_not_an_image_are_refused_with_a_notice(
    make_intake: MakeIntake, store: SQLiteStore, blobs: MediaStore
) -> None:
    row = await user_row(store, "see", PHOTO)
    told = Told()

    [out] = await make_intake().read(
        [row], sender=Sender({"file-1": NOT_AN_IMAGE}), tell=told, vision=True, model="m"
    )

    [read] = loads(out.media)
    assert read.problem == "not an image format I can read (JPEG, PNG, GIF or WebP)"
    assert read.sha256 is None
    assert told.calls == [
        ("⚠️ photo.jpg is not an image format I can read (JPEG, PNG, GIF or WebP).", f"media-{row.id}-0")
    ]
    assert not blobs.root.exists() or not any(p.is_file() for p in blobs.root.rglob("*"))
    assert loads((await stored_row(store, row)).media) == (read,)


async def test_a_download_the_platform_refuses_keeps_its_reason(
    make_intake: MakeIntake, store: SQLiteStore
) -> None:
    row = await user_row(store, "", PHOTO)
    told = Told()

    [out] = await make_intake().read(
        [row], sender=Sender({"file-1": MediaError("gone")}), tell=told, vision=True, model="m"
    )

    [read] = loads(out.media)
    assert read.problem == "gone"
    assert told.calls == [("⚠️ I couldn't fetch photo.jpg: gone.", f"media-{row.id}-0")]


async def test_a_download_failing_unexpectedly_is_the_download_failed(
    make_intake: MakeIntake, store: SQLiteStore
) -> None:
    row = await user_row(store, "", PHOTO)
    told = Told()

    [out] = await make_intake().read(
        [row],
        sender=Sender({"file-1": ConnectionResetError("peer reset")}),
        tell=told,
        vision=True,
        model="m",
    )

    [read] = loads(out.media)
    assert read.problem == "the download failed"
    assert told.calls == [("⚠️ I couldn't fetch photo.jpg: the download failed.", f"media-{row.id}-0")]
    assert "peer reset" not in told.texts[0]


async def test_more_bytes_than_the_limit_are_refused_whatever_was_announced(
    make_intake: MakeIntake, store: SQLiteStore, blobs: MediaStore
) -> None:
    row = await user_row(store, "", Attachment("image", "photo.jpg", "file-1", size=100))
    told = Told()
    data = PNG + b"\x00" * (2 * MB)

    [out] = await make_intake(max_bytes=1 * MB).read(
        [row], sender=Sender({"file-1": data}), tell=told, vision=True, model="m"
    )

    [read] = loads(out.media)
    assert read.problem == f"too large: {megabytes(len(data))}"
    assert read.sha256 is None
    assert told.calls == [
        (f"⚠️ I couldn't fetch photo.jpg: too large: {megabytes(len(data))}.", f"media-{row.id}-0")
    ]
    assert await blobs.get(hashlib.sha256(data).hexdigest()) is None


async def test_a_chat_that_cannot_download_marks_the_attachment_without_failing(
    make_intake: MakeIntake, store: SQLiteStore
) -> None:
    row = await user_row(store, "look", PHOTO)
    told = Told()

    [out] = await make_intake().read([row], sender=NoDownloads(), tell=told, vision=True, model="m")

    [read] = loads(out.media)
    assert read.problem == "this chat can't fetch it"
    assert out.content == "look"
    assert loads((await stored_row(store, row)).media) == (read,)


async def test_one_failed_attachment_does_not_hold_up_the_others(
    make_intake: MakeIntake, store: SQLiteStore
) -> None:
    second = Attachment("image", "b.png", "file-9")
    row = await user_row(store, "two", PHOTO, second, REPORT)
    told = Told()

    [out] = await make_intake().read(
        [row], sender=Sender({"file-1": MediaError("gone"), "file-9": PNG}), tell=told, vision=True, model="m"
    )

    first, fetched, report = loads(out.media)
    assert first.problem == "gone"
    assert fetched.sha256 == hashlib.sha256(PNG).hexdigest()
    assert report == REPORT  # a file is never fetched
    assert len(told.calls) == 1


# -- read: the no-vision notice ---------------------------------------------------------------


async def test_a_model_without_vision_is_said_once_with_its_key_when_an_image_was_read(
    make_intake: MakeIntake, store: SQLiteStore
) -> None:
    rows = [
        await user_row(store, "a", PHOTO),
        await user_row(store, "b", Attachment("image", "b.png", "file-9")),
    ]
    told = Told()

    await make_intake().read(
        rows, sender=Sender({"file-1": JPEG, "file-9": PNG}), tell=told, vision=False, model="tiny-model"
    )

    assert told.calls == [(no_vision_text("tiny-model"), "no-vision")]
    assert "tiny-model" in told.texts[0]


async def test_no_vision_notice_for_a_vision_model(make_intake: MakeIntake, store: SQLiteStore) -> None:
    row = await user_row(store, "a", PHOTO)
    told = Told()
    await make_intake().read([row], sender=Sender({"file-1": JPEG}), tell=told, vision=True, model="m")
    assert told.calls == []


async def test_no_vision_notice_when_no_image_could_be_read(
    make_intake: MakeIntake, store: SQLiteStore
) -> None:
    row = await user_row(store, "a", PHOTO)
    told = Told()
    await make_intake().read(
        [row], sender=Sender({"file-1": NOT_AN_IMAGE}), tell=told, vision=False, model="m"
    )
    assert [once for _, once in told.calls] == [f"media-{row.id}-0"]  # the format notice only


async def test_no_vision_notice_for_images_read_by_an_earlier_run(
    make_intake: MakeIntake, store: SQLiteStore
) -> None:
    intake = make_intake()
    row = await user_row(store, "a", PHOTO)
    [read] = await intake.read([row], sender=Sender({"file-1": JPEG}), tell=Told(), vision=True, model="m")
    told = Told()

    await intake.read([read], sender=Sender({}), tell=told, vision=False, model="m")

    assert told.calls == []


# -- read: rows with nothing to read ----------------------------------------------------------


async def test_rows_without_pending_media_are_returned_as_they_are_and_not_written(
    make_intake: MakeIntake, store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = await user_row(store, "just text")
    done = await user_row(store, "seen", Attachment("image", "p.png", "r", sha256="a" * 64))
    refused = await user_row(store, "", Attachment("image", "p.png", "r", problem="too large: 30 MB"))
    only_file = await user_row(store, "", REPORT)
    damaged = dataclasses.replace(await user_row(store, "odd"), media="not json")
    session = await store.ensure_active_session("main")
    await store.add_assistant_message(session.id, None, "an answer")
    assistant = (await store.history(session.id, 10))[-1]
    # An assistant row never has its media read, even one with pending-looking media.
    odd_assistant = dataclasses.replace(assistant, media=dumps([PHOTO]))
    writes: list[object] = []

    async def record(*args: object) -> None:
        writes.append(args)

    monkeypatch.setattr(store, "set_user_message", record)
    sender, told = Sender({}), Told()
    rows = [plain, done, refused, only_file, damaged, assistant, odd_assistant]

    out = await make_intake().read(rows, sender=sender, tell=told, vision=False, model="m")

    assert out == rows
    assert all(a is b for a, b in zip(out, rows, strict=True))
    assert writes == [] and sender.downloads == [] and told.calls == []


# -- read: voice ------------------------------------------------------------------------------


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stt, "BACKOFF", Backoff(attempts=3, base=0.0, cap=0.0))


async def test_a_voice_note_is_transcribed_into_the_message(
    make_intake: MakeIntake, store: SQLiteStore, blobs: MediaStore, fake_stt: FakeOpenAI
) -> None:
    fake_stt.push_transcript("  water the plants  ")
    row = await user_row(store, "", NOTE)
    told = Told()

    [out] = await make_intake(stt_url=fake_stt.base_url).read(
        [row], sender=Sender({"file-2": VOICE}), tell=told, vision=False, model="m"
    )

    assert out.content == "water the plants"
    [read] = loads(out.media)
    assert read.transcribed and read.problem is None
    assert read.sha256 == hashlib.sha256(VOICE).hexdigest()
    assert await blobs.get(read.sha256) == VOICE
    [sent] = fake_stt.transcriptions
    assert (sent["data"], sent["filename"], sent["content_type"], sent["language"]) == (
        VOICE,
        "voice.ogg",
        "audio/ogg",
        "en",
    )
    assert told.calls == []  # a voice note is not an image: no no-vision notice
    again = await stored_row(store, row)
    assert again.content == "water the plants" and loads(again.media) == (read,)


async def test_a_caption_and_the_transcripts_are_joined(
    make_intake: MakeIntake, store: SQLiteStore, fake_stt: FakeOpenAI
) -> None:
    fake_stt.push_transcript("first part", "second part")
    second = Attachment("audio", "more.ogg", "file-5", "audio/ogg", voice=True)
    row = await user_row(store, "my caption", NOTE, second)

    [out] = await make_intake(stt_url=fake_stt.base_url).read(
        [row], sender=Sender({"file-2": VOICE, "file-5": VOICE + b"2"}), tell=Told(), vision=True, model="m"
    )

    assert out.content == "my caption\n\nfirst part\n\nsecond part"
    assert all(a.transcribed for a in loads(out.media))


async def test_a_transcription_server_error_marks_the_voice_note_and_tells_the_user(
    make_intake: MakeIntake, store: SQLiteStore, fake_stt: FakeOpenAI, quick_retries: None
) -> None:
    fake_stt.push_transcript(*(http_error(500, "boom") for _ in range(3)))
    row = await user_row(store, "caption", NOTE)
    told = Told()

    [out] = await make_intake(stt_url=fake_stt.base_url).read(
        [row], sender=Sender({"file-2": VOICE}), tell=told, vision=False, model="m"
    )

    [read] = loads(out.media)
    assert read.problem == "not transcribed: the transcription server failed: HTTP 500"
    assert not read.transcribed
    assert read.sha256 is not None  # the audio is kept; it is not fetched again
    assert out.content == "caption"
    assert len(fake_stt.transcriptions) == 3
    assert told.calls == [
        (
            "⚠️ I couldn't transcribe your voice message: the transcription server failed: HTTP 500. "
            "Please try again, or type it.",
            f"media-{row.id}-0",
        )
    ]
    assert loads((await stored_row(store, row)).media) == (read,)


async def test_a_refused_transcription_is_not_retried(
    make_intake: MakeIntake, store: SQLiteStore, fake_stt: FakeOpenAI, quick_retries: None
) -> None:
    fake_stt.push_transcript(http_error(400, "bad audio"))
    row = await user_row(store, "", NOTE)
    told = Told()

    [out] = await make_intake(stt_url=fake_stt.base_url).read(
        [row], sender=Sender({"file-2": VOICE}), tell=told, vision=False, model="m"
    )

    [read] = loads(out.media)
    assert read.problem == "not transcribed: the transcription server refused it (HTTP 400)"
    assert len(fake_stt.transcriptions) == 1 and len(told.calls) == 1


async def test_silence_is_no_speech_heard(
    make_intake: MakeIntake, store: SQLiteStore, fake_stt: FakeOpenAI
) -> None:
    fake_stt.push_transcript("   ")
    row = await user_row(store, "", NOTE)

    [out] = await make_intake(stt_url=fake_stt.base_url).read(
        [row], sender=Sender({"file-2": VOICE}), tell=Told(), vision=False, model="m"
    )

    [read] = loads(out.media)
    assert read.problem == "no speech was heard" and not read.transcribed
    assert out.content == ""


async def test_voice_pending_after_stt_was_taken_out_of_the_config_is_marked_and_told(
    make_intake: MakeIntake, store: SQLiteStore
) -> None:
    row = await user_row(store, "", NOTE)
    sender, told = Sender({"file-2": VOICE}), Told()

    [out] = await make_intake().read([row], sender=sender, tell=told, vision=False, model="m")

    [read] = loads(out.media)
    assert read.problem == "voice is not set up"
    assert told.calls == [(VOICE_NOT_SET_UP, f"media-{row.id}-0")]
    assert sender.downloads == []  # not fetched for nothing


async def test_a_read_row_is_not_read_again(
    make_intake: MakeIntake, store: SQLiteStore, fake_stt: FakeOpenAI
) -> None:
    fake_stt.push_transcript("hello")
    intake = make_intake(stt_url=fake_stt.base_url)
    row = await user_row(store, "", NOTE)
    await intake.read([row], sender=Sender({"file-2": VOICE}), tell=Told(), vision=False, model="m")
    again = await stored_row(store, row)
    sender = Sender({})

    [out] = await intake.read([again], sender=sender, tell=Told(), vision=False, model="m")

    assert out is again and sender.downloads == [] and len(fake_stt.transcriptions) == 1
    assert json.loads(out.media or "")[0]["transcribed"] is True


async def test_an_attachment_read_again_after_a_kill_tells_under_the_same_key(
    make_intake: MakeIntake, store: SQLiteStore
) -> None:
    # A kill between the notice and the write-back leaves the row unread: the restart reads it again,
    # and the outbox, which drops a second notice under one key, tells the chat once.
    row = await user_row(store, "", PHOTO)
    told = Told()
    sender = Sender({"file-1": MediaError("gone")})
    for _ in range(2):
        await make_intake().read([row], sender=sender, tell=told, vision=True, model="m")
    assert [once for _, once in told.calls] == [f"media-{row.id}-0"] * 2
