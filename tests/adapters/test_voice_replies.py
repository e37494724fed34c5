"""Spoken replies on the platforms: on Telegram a voice note in is transcribed and answered in text, then
with sendVoice (OGG/Opus, its duration read from the audio), and a user who refuses voice messages gets
the audio as a file; on Discord the spoken answer is an audio attachment after the text."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable

import pytest

from bridge.config import Settings
from bridge.config.media import SttSettings, TtsSettings
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from devkit.fakes.telegram_api import FakeTelegram
from tests.adapters.conftest import DISCORD_OWNER, OWNER, RigFactory
from tests.fakes.discord_api import FakeDiscord, Upload
from tests.fakes.speech_server import FakeSpeech

NOTE = b"OggS" + b"\x00" * 300


@pytest.fixture
async def tts() -> AsyncIterator[FakeSpeech]:
    async with FakeSpeech(seconds=3.0) as server:
        yield server


def voice(llm: FakeOpenAI, tts: FakeSpeech) -> Callable[[Settings], None]:
    def configure(settings: Settings) -> None:
        settings.stt = SttSettings(base_url=llm.base_url)
        settings.tts = TtsSettings(base_url=tts.base_url, voice="nova")

    return configure


async def test_a_voice_note_is_answered_in_text_then_with_a_voice_message(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI, tts: FakeSpeech, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    fake_llm.push_transcript("how long to boil an egg")
    fake_llm.push(fake.text("About *seven* minutes."))
    async with rig(fake_llm, configure=voice(fake_llm, tts)) as r:
        pushed = tg.dm(OWNER, None, voice=NOTE)
        messages = await r.sent_to(OWNER, 2)
    text, spoken = messages
    assert text["text"] == "About seven minutes."
    assert spoken["media"] == "voice" and spoken["text"] == ""
    assert spoken["reply_to_message_id"] == pushed["message_id"]
    [sent] = tg.sent_files
    assert sent["method"].lower() == "sendvoice" and sent["data"] == tts.audio
    assert sent["caption"] is None
    [params] = [params for method, params in tg.calls if method == "sendvoice"]
    # Read from the OGG pages, so the voice message shows how long it plays.
    assert int(params["duration"]) == 3
    assert fake_llm.last_transcription["data"] == NOTE
    [asked] = tts.requests
    assert asked.body["input"] == "About seven minutes." and asked.body["voice"] == "nova"
    assert asked.body["response_format"] == "opus"
    assert [rec.getMessage() for rec in caplog.records if rec.levelno >= logging.WARNING] == []


async def test_voice_off_in_the_chat_answers_a_voice_note_in_text_only(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI, tts: FakeSpeech
) -> None:
    fake_llm.push_transcript("and now?")
    fake_llm.push(fake.text("Text only."))
    async with rig(fake_llm, configure=voice(fake_llm, tts)) as r:
        tg.dm(OWNER, "/voice off")
        await r.sent_to(OWNER, 1)
        tg.dm(OWNER, None, voice=NOTE)
        messages = await r.sent_to(OWNER, 2)
    assert [m["text"] for m in messages][-1] == "Text only."
    assert tg.sent_files == [] and tts.requests == []


async def test_a_user_who_refuses_voice_messages_gets_the_audio_as_a_file(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI, tts: FakeSpeech
) -> None:
    fake_llm.push_transcript("hello")
    fake_llm.push(fake.text("Hello to you."))
    tg.fail_next("sendVoice", "400", description="Bad Request: VOICE_MESSAGES_FORBIDDEN")
    async with rig(fake_llm, configure=voice(fake_llm, tts)) as r:
        tg.dm(OWNER, None, voice=NOTE)
        await r.sent_to(OWNER, 2)
    [sent] = tg.sent_files
    assert sent["method"].lower() == "senddocument" and sent["data"] == tts.audio
    assert sent["filename"] == "spoken-reply.ogg"


async def test_a_speech_server_error_leaves_the_text_reply_alone(
    rig: RigFactory,
    tg: FakeTelegram,
    fake_llm: FakeOpenAI,
    tts: FakeSpeech,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bridge.media import speech
    from bridge.retry import Backoff

    monkeypatch.setattr(speech, "BACKOFF", Backoff(attempts=2, base=0.0, cap=0.0))
    tts.push(fake.http_error(503), fake.http_error(500))
    fake_llm.push_transcript("hi")
    fake_llm.push(fake.text("Hi there."))
    async with rig(fake_llm, configure=voice(fake_llm, tts)) as r:
        tg.dm(OWNER, None, voice=NOTE)
        [reply] = await r.sent_to(OWNER, 1)
        await r.settled()
    assert reply["text"] == "Hi there." and tg.sent_files == []
    problems = [(rec.levelno, rec.getMessage()) for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert len(problems) == 1 and problems[0][0] == logging.WARNING
    assert "was not spoken" in problems[0][1]


async def test_on_discord_the_spoken_answer_is_an_audio_file_after_the_text(
    discord_rig: RigFactory, dc: FakeDiscord, fake_llm: FakeOpenAI, tts: FakeSpeech
) -> None:
    fake_llm.push_transcript("what's for lunch")
    fake_llm.push(fake.text("Soup."))
    async with discord_rig(fake_llm, configure=voice(fake_llm, tts)) as r:
        note = Upload("voice-message.ogg", "audio/ogg", NOTE, voice=True)
        dm = dc.dm(DISCORD_OWNER, "", attachments=[note])
        text, spoken = await r.bot_sent(dm["channel_id"], 2)
    assert text["content"] == "Soup." and not text.get("attachments")
    assert spoken["content"] == ""
    assert dc.files_of(spoken["id"])[0][::2] == ("spoken-reply.ogg", tts.audio)
