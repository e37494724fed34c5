"""Discord with media: answers stream into one message, attachments reach the model, files go out."""

from __future__ import annotations

import json
import time
from pathlib import Path

from bridge.config import Settings
from bridge.config.media import SttSettings
from bridge.events import loads
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI, images_in
from tests.adapters.conftest import CHANNEL, RigFactory
from tests.adapters.conftest import DISCORD_OWNER as OWNER
from tests.fakes.discord_api import FakeDiscord, Upload

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def vision(settings: Settings) -> None:
    settings.llm.vision = True


async def test_an_answer_streams_into_one_discord_message_that_ends_as_the_stored_answer(
    discord_rig: RigFactory, dc: FakeDiscord, fake_llm: FakeOpenAI
) -> None:
    answer = "An answer that arrives a few characters at a time and ends **whole**."
    fake_llm.push(fake.paced(fake.text(answer), 0.04))
    async with discord_rig(fake_llm) as r:
        r.adapter.min_edit_interval_s = 0.3
        started = time.monotonic()
        dm = dc.dm(OWNER, "tell me")
        [message] = await r.bot_sent(dm["channel_id"], 1)
        took = time.monotonic() - started
        main = await r.bridge.store.active_session("main")
        assert main is not None
        stored = await r.bridge.store.history(main.id, 10)
    assert message["content"] == answer == stored[-1].content
    edits = [e for e in dc.edits if e["message_id"] == message["id"]]
    assert 2 <= len(edits) <= took / 0.3 + 2


async def test_a_discord_image_reaches_a_vision_model_as_an_image_part(
    discord_rig: RigFactory, dc: FakeDiscord, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("A tiny black square."))
    async with discord_rig(fake_llm, configure=vision) as r:
        dm = dc.dm(OWNER, "what is this?", attachments=[Upload("square.png", "image/png", PNG)])
        [reply] = await r.bot_sent(dm["channel_id"], 1)
        main = await r.bridge.store.active_session("main")
        assert main is not None
        [asked] = [row for row in await r.bridge.store.history(main.id, 10) if row.kind == "user"]
    assert reply["content"] == "A tiny black square."
    assert images_in(fake_llm.requests[0]) == [("image/png", PNG)]
    content = fake_llm.requests[0]["messages"][-1]["content"]
    assert {"type": "text", "text": "[image: square.png]\nwhat is this?"} in content
    [image] = loads(asked.media)
    assert image.sha256 is not None and image.problem is None and len(dc.downloads) == 1


async def test_a_discord_voice_message_is_transcribed_and_answered(
    discord_rig: RigFactory, dc: FakeDiscord, fake_llm: FakeOpenAI
) -> None:
    def stt(settings: Settings) -> None:
        settings.stt = SttSettings(base_url=fake_llm.base_url, model="whisper-test")

    fake_llm.push_transcript("remind me to water the plants")
    fake_llm.push(fake.text("I'll remind you."))
    async with discord_rig(fake_llm, configure=stt) as r:
        voice = Upload("voice-message.ogg", "audio/ogg", b"OggS" + b"\x00" * 100, voice=True)
        dm = dc.dm(OWNER, "", attachments=[voice])
        [reply] = await r.bot_sent(dm["channel_id"], 1)
    assert reply["content"] == "I'll remind you."
    sent = fake_llm.last_transcription
    assert sent["model"] == "whisper-test" and sent["data"] == voice.data
    asked = fake_llm.requests[0]["messages"][-1]["content"]
    assert asked == "[voice message, transcribed]\nremind me to water the plants"


async def test_send_file_posts_a_workspace_file_to_the_discord_channel(
    discord_rig: RigFactory, dc: FakeDiscord, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    (workspace / "report.csv").write_text("a,b\n1,2\n")
    fake_llm.push(
        fake.tool_call("load_tool_group", {"group_name": "files"}),
        fake.tool_call("send_file", {"path": "report.csv", "caption": "Here it is"}),
        fake.text("Sent."),
    )
    async with discord_rig(fake_llm) as r:
        dc.post(CHANNEL, OWNER, f"<@{dc.bot_id}> send me the report")
        messages = await r.bot_sent(CHANNEL, 3)
    [with_file] = [m for m in messages if m.get("attachments")]
    assert with_file["content"] == "Here it is"
    assert dc.files_of(with_file["id"])[0][::2] == ("report.csv", b"a,b\n1,2\n")
    result = json.loads(fake_llm.requests[2]["messages"][-1]["content"])
    assert result["status"] == "sent"


async def test_send_file_past_discords_upload_limit_is_refused_with_a_clear_error(
    discord_rig: RigFactory, dc: FakeDiscord, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    (workspace / "big.bin").write_bytes(b"x" * 4096)
    fake_llm.push(
        fake.tool_call("load_tool_group", {"group_name": "files"}),
        fake.tool_call("send_file", {"path": "big.bin"}),
        fake.text("Too big, sorry."),
    )
    async with discord_rig(fake_llm) as r:
        r.adapter.max_upload_bytes = 1024
        dc.post(CHANNEL, OWNER, f"<@{dc.bot_id}> send big.bin")
        messages = await r.bot_sent(CHANNEL, 2)
    assert not any(m.get("attachments") for m in messages)
    error = fake_llm.requests[2]["messages"][-1]["content"]
    assert "too_large" in error and "discord takes files up to" in error


async def test_a_cdn_failure_is_retried_and_an_expired_link_is_named_and_the_user_told(
    discord_rig: RigFactory, dc: FakeDiscord, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("Seen."), fake.text("Not seen."))
    async with discord_rig(fake_llm, configure=vision) as r:
        dc.fail_next("GET /attachments/{}/{}/{}", "503")
        dm = dc.dm(OWNER, "first", attachments=[Upload("a.png", "image/png", PNG)])
        await r.bot_sent(dm["channel_id"], 1)
        # A link whose signature expired: the CDN answers 404, as Discord's does after a day.
        expired = {
            "id": "999",
            "filename": "b.png",
            "size": len(PNG),
            "content_type": "image/png",
            "url": f"{dc.origin}/attachments/{dm['channel_id']}/999/b.png?ex=0&is=0&hm=00&",
            "proxy_url": f"{dc.origin}/attachments/{dm['channel_id']}/999/b.png",
        }
        dc.dm(OWNER, "second", attachments=[expired])
        messages = await r.bot_sent(dm["channel_id"], 3)
    assert images_in(fake_llm.requests[0]) == [("image/png", PNG)]
    assert any(
        m["content"] == "⚠️ I couldn't fetch b.png: Discord no longer has it (the link expired)."
        for m in messages
    )
    assert fake_llm.requests[1]["messages"][-1]["content"].startswith(
        "[image: b.png (Discord no longer has it"
    )
