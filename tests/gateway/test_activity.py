"""The activity display: coalesced edits that never hold up the run, final state before the reply."""

from __future__ import annotations

import asyncio

from bridge.agent.toolcalls import ToolStep
from bridge.events import Route
from bridge.gateway.delivery import Delivery
from tests.harness import RecordingSender


class SlowEditor(RecordingSender):
    """Edits take a while, as on a rate-limited platform."""

    min_edit_interval_s: float = 0.05

    async def edit(self, route: Route, message_id: str, text: str) -> None:
        await asyncio.sleep(0.05)
        await super().edit(route, message_id, text)


async def test_rapid_tool_events_are_coalesced_and_the_final_state_is_shown_on_close() -> None:
    sender = SlowEditor()
    delivery = Delivery()
    delivery.register(sender)
    reporter = delivery.activity(Route("test", "1"))
    loop = asyncio.get_running_loop()
    started = loop.time()
    for n in range(20):
        step = ToolStep(f"c{n}", "get_current_time", "")
        await reporter.tool_started(step)
        step.status = "ok"
        await reporter.tool_finished(step)
    reporting = loop.time() - started
    await asyncio.wait_for(reporter.close(), 5)
    assert len(sender.sent) == 1
    # 39 updates after the first send, but far fewer edits, and the run was never held up by them.
    assert 1 <= len(sender.edits) < 10
    assert reporting < 0.05
    assert sender.edits[-1][1] == reporter.render()
    assert sender.edits[-1][1].count("✓") == 20
