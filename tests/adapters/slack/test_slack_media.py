"""Slack files: in from url_private with the bot token (stopping at the size limit), out through
files_upload_v2 (files.getUploadURLExternal, the upload, files.completeUploadExternal)."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest

from adapters.slack import media as slack_media
from bridge.config import Settings
from bridge.config.media import SttSettings
from bridge.errors import MediaError
from bridge.events import Attachment
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI, images_in
from tests.adapters.slack.conftest import CHANNEL, MEMBER, OWNER, RigFactory
from tests.fakes.slack_api import FakeSlack, Upload

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
MIB = 1024 * 1024


def vision(settings: Settings) -> None:
    settings.llm.vision = True


async def test_an_image_reaches_a_vision_model_fetched_with_the_bot_token(
    slack_rig: RigFactory, slack: FakeSlack, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("A tiny black square."))
    async with slack_rig(fake_llm, configure=vision, stream=False) as r:
        asked = slack.dm(OWNER, "what is this?", files=(Upload("square.png", "image/png", PNG),))
        [reply] = await r.sent(asked["channel"], 1)
    assert reply["text"] == "A tiny black square."
    assert images_in(fake_llm.requests[0]) == [("image/png", PNG)]
    content = fake_llm.requests[0]["messages"][-1]["content"]
    assert {"type": "text", "text": "[image: square.png]\nwhat is this?"} in content
    assert [d["authorized"] for d in slack.downloads] == [True]


async def test_a_clip_recorded_in_slack_is_transcribed_and_answered(
    slack_rig: RigFactory, slack: FakeSlack, fake_llm: FakeOpenAI
) -> None:
    def stt(settings: Settings) -> None:
        settings.stt = SttSettings(base_url=fake_llm.base_url, model="whisper-test")

    fake_llm.push_transcript("remind me to water the plants")
    fake_llm.push(fake.text("I'll remind you."))
    async with slack_rig(fake_llm, configure=stt, stream=False) as r:
        clip = Upload(
            "audio_message.m4a", "audio/mp4", b"\x00\x00\x00\x18ftypM4A " + b"\x00" * 64, voice=True
        )
        asked = slack.dm(OWNER, "", files=(clip,))
        [reply] = await r.sent(asked["channel"], 1)
    assert reply["text"] == "I'll remind you."
    assert fake_llm.last_transcription["data"] == clip.data
    assert fake_llm.requests[0]["messages"][-1]["content"] == (
        "[voice message, transcribed]\nremind me to water the plants"
    )


async def test_a_file_past_the_limit_is_not_read_past_it_and_the_user_is_told(
    slack_rig: RigFactory, slack: FakeSlack, fake_llm: FakeOpenAI
) -> None:
    def small_limit(settings: Settings) -> None:
        settings.llm.vision = True
        settings.media.max_bytes = MIB

    fake_llm.push(fake.text("Only words, then."))
    async with slack_rig(fake_llm, configure=small_limit, stream=False) as r:
        # It claims to be small and streams 50 MB: reading stops one chunk past the limit.
        liar = Upload("big.png", "image/png", PNG, size=len(PNG), served=50 * MIB)
        asked = slack.dm(OWNER, "look", files=(liar,))
        messages = await r.sent(asked["channel"], 2)
        await slack.wait_for(lambda: "sent" in slack.downloads[0])
    assert any("big.png" in m["text"] and "too large" in m["text"] for m in messages)
    assert slack.downloads[0]["sent"] < 25 * MIB


async def test_send_file_uploads_a_workspace_file_into_the_thread_with_its_caption(
    slack_rig: RigFactory, slack: FakeSlack, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    (workspace / "report.csv").write_text("a,b\n1,2\n")
    fake_llm.push(
        fake.tool_call("load_tool_group", {"group_name": "files"}),
        fake.tool_call("send_file", {"path": "report.csv", "caption": "Here it is <!here>"}),
        fake.text("Sent."),
    )
    async with slack_rig(fake_llm, stream=False) as r:
        parent = slack.post(CHANNEL, MEMBER, "the numbers, please")
        slack.post(CHANNEL, OWNER, f"{r.mention()} send me the report", thread_ts=parent["ts"])
        messages = await r.sent(CHANNEL, 3, thread_ts=parent["ts"])
    [with_file] = [m for m in messages if m.get("files")]
    [(file_id, upload)] = slack.uploads.items()
    assert upload["filename"] == "report.csv" and slack.file_bytes(file_id) == b"a,b\n1,2\n"
    assert with_file["text"] == "Here it is &lt;!here&gt;"
    assert with_file["files"][0]["id"] == file_id
    assert with_file["_request"]["thread_ts"] == parent["ts"]
    result = json.loads(fake_llm.requests[2]["messages"][-1]["content"])
    assert result["status"] == "sent"


async def test_a_download_without_the_files_read_scope_is_named(slack: FakeSlack) -> None:
    event = slack.dm_event(OWNER, "", files=(Upload("a.png", "image/png", PNG),))
    url = event["files"][0]["url_private_download"]
    async with aiohttp.ClientSession() as session:
        # Slack answers a file URL it won't serve with its sign-in page, as HTTP 200.
        with pytest.raises(MediaError, match="files:read"):
            await slack_media.download(session, "xoxb-not-this-app", Attachment("image", "a.png", url), MIB)
        assert (
            await slack_media.download(session, slack.bot_token, Attachment("image", "a.png", url), MIB)
            == PNG
        )
