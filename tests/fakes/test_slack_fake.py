"""FakeSlack driven by the real slack_sdk: Slack's answer shapes, its refusals, uploads and Socket Mode."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes.slack_api import FakeSlack

CHANNEL = "C0FAKE"
ALICE = "U0ALICE"


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as server:
        server.user(ALICE, "alice")
        server.channel(CHANNEL, "general")
        yield server


def web(fake: FakeSlack, token: str | None = None) -> AsyncWebClient:
    return AsyncWebClient(token=token or fake.bot_token, base_url=f"{fake.api_base}/", retry_handlers=[])


async def refused(call: object) -> str:
    with pytest.raises(SlackApiError) as info:
        await call  # type: ignore[misc]
    return str(info.value.response["error"])


async def test_tokens_are_checked_by_kind_as_slack_does(fake: FakeSlack) -> None:
    bot = web(fake)
    assert (await bot.auth_test())["user_id"] == fake.bot_user_id
    assert await refused(web(fake, "xoxb-wrong").auth_test()) == "invalid_auth"
    assert await refused(web(fake, fake.app_token).auth_test()) == "not_allowed_token_type"
    assert await refused(bot.apps_connections_open(app_token=fake.bot_token)) == "not_allowed_token_type"
    opened = await bot.apps_connections_open(app_token=fake.app_token)
    assert opened["url"].startswith("ws://127.0.0.1:")


async def test_posts_and_updates_answer_with_slacks_shapes_and_refusals(fake: FakeSlack) -> None:
    bot = web(fake)
    posted = await bot.chat_postMessage(channel=CHANNEL, text="hello")
    assert posted["ok"] and posted["channel"] == CHANNEL and posted["message"]["bot_id"] == fake.bot_id
    await bot.chat_update(channel=CHANNEL, ts=posted["ts"], text="hello again")
    assert [m["text"] for m in fake.messages_in(CHANNEL)] == ["hello again"]
    theirs = fake.post(CHANNEL, ALICE, "mine")
    assert await refused(bot.chat_update(channel=CHANNEL, ts=theirs["ts"], text="x")) == "cant_update_message"
    assert await refused(bot.chat_postMessage(channel="C0NOWHERE", text="x")) == "channel_not_found"
    fake.channel("C0OUTSIDE", "outside", member=False)
    assert await refused(bot.chat_postMessage(channel="C0OUTSIDE", text="x")) == "not_in_channel"
    fake.archive(CHANNEL)
    assert await refused(bot.chat_postMessage(channel=CHANNEL, text="x")) == "is_archived"
    fake.fail_next("chat.postMessage", "429", retry_after=3)
    with pytest.raises(SlackApiError) as info:
        await bot.chat_postMessage(channel=CHANNEL, text="x")
    assert info.value.response.status_code == 429 and info.value.response.headers["Retry-After"] == "3"


async def test_files_upload_v2_goes_through_the_upload_url_and_is_shared_in_the_thread(
    fake: FakeSlack,
) -> None:
    bot = web(fake)
    parent = fake.post(CHANNEL, ALICE, "the report?")
    done = await bot.files_upload_v2(
        channel=CHANNEL,
        file=b"a,b\n",
        filename="r.csv",
        title="r.csv",
        initial_comment="here",
        thread_ts=parent["ts"],
    )
    file_id = done["file"]["id"]
    assert fake.file_bytes(file_id) == b"a,b\n"
    [message] = fake.messages_in(CHANNEL, parent["ts"])
    assert message["text"] == "here" and message["files"][0]["id"] == file_id


async def test_socket_mode_says_hello_and_sends_unacknowledged_envelopes_again_on_the_next_connection(
    fake: FakeSlack,
) -> None:
    bot = web(fake)
    first = fake.push_event({"type": "message", "channel": CHANNEL, "user": ALICE, "text": "a", "ts": "1.1"})
    async with aiohttp.ClientSession() as session:
        url = (await bot.apps_connections_open(app_token=fake.app_token))["url"]
        async with session.ws_connect(url) as ws:
            assert json.loads((await ws.receive()).data)["type"] == "hello"
            got = json.loads((await ws.receive()).data)
            assert got["envelope_id"] == first["envelope_id"] and got["retry_attempt"] == 0
        # Not acknowledged: the next connection gets it again, counted as a retry.
        url = (await bot.apps_connections_open(app_token=fake.app_token))["url"]
        async with session.ws_connect(url) as ws:
            assert json.loads((await ws.receive()).data)["type"] == "hello"
            again = json.loads((await ws.receive()).data)
            assert again["envelope_id"] == first["envelope_id"] and again["retry_attempt"] == 1
            await ws.send_str(json.dumps({"envelope_id": first["envelope_id"]}))
            await fake.wait_for(lambda: fake.acks == [first["envelope_id"]])
        # An address serves one connection.
        async with session.get(url.replace("ws://", "http://")) as answer:
            assert answer.status == 401
