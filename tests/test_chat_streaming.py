"""`bridge chat` prints the answer as it streams: each reply once, on its own line, tool activity
between segments, a text-mode tool block never printed, and no stream where [llm] stream is off."""

from __future__ import annotations

from pathlib import Path

from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from tests.test_cli import assert_no_traceback, bridge, write_config

REPLY = "bridge › "


def replies(stdout: str) -> list[str]:
    return [line.removeprefix(REPLY) for line in stdout.splitlines() if line.startswith(REPLY)]


async def test_chat_streams_each_answer_once_with_tool_activity_between(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.paced(fake.text("A streamed hello, piece by piece."), 0.01),
        fake.tool_call("get_current_time", {}, content="Checking the clock."),
        fake.paced(fake.text("It is noon."), 0.01),
    )
    config = write_config(tmp_path, fake_llm.base_url, max_retries=0)
    done = await bridge("chat", "--config", str(config), cwd=tmp_path, lines=("hello", "time?"))
    assert done.code == 0, done.output
    assert_no_traceback(done)
    assert replies(done.stdout) == ["A streamed hello, piece by piece.", "Checking the clock.", "It is noon."]
    lines = done.stdout.splitlines()
    activity = next(i for i, line in enumerate(lines) if "get_current_time" in line)
    assert lines[activity - 1] == REPLY + "Checking the clock."
    assert lines[activity + 1] == REPLY + "It is noon."
    assert all(r["stream"] is True for r in fake_llm.requests)


async def test_chat_in_text_mode_never_prints_a_tool_block(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    block = '```tool\n{"name": "get_current_time", "arguments": {}}\n```'
    fake_llm.push(fake.text(block), fake.text("It is noon."))
    config = write_config(tmp_path, fake_llm.base_url, max_retries=0, tool_mode="text")
    done = await bridge("chat", "--config", str(config), cwd=tmp_path, lines=("time?",))
    assert done.code == 0, done.output
    assert "```" not in done.stdout and '"name"' not in done.stdout
    assert replies(done.stdout) == ["It is noon."]


async def test_chat_with_stream_off_asks_for_whole_answers(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(fake.text("all at once"))
    config = write_config(tmp_path, fake_llm.base_url, max_retries=0, stream=False)
    done = await bridge("chat", "--config", str(config), cwd=tmp_path, lines=("hello",))
    assert done.code == 0, done.output
    assert replies(done.stdout) == ["all at once"]
    assert "stream" not in fake_llm.requests[0]
