"""Matrix media against a real Synapse: images in through the authenticated media API (stopping at
the size limit), files out as an upload and then an image, audio or file message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bridge.config import Settings
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI, images_in
from tests.adapters.matrix.conftest import Person, RigFactory
from tests.adapters.matrix.test_matrix import direct_room

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
KIB = 1024


def vision(settings: Settings) -> None:
    settings.llm.vision = True


async def send_image(person: Person, room: str, data: bytes, caption: str, name: str = "square.png") -> str:
    url = await person.upload(data, "image/png", name)
    content = {
        "msgtype": "m.image",
        "body": caption or name,
        "filename": name,
        "url": url,
        "info": {"mimetype": "image/png", "size": len(data)},
    }
    return await person.send_event(room, "m.room.message", content)


async def test_an_image_reaches_a_vision_model_with_its_caption(
    matrix_rig: RigFactory, people: Any, fake_llm: FakeOpenAI
) -> None:
    ann = await people("ann")
    fake_llm.push(fake.text("A tiny black square."))
    async with matrix_rig(fake_llm, owners=[f"matrix:{ann.user_id}"], configure=vision, stream=False) as r:
        room = await direct_room(r, ann)
        await send_image(ann, room, PNG, "what is this?")
        [reply] = await r.sent(ann, room, 1)
    assert reply.body == "A tiny black square."
    assert images_in(fake_llm.requests[0]) == [("image/png", PNG)]
    content = fake_llm.requests[0]["messages"][-1]["content"]
    assert {"type": "text", "text": "[image: square.png]\nwhat is this?"} in content


async def test_an_image_past_the_size_limit_is_not_fetched_whole_and_the_user_is_told(
    matrix_rig: RigFactory, people: Any, fake_llm: FakeOpenAI
) -> None:
    def small_limit(settings: Settings) -> None:
        settings.llm.vision = True
        settings.media.max_bytes = 64 * KIB

    ann = await people("ann")
    big = PNG + b"\x01" * (300 * KIB)
    fake_llm.push(fake.text("Only words, then."))
    async with matrix_rig(
        fake_llm, owners=[f"matrix:{ann.user_id}"], configure=small_limit, stream=False
    ) as r:
        room = await direct_room(r, ann)
        # It claims to be small: the download stops one chunk past the limit all the same.
        url = await ann.upload(big, "image/png", "big.png")
        content = {
            "msgtype": "m.image",
            "body": "big.png",
            "url": url,
            "info": {"mimetype": "image/png", "size": 10},
        }
        await ann.send_event(room, "m.room.message", content)
        messages = await r.sent(ann, room, 2)
    assert any("big.png" in m.body and "too large" in m.body for m in messages)
    assert images_in(fake_llm.requests[0]) == []


async def test_send_file_uploads_a_workspace_file_and_sends_it_with_its_caption(
    matrix_rig: RigFactory, people: Any, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    (workspace / "report.csv").write_text("a,b\n1,2\n")
    (workspace / "chart.png").write_bytes(PNG)
    fake_llm.push(
        fake.tool_call("load_tool_group", {"group_name": "files"}),
        fake.tool_call("send_file", {"path": "report.csv", "caption": "Here it is, @room"}),
        fake.tool_call("send_file", {"path": "chart.png"}),
        fake.text("Sent."),
    )
    ann = await people("ann")
    async with matrix_rig(fake_llm, owners=[f"matrix:{ann.user_id}"], stream=False) as r:
        room = await direct_room(r, ann)
        await ann.say(room, "send me the report")
        messages = await r.sent(ann, room, 4)
        files = [m for m in messages if "url" in m.content]
        report, chart = files
        data = await ann.download(report.content["url"])
    assert report.content["msgtype"] == "m.file" and report.content["filename"] == "report.csv"
    assert report.body == "Here it is, @room" and report.content["m.mentions"] == {}
    assert data == b"a,b\n1,2\n"
    assert chart.content["msgtype"] == "m.image" and chart.content["info"]["mimetype"] == "image/png"
    result = json.loads(fake_llm.requests[2]["messages"][-1]["content"])
    assert result["status"] == "sent"
