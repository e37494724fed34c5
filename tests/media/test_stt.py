"""Transcriber: voice posted as multipart to an OpenAI-compatible /audio/transcriptions, with retries
for a busy server and a short reason when there is no transcript."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from bridge.config.media import SttSettings
from bridge.errors import MediaError
from bridge.media import stt
from bridge.media.stt import Transcriber
from bridge.retry import Backoff
from devkit.fakes.loopback import closed_port
from devkit.fakes.openai_server import FakeOpenAI, Reply, delay, http_error
from tests.media.samples import VOICE


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stt, "BACKOFF", Backoff(attempts=3, base=0.0, cap=0.0))


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


MakeTranscriber = Callable[..., Transcriber]


@pytest.fixture
async def make(fake: FakeOpenAI) -> AsyncIterator[MakeTranscriber]:
    made: list[Transcriber] = []

    def build(**fields: Any) -> Transcriber:
        transcriber = Transcriber(SttSettings(**{"base_url": fake.base_url, **fields}))
        made.append(transcriber)
        return transcriber

    yield build
    for transcriber in made:
        await transcriber.aclose()


async def failure(transcriber: Transcriber) -> str:
    with pytest.raises(MediaError) as caught:
        await transcriber.transcribe(VOICE, "voice.ogg", "audio/ogg")
    return str(caught.value)


async def test_the_transcript_comes_back_stripped(fake: FakeOpenAI, make: MakeTranscriber) -> None:
    fake.push_transcript("  hello there \n")
    assert await make().transcribe(VOICE, "voice.ogg", "audio/ogg") == "hello there"


async def test_the_audio_goes_as_a_multipart_file_with_the_model(
    fake: FakeOpenAI, make: MakeTranscriber
) -> None:
    await make(model="whisper-large").transcribe(VOICE, "note.ogg", "audio/ogg")

    [sent] = fake.transcriptions
    assert sent["model"] == "whisper-large"
    assert (sent["filename"], sent["content_type"], sent["data"]) == ("note.ogg", "audio/ogg", VOICE)
    assert sent["response_format"] == "json"
    assert fake.rejections == []


async def test_an_unknown_mime_type_goes_as_octet_stream(fake: FakeOpenAI, make: MakeTranscriber) -> None:
    await make().transcribe(VOICE, "voice.ogg", None)
    assert fake.last_transcription["content_type"] == "application/octet-stream"


async def test_the_api_key_is_sent_as_a_bearer_token(fake: FakeOpenAI, make: MakeTranscriber) -> None:
    await make(api_key="sk-stt-secret").transcribe(VOICE, "voice.ogg", "audio/ogg")
    assert fake.last_transcription["authorization"] == "Bearer sk-stt-secret"


async def test_without_an_api_key_no_authorization_is_sent(fake: FakeOpenAI, make: MakeTranscriber) -> None:
    await make().transcribe(VOICE, "voice.ogg", "audio/ogg")
    assert fake.last_transcription["authorization"] is None


async def test_the_language_is_passed_when_set(fake: FakeOpenAI, make: MakeTranscriber) -> None:
    await make(language="de").transcribe(VOICE, "voice.ogg", "audio/ogg")
    await make().transcribe(VOICE, "voice.ogg", "audio/ogg")
    assert [t["language"] for t in fake.transcriptions] == ["de", None]


async def test_a_base_url_with_a_trailing_slash_reaches_the_same_endpoint(
    fake: FakeOpenAI, make: MakeTranscriber
) -> None:
    fake.push_transcript("ok")
    assert await make(base_url=fake.base_url + "/").transcribe(VOICE, "voice.ogg", "audio/ogg") == "ok"


async def test_a_server_error_then_success_is_retried(fake: FakeOpenAI, make: MakeTranscriber) -> None:
    fake.push_transcript(http_error(500, "boom"), "after all")

    assert await make().transcribe(VOICE, "voice.ogg", "audio/ogg") == "after all"
    assert len(fake.transcriptions) == 2
    assert fake.transcriptions[0]["data"] == fake.transcriptions[1]["data"] == VOICE


async def test_rate_limiting_is_retried(fake: FakeOpenAI, make: MakeTranscriber) -> None:
    fake.push_transcript(http_error(429, "slow down"), http_error(503, "busy"), "made it")
    assert await make().transcribe(VOICE, "voice.ogg", "audio/ogg") == "made it"
    assert len(fake.transcriptions) == 3


async def test_server_errors_until_the_tries_run_out_are_a_media_error(
    fake: FakeOpenAI, make: MakeTranscriber
) -> None:
    fake.push_transcript(*(http_error(502, "bad gateway") for _ in range(3)), "never asked for")

    assert await failure(make()) == "the transcription server failed: HTTP 502"
    assert len(fake.transcriptions) == 3


async def test_a_refusal_is_not_retried(fake: FakeOpenAI, make: MakeTranscriber) -> None:
    fake.push_transcript(http_error(400, "bad file"), "never asked for")

    assert await failure(make()) == "the transcription server refused it (HTTP 400)"
    assert len(fake.transcriptions) == 1


async def test_a_wrong_key_is_a_refusal_that_does_not_show_the_key(
    fake: FakeOpenAI, make: MakeTranscriber
) -> None:
    fake.push_transcript(http_error(401, "invalid api key sk-stt-wrong"))

    reason = await failure(make(api_key="sk-stt-wrong"))

    assert reason == "the transcription server refused it (HTTP 401)"
    assert "sk-stt-wrong" not in reason


async def test_a_server_that_cannot_be_reached_is_a_media_error() -> None:
    transcriber = Transcriber(SttSettings(base_url=f"http://127.0.0.1:{closed_port()}/v1"))
    try:
        reason = await failure(transcriber)
    finally:
        await transcriber.aclose()
    assert reason.startswith("the transcription server failed: it could not be reached (")


async def test_a_server_that_does_not_answer_in_time_is_a_media_error(
    fake: FakeOpenAI, make: MakeTranscriber, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stt, "BACKOFF", Backoff(attempts=1, base=0.0))
    fake.push_transcript(delay(30, Reply(body={"text": "too late"})))

    assert await failure(make(timeout_s=0.2)) == "the transcription server failed: it timed out"


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[1, 2]", b'{"text": 3}', b'{"transcript": "hi"}', b"null"],
)
async def test_an_answer_without_text_is_a_media_error(
    fake: FakeOpenAI, make: MakeTranscriber, body: bytes
) -> None:
    fake.push_transcript(Reply(body=body))
    assert await failure(make()) == "the transcription server sent no text"
    assert len(fake.transcriptions) == 1


def test_a_transcriber_needs_a_base_url() -> None:
    with pytest.raises(ValueError, match="base_url"):
        Transcriber(SttSettings())


async def test_a_transcript_past_the_cap_is_cut_and_marked(fake: FakeOpenAI, make: MakeTranscriber) -> None:
    fake.push_transcript("a" * 150, "b" * 100)
    transcriber = make(max_transcript_chars=100)
    cut = await transcriber.transcribe(VOICE, "voice.ogg", "audio/ogg")
    whole = await transcriber.transcribe(VOICE, "voice.ogg", "audio/ogg")
    assert cut == "a" * 100 + "\n[transcript cut at 100 characters]"
    assert whole == "b" * 100


async def test_an_answer_past_the_body_bound_keeps_what_it_has_of_the_text(
    fake: FakeOpenAI, make: MakeTranscriber
) -> None:
    # 12 bytes of JSON per character (a surrogate pair, escaped): the body passes its bound, 100 *
    # 12 + 64 KB, long before it ends, and what was read of the text is still the start of it.
    escaped = b"\\ud83d\\ude00" * 200_000
    fake.push_transcript(Reply(body=b'{"text": "' + escaped + b'"}'))
    text = await make(max_transcript_chars=100).transcribe(VOICE, "voice.ogg", "audio/ogg")
    assert text == "\U0001f600" * 100 + "\n[transcript cut at 100 characters]"


async def test_an_endless_answer_without_text_is_read_only_up_to_its_bound(
    fake: FakeOpenAI, make: MakeTranscriber
) -> None:
    fake.push_transcript(Reply(body=b"[" + b" " * (8 * 1024 * 1024)))
    assert await failure(make(max_transcript_chars=100)) == (
        "the transcription server sent more than 65.2 KB"
    )
