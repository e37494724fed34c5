"""`bridge chat` with files: /attach sends a local photo or voice note, and send_file prints where the
file it sent is kept."""

from __future__ import annotations

import json
from pathlib import Path

from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI, images_in
from tests.test_chat_streaming import replies
from tests.test_cli import assert_no_traceback, bridge, write_config

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


async def test_chat_attach_sends_a_local_photo_to_a_vision_model(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    (tmp_path / "my cat.png").write_bytes(PNG)
    fake_llm.push(fake.text("A cat, I think."))
    config = write_config(tmp_path, fake_llm.base_url, max_retries=0, vision=True)
    line = f'/attach "{tmp_path / "my cat.png"}" what is this?'
    done = await bridge("chat", "--config", str(config), cwd=tmp_path, lines=(line,))
    assert done.code == 0, done.output
    assert_no_traceback(done)
    assert replies(done.stdout) == ["A cat, I think."]
    assert images_in(fake_llm.requests[0]) == [("image/png", PNG)]
    text = fake_llm.requests[0]["messages"][-1]["content"][0]["text"]
    assert text == "[image: my cat.png]\nwhat is this?"


async def test_chat_attach_of_a_missing_file_says_so_and_sends_nothing(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    config = write_config(tmp_path, fake_llm.base_url, max_retries=0)
    done = await bridge(
        "chat", "--config", str(config), cwd=tmp_path, lines=("/attach nope.png hi", "/attach")
    )
    assert done.code == 0, done.output
    assert "No file at" in done.stdout and "Usage: /attach PATH" in done.stdout
    assert fake_llm.requests == []


async def test_chat_attach_of_a_voice_note_is_transcribed_and_answered(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    (tmp_path / "note.ogg").write_bytes(b"OggS" + b"\x00" * 100)
    fake_llm.push_transcript("what day is it")
    fake_llm.push(fake.text("Thursday."))
    config = write_config(tmp_path, fake_llm.base_url, max_retries=0)
    config.write_text(
        config.read_text() + f"[stt]\nbase_url = {json.dumps(fake_llm.base_url)}\n", encoding="utf-8"
    )
    done = await bridge(
        "chat", "--config", str(config), cwd=tmp_path, lines=(f"/attach {tmp_path / 'note.ogg'}",)
    )
    assert done.code == 0, done.output
    assert replies(done.stdout) == ["Thursday."]
    assert fake_llm.requests[0]["messages"][-1]["content"] == "[audio: note.ogg, transcribed]\nwhat day is it"
