"""docs/adapters.md: the minimal adapter of the guide, run as written against a Bridge and the fake model."""

from __future__ import annotations

import asyncio
import importlib.util
import re
from pathlib import Path
from types import ModuleType

from bridge.app import Bridge
from bridge.gateway.lifecycle import GuardedAdapter
from bridge.platform import Adapter, Sender
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from tests.harness import make_settings

GUIDE = Path(__file__).parent.parent.parent / "docs" / "adapters.md"


def guide_module(tmp_path: Path) -> ModuleType:
    """The first Python block under "A minimal adapter", imported as the module it says it is."""
    section = GUIDE.read_text(encoding="utf-8").split("## A minimal adapter", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "docs/adapters.md lost its minimal adapter"
    path = tmp_path / "bridge_linechat.py"
    path.write_text(match.group(1), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("bridge_linechat", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_the_guides_adapter_answers_a_line_and_splits_a_long_answer_at_its_text_limit(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    cls = guide_module(tmp_path).LineChatAdapter
    assert issubclass(cls, Adapter) and cls.surface == "linechat"
    long_answer = " ".join(["word"] * 600)  # 2999 characters: two lines at text_limit 2000
    fake_llm.push(fake.text("hello from the bridge"), fake.text(long_answer))
    settings = make_settings(tmp_path, fake_llm.base_url, owners=["linechat:1"])
    async with Bridge(settings) as bridge:
        adapter = GuardedAdapter(cls(port=0))
        bridge.add_sender(adapter)
        await adapter.start(bridge.handle)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", adapter.adapter.port)  # type: ignore[attr-defined]
            writer.write(b"hi there\n")
            assert await asyncio.wait_for(reader.readline(), 10) == b"hello from the bridge\n"
            writer.write(b"tell me more\n")
            first = await asyncio.wait_for(reader.readline(), 10)
            second = await asyncio.wait_for(reader.readline(), 10)
            assert len(first) <= 2001 and (first + second).decode().split() == long_answer.split()
            writer.close()
            await writer.wait_closed()
        finally:
            await adapter.stop()
    assert adapter.state == "stopped"


def test_the_guide_lists_every_capability_the_contract_declares() -> None:
    # The contract's table must not drift from bridge.platform: each declared capability is a row.
    text = GUIDE.read_text(encoding="utf-8")
    declared = [name for cls in (Sender, Adapter) for name in cls.__annotations__]
    assert declared
    missing = [name for name in declared if f"`{name}`" not in text]
    assert missing == []
