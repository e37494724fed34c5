"""What the scheduled-task tests share: a clock they move, a group message, a scripted scheduling turn."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from datetime import UTC, datetime

from bridge.events import Inbound
from devkit.fakes.openai_server import text, tool_call
from tests.harness import Harness

T0 = datetime(2026, 11, 25, 17, 0, tzinfo=UTC).timestamp()
GROUP = "g1"
GROUP_KEY = f"test:group:{GROUP}"
_message_ids = itertools.count(1)


@dataclass
class Clock:
    now: float = T0

    def __call__(self) -> float:
        return self.now


async def in_group(harness: Harness, said: str, *, sender: str = "alice") -> None:
    """A message in the group g1 that mentions the bot, answered before this returns."""
    inbound = Inbound(
        "test", "group", GROUP, sender, said, message_id=f"g-{next(_message_ids)}", mentioned=True
    )
    done = await harness.bridge.handle(inbound)
    assert done is not None
    await asyncio.wait_for(done, 10)


def scheduling(harness: Harness, when: str, prompt: str, **extra: str) -> None:
    """The fake model's next turn: load the tools, schedule one task, say so."""
    harness.llm.push(
        tool_call("load_tool_group", {"group_name": "scheduled_tasks"}),
        tool_call("schedule_task", {"prompt": prompt, "when": when, **extra}),
        text("Scheduled."),
    )
