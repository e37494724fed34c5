"""Spoken replies ([tts], /voice): an answer to a voice note also goes as a voice message, after its
text, through the outbox and the send policy; a failing speech server costs only the voice message."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bridge.app import Bridge
from bridge.config import Settings
from bridge.config.io import load_settings, render_settings
from bridge.errors import ConfigError, MediaError
from bridge.events import Attachment, Inbound, Outbound, OutFile
from bridge.gateway.courier import outbound_of
from bridge.gateway.voice_out import SUPPRESSED_TEXT, VOICE_FILE, answers_voice, wants_voice
from bridge.media import speech
from bridge.media.speech import CODE_SAID, Speaker, opus_seconds, speakable, within
from bridge.retry import Backoff
from bridge.store.base import MessageRow, OutboxItem, OutboxRow
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI, Reply, http_error
from tests.fakes.speech_server import MP3, FakeSpeech, ogg_opus
from tests.harness import RecordingSender, make_settings

pytestmark = pytest.mark.usefixtures("isolated_config")

KEY = "sk-tts-DO-NOT-PRINT-7070"
NOTE = b"OggS\x00\x02" + b"a voice note" * 20


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(speech, "BACKOFF", Backoff(attempts=2, base=0.0, cap=0.0))


@pytest.fixture
async def tts() -> AsyncIterator[FakeSpeech]:
    async with FakeSpeech(seconds=3.0) as server:
        yield server


@dataclass
class VoiceSender(RecordingSender):
    """The recording sender, on a platform that hands out voice notes and takes files."""

    files: list[tuple[Outbound, bytes]] = field(default_factory=list)
    order: list[str] = field(default_factory=list)

    async def send(self, item: Outbound) -> str | None:
        self.order.append(item.kind)
        return await super().send(item)

    async def send_file(self, item: Outbound) -> str | None:
        assert item.file is not None
        self.files.append((item, await asyncio.to_thread(Path(item.file.path).read_bytes)))
        self.order.append("voice" if item.file.voice else "file")
        return f"file-{len(self.files)}"

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        return NOTE


@dataclass
class Rig:
    bridge: Bridge
    sender: VoiceSender
    llm: FakeOpenAI
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    async def say(
        self, text: str = "", *, voice: bool = False, who: str = "owner", group: bool = False
    ) -> None:
        number = str(next(self._ids))
        note = (
            Attachment("audio", f"voice-{number}.ogg", f"ref-{number}", "audio/ogg", len(NOTE), voice=True),
        )
        inbound = Inbound(
            "test",
            "group" if group else "dm",
            "g1" if group else who,
            who,
            text,
            message_id=number,
            mentioned=True,
            attachments=note if voice else (),
        )
        done = await self.bridge.handle(inbound)
        if done is not None:
            await asyncio.wait_for(done, 10)
        await self.bridge.lanes.idle()
        await self.bridge.delivery.idle()

    async def outbox(self, key: str = "main") -> list[OutboxRow]:
        rows = await self.bridge.store.outbox()
        return [row for row in rows if row.item.session_key == key]


@asynccontextmanager
async def running(
    tmp_path: Path,
    llm: FakeOpenAI,
    server: FakeSpeech | None,
    *,
    tts: dict[str, Any] | None = None,
    **sections: Any,
) -> AsyncIterator[Rig]:
    """A started Bridge with [stt] on the fake model and [tts] on `server` (and `tts`'s keys)."""
    tts_section = {"base_url": server.base_url, "api_key_env": "SPEECH_TEST_KEY"} if server else {}
    settings = make_settings(
        tmp_path, llm.base_url, stt={"base_url": llm.base_url}, tts={**tts_section, **(tts or {})}, **sections
    )
    bridge = Bridge(settings)
    sender = VoiceSender()
    bridge.add_sender(sender)
    async with bridge:
        yield Rig(bridge, sender, llm)


@pytest.fixture(autouse=True)
def tts_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPEECH_TEST_KEY", KEY)


def no_errors(caplog: pytest.LogCaptureFixture) -> None:
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []


# -- a chat that hears its answers -----------------------------------------------------------------


async def test_an_answer_to_a_voice_note_is_sent_as_text_then_as_a_voice_message(
    tmp_path: Path, fake_llm: FakeOpenAI, tts: FakeSpeech, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    fake_llm.push_transcript("what should I cook tonight")
    fake_llm.push(fake.text("Try **risotto**: see [this recipe](https://example.com/r)."))
    async with running(tmp_path, fake_llm, tts) as r:
        await r.say(voice=True)
        rows = await r.outbox()
    assert r.sender.order == ["reply", "voice"]
    assert r.sender.of("reply") == ["Try **risotto**: see [this recipe](https://example.com/r)."]
    [(item, audio)] = r.sender.files
    assert audio == tts.audio and item.text == ""
    assert item.file is not None and item.file.voice and item.file.name == VOICE_FILE
    assert item.file.mime == "audio/ogg" and item.route.reply_to == "1"
    [asked] = tts.requests
    # Words, not Markdown: no asterisks, no link target read aloud.
    assert asked.body == {
        "model": "tts-1",
        "voice": "alloy",
        "input": "Try risotto: see this recipe.",
        "response_format": "opus",
    }
    assert asked.authorization == f"Bearer {KEY}"
    voice_rows = [row for row in rows if row.item.file is not None]
    assert [(row.item.state, row.item.kind) for row in voice_rows] == [("sent", "reply")]
    assert voice_rows[0].item.dedupe_key is not None and voice_rows[0].item.dedupe_key.startswith("voice:")
    assert KEY not in caplog.text
    no_errors(caplog)


async def test_a_typed_message_is_answered_in_text_only(
    tmp_path: Path, fake_llm: FakeOpenAI, tts: FakeSpeech
) -> None:
    fake_llm.push(fake.text("Hello."))
    async with running(tmp_path, fake_llm, tts) as r:
        await r.say("hi")
    assert r.sender.order == ["reply"] and tts.requests == []


async def test_voice_on_speaks_every_answer_and_voice_off_none(
    tmp_path: Path, fake_llm: FakeOpenAI, tts: FakeSpeech
) -> None:
    fake_llm.push_transcript("and in voice")
    fake_llm.push(fake.text("Typed answer."), fake.text("Voice answer."))
    async with running(tmp_path, fake_llm, tts) as r:
        await r.say("/voice on")
        await r.say("typed")
        await r.say("/voice off")
        await r.say(voice=True)
    notices = r.sender.of("notice")
    assert notices[0].startswith("Spoken replies in this chat: on")
    assert notices[1].startswith("Spoken replies in this chat: off")
    assert [request.input for request in tts.requests] == ["Typed answer."]
    assert r.sender.of("reply") == ["Typed answer.", "Voice answer."]
    assert len(r.sender.files) == 1


async def test_the_voice_choice_survives_clear_and_shows_in_status(
    tmp_path: Path, fake_llm: FakeOpenAI, tts: FakeSpeech
) -> None:
    fake_llm.push_transcript("still there?")
    fake_llm.push(fake.text("Yes."))
    async with running(tmp_path, fake_llm, tts) as r:
        await r.say("/voice off")
        await r.say("/clear")
        await r.say("/status")
        await r.say(voice=True)
        await r.say("/voice auto")
        await r.say("/voice")
    notices = r.sender.of("notice")
    assert "Spoken replies: off: answers here are text only" in notices[2]
    assert tts.requests == [] and r.sender.files == []
    assert notices[-2] == notices[-1]
    assert notices[-1].startswith("Spoken replies in this chat: auto: answers to voice messages")


async def test_a_member_may_switch_voice_in_their_own_dm_but_not_in_a_group(
    tmp_path: Path, fake_llm: FakeOpenAI, tts: FakeSpeech
) -> None:
    async with running(tmp_path, fake_llm, tts, telegram={}) as r:
        await r.say("/voice off", who="bob")
        await r.say("/voice off", who="bob", group=True)
        await r.say("/voice wobble", who="bob")
    mine, group, wrong = r.sender.of("notice")
    assert mine.startswith("Spoken replies in this chat: off")
    assert group.startswith("Only an owner of this bot can change spoken replies here")
    assert wrong.startswith("Usage: /voice on|off|auto")


# -- what never costs the text ----------------------------------------------------------------------


async def test_a_failing_speech_server_leaves_the_text_reply_and_one_warning(
    tmp_path: Path, fake_llm: FakeOpenAI, tts: FakeSpeech, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    tts.push(http_error(500), http_error(500))
    fake_llm.push_transcript("tell me a joke")
    fake_llm.push(fake.text("Why did the chicken cross the road?"))
    async with running(tmp_path, fake_llm, tts) as r:
        await r.say(voice=True)
        rows = await r.outbox()
    assert r.sender.of("reply") == ["Why did the chicken cross the road?"]
    assert r.sender.files == [] and len(tts.requests) == 2
    warnings = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "was not spoken: the speech server failed: HTTP 500" in warnings[0]
    assert "its text reply went as usual" in warnings[0]
    assert [row.item.state for row in rows] == ["sent"]
    no_errors(caplog)


async def test_a_speech_server_that_is_down_costs_only_the_voice(
    tmp_path: Path, fake_llm: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    from devkit.fakes.loopback import closed_port

    fake_llm.push_transcript("anyone?")
    fake_llm.push(fake.text("Here."))
    tts = {"base_url": f"http://127.0.0.1:{closed_port()}/v1", "timeout_s": 2}
    async with running(tmp_path, fake_llm, None, tts=tts) as r:
        await r.say(voice=True)
    assert r.sender.of("reply") == ["Here."] and r.sender.files == []
    no_errors(caplog)


async def test_a_chat_the_send_policy_keeps_quiet_gets_a_suppressed_voice_row_and_nothing_spoken(
    tmp_path: Path, fake_llm: FakeOpenAI, tts: FakeSpeech
) -> None:
    fake_llm.push_transcript("are you there")
    fake_llm.push(fake.text("Quietly, yes."))
    policy = {"send_policy": {"default": "deny"}}
    async with running(tmp_path, fake_llm, tts, session=policy) as r:
        await r.say(voice=True)
        rows = await r.outbox()
    assert r.sender.sent == [] and r.sender.files == []
    assert tts.requests == []
    states = {(row.item.text, row.item.state) for row in rows}
    assert states == {("Quietly, yes.", "suppressed"), (SUPPRESSED_TEXT, "suppressed")}
    [voice_row] = [row for row in rows if row.item.text == SUPPRESSED_TEXT]
    assert voice_row.item.dedupe_key is not None and voice_row.item.dedupe_key.startswith("voice:")


async def test_an_error_answer_is_not_spoken(tmp_path: Path, fake_llm: FakeOpenAI, tts: FakeSpeech) -> None:
    fake_llm.push_transcript("hello")
    fake_llm.push(http_error(400, "nope"))
    async with running(tmp_path, fake_llm, tts) as r:
        await r.say(voice=True)
    assert len(r.sender.sent) == 1 and r.sender.files == [] and tts.requests == []


async def test_without_tts_a_voice_note_is_answered_in_text_and_voice_says_it_is_not_set_up(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push_transcript("hi")
    fake_llm.push(fake.text("Hi."))
    async with running(tmp_path, fake_llm, None) as r:
        await r.say(voice=True)
        await r.say("/voice on")
    assert r.sender.of("reply") == ["Hi."] and r.sender.files == []
    assert "[tts] is not set up" in r.sender.of("notice")[-1]


async def test_a_long_answer_is_spoken_up_to_its_last_sentence_within_max_chars(
    tmp_path: Path, fake_llm: FakeOpenAI, tts: FakeSpeech
) -> None:
    answer = "First sentence here. " * 10 + "```\nprint('code')\n```\n\nMore words after the code."
    fake_llm.push_transcript("talk")
    fake_llm.push(fake.text(answer))
    async with running(tmp_path, fake_llm, tts, tts={"max_chars": 100}) as r:
        await r.say(voice=True)
    [asked] = tts.requests
    assert asked.input == ("First sentence here. " * 4).strip()  # 84 characters; a fifth ends at 105
    assert r.sender.of("reply") == [answer]


async def test_a_voice_row_a_crash_left_in_flight_is_sent_again_as_a_voice_message(
    tmp_path: Path, fake_llm: FakeOpenAI, tts: FakeSpeech
) -> None:
    async with running(tmp_path, fake_llm, tts) as r:
        blobs = r.bridge.runner.blobs
        digest = await blobs.put(tts.audio)
        file = OutFile(VOICE_FILE, str(blobs.path(digest)), len(tts.audio), "audio/ogg", voice=True)
        row = OutboxItem(
            kind="reply", surface="test", chat_id="owner", text="", state="sending", file=file.to_json()
        )
        await r.bridge.store.add_outbox(row)
        for sent in await r.bridge.delivery.recover():
            await asyncio.wait_for(sent, 5)
    [(item, audio)] = r.sender.files
    assert item.file is not None and item.file.voice and audio == tts.audio


# -- the pieces -------------------------------------------------------------------------------------


def test_speakable_reads_words_and_names_code() -> None:
    said = speakable(
        "# Plan\n\n1. Buy *milk*\n2. Call `Sam`\n\n```sh\nrm -rf /\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |"
    )
    assert said == f"Plan\nBuy milk\nCall Sam\n{CODE_SAID}\na, b\n1, 2"
    assert speakable("```\nonly code\n```") == ""


def test_within_cuts_at_a_sentence_or_a_space() -> None:
    assert within("Short.", 100) == "Short."
    assert within("One two. Three four five. Six seven eight", 30) == "One two. Three four five."
    assert within("abcdefghij klmnop qrstuv", 14) == "abcdefghij"


def test_the_duration_of_ogg_opus_is_read_from_its_last_page() -> None:
    assert opus_seconds(ogg_opus(3.0)) == 3
    assert opus_seconds(ogg_opus(0.3)) == 1
    assert opus_seconds(MP3) is None


def test_a_voice_note_is_heard_only_among_the_messages_being_answered() -> None:
    note = '[{"kind": "audio", "name": "v.ogg", "ref": "r", "voice": true, "transcribed": true}]'
    said = MessageRow(1, "s", "user", "hi", 0.0, media=note)
    answered = MessageRow(2, "s", "assistant", "hello", 0.0)
    typed = MessageRow(3, "s", "user", "again", 0.0)
    assert answers_voice([said])
    assert not answers_voice([said, answered, typed])
    assert answers_voice([answered, typed, said])
    assert wants_voice(None, True) and not wants_voice(None, False)
    assert wants_voice("on", False) and not wants_voice("off", True)


def test_a_voice_file_keeps_its_flag_through_the_outbox() -> None:
    file = OutFile(VOICE_FILE, "/media/ab", 10, "audio/ogg", voice=True)
    assert OutFile.from_json(file.to_json()) == file
    assert OutFile.from_json('{"name": "a", "path": "/p", "size": 1}') == OutFile("a", "/p", 1)
    item = OutboxItem(
        kind="reply", surface="test", chat_id="c", text="", state="pending", file=file.to_json()
    )
    sent = outbound_of(OutboxRow(1, item, None, 0.0)).file
    assert sent is not None and sent.voice


async def test_the_speaker_refuses_audio_that_is_not_ogg_opus(tts: FakeSpeech) -> None:
    tts.push(Reply(body=MP3))
    speaker = Speaker(Settings(tts={"base_url": tts.base_url}).tts)
    try:
        with pytest.raises(MediaError, match="no OGG/Opus audio"):
            await speaker.speak("hello")
        tts.push(http_error(400, "bad voice"))
        with pytest.raises(MediaError, match=r"refused it \(HTTP 400\)"):
            await speaker.speak("hello")
    finally:
        await speaker.aclose()
    assert len(tts.requests) == 2  # a refusal is not asked again


# -- config ---------------------------------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_tts_is_off_by_default_and_on_with_a_base_url() -> None:
    assert not Settings().tts.speaks
    tts = Settings(tts={"base_url": "http://127.0.0.1:8880/v1/"}).tts
    assert tts.speaks and tts.base_url == "http://127.0.0.1:8880/v1"
    assert (tts.model, tts.voice, tts.max_chars) == ("tts-1", "alloy", 4000)
    assert not Settings(tts={"base_url": "http://127.0.0.1:8880/v1", "enabled": False}).tts.speaks


def test_tts_enabled_without_a_server_is_refused_by_its_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(write(tmp_path, "[tts]\nenabled = true\n"))
    assert "tts" in str(info.value) and "base_url" in str(info.value)
    assert "names no speech server" in str(info.value)


def test_a_tts_key_written_in_the_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(write(tmp_path, f'[tts]\nbase_url = "http://127.0.0.1:1/v1"\napi_key = "{KEY}"\n'))
    assert "api_key_env" in str(info.value) and KEY not in str(info.value)


def test_the_tts_key_never_shows_in_check_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bridge.cli.checks import check_config

    config = write(tmp_path, '[tts]\nbase_url = "http://127.0.0.1:1/v1"\napi_key_env = "SPEECH_TEST_KEY"\n')
    settings = load_settings(config)
    assert settings.tts.api_key.get_secret_value() == KEY
    assert check_config(settings, config) == 0
    out = capsys.readouterr()
    assert KEY not in out.out + out.err and KEY not in render_settings(settings)
    assert 'api_key_env = "SPEECH_TEST_KEY"' in out.out


def test_check_config_names_a_tts_key_variable_that_is_not_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from bridge.cli.checks import check_config

    monkeypatch.delenv("SPEECH_TEST_KEY")
    config = write(tmp_path, '[tts]\nbase_url = "http://127.0.0.1:1/v1"\napi_key_env = "SPEECH_TEST_KEY"\n')
    assert check_config(load_settings(config), config) != 0
    assert "tts.api_key_env: the environment variable SPEECH_TEST_KEY is not set" in capsys.readouterr().err
