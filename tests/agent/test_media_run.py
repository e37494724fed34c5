"""A run with attachments: images go only to a profile that takes them, and a failure to read them
costs the images, never the answer."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bridge.errors import StoreError
from bridge.events import Attachment
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI, images_in
from tests.harness import Harness, RecordingSender, running_bridge

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
PHOTO = Attachment("image", "chart.png", "ref-chart", "image/png", len(PNG))


@dataclass
class FilesSender(RecordingSender):
    """The harness's sender, on a platform that keeps files by ref."""

    files: dict[str, bytes] = field(default_factory=lambda: {"ref-chart": PNG})
    downloads: list[str] = field(default_factory=list)

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        self.downloads.append(attachment.ref)
        return self.files[attachment.ref]


async def say_with_photo(h: Harness, text: str) -> FilesSender:
    """Send a message with the photo from a platform that has it (it replaces the harness's sender)."""
    sender = FilesSender()
    h.bridge.add_sender(sender)
    done = await h.bridge.handle(dataclasses.replace(h.inbound(text), attachments=(PHOTO,)))
    assert done is not None
    await asyncio.wait_for(done, 10)
    return sender


async def test_a_fallback_profile_without_vision_gets_the_image_by_name_only(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    async with FakeOpenAI() as small:
        fake_llm.push(fake.http_error(500, "down"))
        small.push(fake.text("From the caption: a chart."))
        llm = {
            "vision": True,
            "fallback": "small",
            "profiles": {"small": {"model": "small", "base_url": small.base_url}},
        }
        async with running_bridge(tmp_path, fake_llm, llm=llm) as h:
            await say_with_photo(h, "what does it show?")
    assert images_in(fake_llm.requests[0]) == [("image/png", PNG)]
    asked = small.requests[0]["messages"][-1]["content"]
    assert asked == "[image: chart.png]\nwhat does it show?" and images_in(small.requests[0]) == []


async def test_a_store_that_fails_while_attachments_are_read_still_gets_an_answer(
    tmp_path: Path, fake_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_llm.push(fake.text("Answered anyway."))
    async with running_bridge(tmp_path, fake_llm, llm={"vision": True}) as h:

        async def broken(*args: object) -> None:
            raise StoreError("disk full")

        monkeypatch.setattr(h.bridge.store, "set_user_message", broken)
        sender = await say_with_photo(h, "and this?")
        runs = await h.bridge.store.list_runs(session_key="main", limit=1)
    assert sender.of("reply") == ["Answered anyway."] and sender.downloads == ["ref-chart"]
    assert [run.status for run, _ in runs] == ["ok"]
    # Named, not shown: the read was not stored, so this run does not rely on it either.
    assert fake_llm.requests[0]["messages"][-1]["content"] == "[image: chart.png]\nand this?"
