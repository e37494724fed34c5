"""Limits while reading (issue 30, break 10): an attachment is streamed and reading stops past
[media] max_bytes whatever the platform announced, and a transcript is cut at [stt]
max_transcript_chars. Through the real adapters against the fake Telegram and Discord servers."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from adapters.console import ConsoleAdapter
from adapters.console.files import read_local
from bridge.config import Settings
from bridge.config.media import SttSettings
from bridge.errors import MediaError
from bridge.events import Attachment, loads
from bridge.store.base import MessageRow
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI, images_in
from devkit.fakes.telegram_api import MB, FakeTelegram
from tests.adapters.conftest import DISCORD_OWNER as DC_OWNER
from tests.adapters.conftest import OWNER, RigFactory, TelegramRig
from tests.fakes.discord_api import FakeDiscord, Upload

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
# A body far past the limit: read whole, it would be in the bot's memory at once.
HUGE = 50 * MB
# Small enough that an image at the limit, sent to the model as base64, stays a modest request.
LIMIT = 256 * 1024
LIMIT_NOTICE = "too large: over the limit of 256 KB"


def limit_and_vision(settings: Settings) -> None:
    settings.llm.vision = True
    settings.media.max_bytes = LIMIT


def padded(size: int) -> bytes:
    """What the fakes serve for PNG streamed to `size` bytes: the data, then zero bytes."""
    return PNG + bytes(size - len(PNG))


def blobs_in(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file()]


async def user_rows(r: TelegramRig) -> list[MessageRow]:
    session = await r.bridge.store.active_session("main")
    assert session is not None
    return [row for row in await r.bridge.store.history(session.id, 50) if row.kind == "user"]


async def test_a_telegram_file_announced_small_but_streamed_huge_stops_at_the_limit(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("A small picture."), fake.text("About the caption."))
    async with rig(fake_llm, configure=limit_and_vision) as r:
        # Honest, and under the limit: streamed without a Content-Length, it is still read whole.
        honest = tg.dm(OWNER, None, document=("small.png", "image/png", PNG), caption="first")
        tg.serve(honest["document"]["file_id"], size=LIMIT // 2, chunked=True)
        await r.sent_to(OWNER, 1)
        # getFile says 1 KB; the download streams 50 MB with no Content-Length to contradict it.
        lying = tg.dm(OWNER, None, document=("big.png", "image/png", PNG), file_size=1024, caption="second")
        path = tg.serve(lying["document"]["file_id"], size=HUGE, chunked=True)
        messages = await r.sent_to(OWNER, 3)
        await tg.wait_for(lambda: path in tg.bytes_served)
        first, second = await user_rows(r)
        blobs = blobs_in(r.bridge.runner.blobs.root)
    # The bot stopped reading and closed the connection: the server could not write the rest.
    assert tg.bytes_served[path] < HUGE // 2, tg.bytes_served
    assert images_in(fake_llm.requests[0]) == [("image/png", padded(LIMIT // 2))]
    assert f"⚠️ I couldn't fetch big.png: {LIMIT_NOTICE}." in [m["text"] for m in messages]
    [kept] = loads(first.media)
    [refused] = loads(second.media)
    assert kept.sha256 is not None and blobs == [r.bridge.runner.blobs.path(kept.sha256)]
    # The message stays, with its caption; the attachment is named with why it is missing.
    assert second.content == "second" and refused.sha256 is None and refused.problem == LIMIT_NOTICE
    assert f"[image: big.png ({LIMIT_NOTICE})]" in str(fake_llm.requests[1]["messages"][-1]["content"])


async def test_a_discord_attachment_past_the_limit_stops_there_with_or_without_a_content_length(
    discord_rig: RigFactory, dc: FakeDiscord, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("One picture came through."))
    attachments = [
        Upload("small.png", "image/png", PNG, served=LIMIT, chunked=True),  # exactly the limit
        Upload("lies.png", "image/png", PNG, size=1024, served=HUGE),  # Content-Length says 50 MB
        Upload("drip.png", "image/png", PNG, size=1024, served=HUGE, chunked=True),  # no length at all
    ]
    async with discord_rig(fake_llm, configure=limit_and_vision) as r:
        dm = dc.dm(DC_OWNER, "look", attachments=attachments)
        messages = await r.bot_sent(dm["channel_id"], 3)
        await dc.wait_for(lambda: len([d for d in dc.downloads if d.get("done")]) == 3)
        main = await r.bridge.store.active_session("main")
        assert main is not None
        [asked] = [row for row in await r.bridge.store.history(main.id, 10) if row.kind == "user"]
        blobs = blobs_in(r.bridge.runner.blobs.root)
    sent = {d["filename"]: d["sent"] for d in dc.downloads}
    assert sent["small.png"] == LIMIT and sent["lies.png"] < HUGE // 2 and sent["drip.png"] < HUGE // 2
    texts = [m["content"] for m in messages]
    for name in ("lies.png", "drip.png"):
        assert f"⚠️ I couldn't fetch {name}: {LIMIT_NOTICE}." in texts
    assert images_in(fake_llm.requests[0]) == [("image/png", padded(LIMIT))]
    small, lies, drip = loads(asked.media)
    assert small.sha256 is not None and blobs == [r.bridge.runner.blobs.path(small.sha256)]
    assert lies.problem == drip.problem == LIMIT_NOTICE and asked.content == "look"


async def test_a_transcript_of_megabytes_is_cut_and_marked_before_the_model_sees_it(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    def stt(settings: Settings) -> None:
        settings.stt = SttSettings(base_url=fake_llm.base_url, model="whisper-test")

    words = "blah " * 400_000  # 2 MB of text from a server gone wrong
    fake_llm.push_transcript(words)
    fake_llm.push(fake.text("That was long."))
    async with rig(fake_llm, configure=stt) as r:
        tg.dm(OWNER, None, voice=b"OggS" + b"\x00" * 100)
        await r.sent_to(OWNER, 1)
        [asked] = await user_rows(r)
    content = fake_llm.requests[0]["messages"][-1]["content"]
    assert isinstance(content, str) and content.endswith("\n[transcript cut at 20,000 characters]")
    assert len(content) < 20_000 + 200 and "blah blah" in content
    assert asked.content.endswith("[transcript cut at 20,000 characters]")
    assert len(asked.content) < 20_000 + 200


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
async def test_console_attach_reads_at_most_the_limit_whatever_the_file_size_says(tmp_path: Path) -> None:
    # /proc's files report a size of 0 and still have content: the size said nothing of the length.
    proc = Attachment("file", "maps", "/proc/self/maps", size=0)
    with pytest.raises(MediaError, match="too large: over the limit of 100 bytes"):
        await ConsoleAdapter(stdin=io.StringIO(), stdout=io.StringIO()).download(proc, 100)
    honest = tmp_path / "note.txt"
    honest.write_bytes(b"x" * 100)
    assert read_local(Attachment("file", "note.txt", str(honest)), 100) == b"x" * 100
