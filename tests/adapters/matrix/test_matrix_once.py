"""Once, against a real Synapse: a row in flight at a crash is sent again after a restart with its
transaction id (the row's nonce), and the homeserver shows it once, also when the bot logs in again
with its password as the same device."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from adapters.matrix import MatrixAdapter
from bridge.errors import AdapterStartError
from bridge.events import Outbound, Route
from bridge.store.base import OutboxItem
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from tests.adapters.matrix.conftest import RigFactory, matrix_settings, shown
from tests.adapters.matrix.synapse import Account, Synapse
from tests.adapters.matrix.test_matrix import direct_room, errors


@pytest.mark.parametrize("login", ["access_token", "password"])
async def test_a_message_in_flight_at_a_crash_is_sent_again_with_its_transaction_id_and_shown_once(
    matrix_rig: RigFactory,
    people: Any,
    fake_llm: FakeOpenAI,
    bot: Account,
    login: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ann = await people("ann")
    auth = {"password": bot.password, "device_id": bot.device_id} if login == "password" else {}
    async with matrix_rig(fake_llm, owners=[f"matrix:{ann.user_id}"], **auth) as r:
        room = await direct_room(r, ann)
        route = Route("matrix", room)
        # The homeserver took part 0 just before the crash (kill -9), so its row still says
        # `sending`; part 1 never went.
        first_id = await r.adapter.send(Outbound(route, "reply", "part 0", nonce="nonce-part-0"))
        common = OutboxItem("reply", "matrix", room, "", "pending", parts=2)
        await r.bridge.store.add_outbox(
            replace(common, text="part 0", state="sending", part=0, nonce="nonce-part-0"),
            replace(common, text="part 1", part=1, nonce="nonce-part-1"),
        )
    # A new process: a new client (with a password, a new login of the same device).
    async with matrix_rig(fake_llm, owners=[f"matrix:{ann.user_id}"], **auth) as r:
        # Even where a send in doubt would be dropped, the transaction id makes the resend safe.
        r.bridge.delivery.resend_uncertain = False
        await r.bridge.recover()
        await r.settled()
        rows = await r.bridge.store.outbox()
        messages = shown(await ann.events(room), bot.user_id)
    assert [m.body for m in messages] == ["part 0", "part 1"]
    assert [(row.item.state, row.item.part) for row in rows] == [("sent", 0), ("sent", 1)]
    assert rows[0].platform_msg_id == first_id
    assert not errors(caplog)


async def test_a_bad_access_token_or_password_is_one_clear_error_naming_its_key(
    tmp_path: Path, synapse: Synapse, bot: Account, fake_llm: FakeOpenAI
) -> None:
    async def ignore(_: object) -> None:
        return None

    wrong = matrix_settings(tmp_path, synapse, bot, fake_llm, [], access_token="syt_wrong")
    with pytest.raises(
        AdapterStartError, match=r"rejected the access token \(M_UNKNOWN_TOKEN\)\. Check \[matrix\]"
    ):
        await MatrixAdapter(wrong.matrix).start(ignore)  # type: ignore[arg-type]
    wrong = matrix_settings(tmp_path, synapse, bot, fake_llm, [], password="nope", device_id="BRIDGE")
    adapter = MatrixAdapter(wrong.matrix)
    with pytest.raises(
        AdapterStartError, match=r"refused the login .* \(M_FORBIDDEN\)\. Check \[matrix\] user_id"
    ):
        await adapter.start(ignore)  # type: ignore[arg-type]
    await adapter.stop()  # a second stop does nothing
    gone = matrix_settings(tmp_path, synapse, bot, fake_llm, [], homeserver="http://127.0.0.1:9")
    with pytest.raises(AdapterStartError, match=r"Can't reach the Matrix homeserver at http://127.0.0.1:9"):
        await MatrixAdapter(gone.matrix).start(ignore)  # type: ignore[arg-type]


async def test_messages_sent_while_bridge_was_away_are_answered_after_it_starts_again(
    matrix_rig: RigFactory, people: Any, fake_llm: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    ann = await people("ann")
    fake_llm.push(fake.text("first"), fake.text("while away"))
    async with matrix_rig(fake_llm, owners=[f"matrix:{ann.user_id}"], stream=False) as r:
        room = await direct_room(r, ann)
        await ann.say(room, "hello")
        await r.sent(ann, room, 1)
    await ann.say(room, "are you there?")
    async with matrix_rig(fake_llm, owners=[f"matrix:{ann.user_id}"], stream=False) as r:
        messages = await r.sent(ann, room, 2)
    assert [m.body for m in messages] == ["first", "while away"]
    assert [b["messages"][-1]["content"] for b in fake_llm.requests] == ["hello", "are you there?"]
