"""A whole Bridge with the real Matrix adapter on a real Synapse, answering through the fake model.

`synapse` is one homeserver for the session (tests/adapters/matrix/synapse.py); each test registers
its own bot and people and makes fresh rooms. `matrix_rig` is shaped for the conformance suite: a
factory of a running Bridge, and a rig whose people send as Matrix clients do and read what the bot
posted as a client shows it (edits applied, threads apart).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from adapters.matrix import MatrixAdapter
from bridge.app import Bridge
from bridge.config import Settings
from devkit.fakes.openai_server import FakeOpenAI
from tests.adapters.matrix.synapse import Account, Synapse, start_synapse, stop_synapse
from tests.harness import make_settings

RigFactory = Callable[..., Any]
_txns = itertools.count(1)


@pytest.fixture(scope="session")
def synapse() -> Iterator[Synapse]:
    server = start_synapse()
    try:
        yield server
    finally:
        stop_synapse(server)


def _path(*parts: str) -> str:
    return "/_matrix/client/v3/" + "/".join(quote(part, safe="") for part in parts)


@dataclass
class Person:
    """A Matrix user as a client: makes rooms, writes, uploads, and reads what is there."""

    account: Account
    http: httpx.AsyncClient
    name: str = ""

    @property
    def user_id(self) -> str:
        return self.account.user_id

    async def call(self, method: str, path: str, body: Any = None, **kw: Any) -> dict[str, Any]:
        response = await self.http.request(
            method, path, json=body, headers={"Authorization": f"Bearer {self.account.access_token}"}, **kw
        )
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    async def create_room(
        self, *invite: str, direct: bool = False, encrypted: bool = False, name: str | None = None
    ) -> str:
        body: dict[str, Any] = {
            "invite": list(invite),
            "is_direct": direct,
            "preset": "trusted_private_chat" if direct else "private_chat",
        }
        if name:
            body["name"] = name
        if encrypted:
            body["initial_state"] = [
                {
                    "type": "m.room.encryption",
                    "state_key": "",
                    "content": {"algorithm": "m.megolm.v1.aes-sha2"},
                }
            ]
        return str((await self.call("POST", _path("createRoom"), body))["room_id"])

    async def invite(self, room_id: str, user_id: str) -> None:
        await self.call("POST", _path("rooms", room_id, "invite"), {"user_id": user_id})

    async def join(self, room_id: str) -> None:
        await self.call("POST", _path("join", room_id), {})

    async def send_event(self, room_id: str, kind: str, content: dict[str, Any]) -> str:
        txn = f"t{next(_txns)}"
        return str((await self.call("PUT", _path("rooms", room_id, "send", kind, txn), content))["event_id"])

    async def say(
        self,
        room_id: str,
        text: str,
        *,
        mention: Person | None = None,
        thread: str | None = None,
        reply_to: str | None = None,
    ) -> str:
        """A text message as Element sends it: a mention is a pill (its display name in the body, a
        link in the HTML) listed in m.mentions."""
        content: dict[str, Any] = {"msgtype": "m.text", "body": text}
        if mention is not None:
            name = mention.name or mention.user_id
            content["body"] = f"{name}: {text}"
            content["format"] = "org.matrix.custom.html"
            content["formatted_body"] = f'<a href="https://matrix.to/#/{mention.user_id}">{name}</a>: {text}'
            content["m.mentions"] = {"user_ids": [mention.user_id]}
        if thread is not None:
            content["m.relates_to"] = {
                "rel_type": "m.thread",
                "event_id": thread,
                "is_falling_back": True,
                "m.in_reply_to": {"event_id": reply_to or thread},
            }
        elif reply_to is not None:
            content["m.relates_to"] = {"m.in_reply_to": {"event_id": reply_to}}
        return await self.send_event(room_id, "m.room.message", content)

    async def upload(self, data: bytes, mime: str, name: str) -> str:
        response = await self.http.post(
            "/_matrix/media/v3/upload",
            params={"filename": name},
            content=data,
            headers={"Authorization": f"Bearer {self.account.access_token}", "Content-Type": mime},
        )
        response.raise_for_status()
        return str(response.json()["content_uri"])

    async def download(self, mxc: str) -> bytes:
        server, media = mxc.removeprefix("mxc://").split("/", 1)
        response = await self.http.get(
            f"/_matrix/client/v1/media/download/{server}/{media}",
            headers={"Authorization": f"Bearer {self.account.access_token}"},
        )
        response.raise_for_status()
        return response.content

    async def events(self, room_id: str) -> list[dict[str, Any]]:
        """Every event of the room, oldest first."""
        found: list[dict[str, Any]] = []
        params: dict[str, Any] = {"dir": "b", "limit": 100}
        while True:
            page = await self.call("GET", _path("rooms", room_id, "messages"), params=params)
            found.extend(page.get("chunk", []))
            if not page.get("end") or not page.get("chunk"):
                break
            params["from"] = page["end"]
        return list(reversed(found))

    async def membership(self, room_id: str, user_id: str) -> str | None:
        try:
            state = await self.call("GET", _path("rooms", room_id, "state", "m.room.member", user_id))
        except httpx.HTTPStatusError:
            return None
        return str(state.get("membership"))


@dataclass
class Shown:
    """A message of the bot as a client shows it: its text now (edits applied), how it was first sent."""

    event_id: str
    content: dict[str, Any]
    first: dict[str, Any]
    edits: list[dict[str, Any]] = field(default_factory=list)

    @property
    def body(self) -> str:
        return str(self.content.get("body", ""))

    @property
    def html(self) -> str | None:
        html = self.content.get("formatted_body")
        return str(html) if html is not None else None


def shown(events: list[dict[str, Any]], sender: str, thread: str | None = None) -> list[Shown]:
    """The sender's messages in the room's main timeline (or in one thread), edits applied."""
    messages: dict[str, Shown] = {}
    for event in events:
        if event.get("sender") != sender or event.get("type") != "m.room.message":
            continue
        content = event.get("content") or {}
        relates = content.get("m.relates_to") or {}
        if relates.get("rel_type") == "m.replace":
            target = messages.get(str(relates.get("event_id")))
            if target is not None:
                target.content = content["m.new_content"]
                target.edits.append(content)
            continue
        in_thread = relates.get("event_id") if relates.get("rel_type") == "m.thread" else None
        if in_thread == thread:
            messages[event["event_id"]] = Shown(event["event_id"], dict(content), content)
    return list(messages.values())


@dataclass
class MatrixRig:
    bridge: Bridge
    adapter: MatrixAdapter
    bot: Account
    waits: list[float]

    async def sent(
        self, person: Person, room_id: str, n: int, thread: str | None = None, within: float = 15.0
    ) -> list[Shown]:
        """Wait until the bot has at least n messages in the room (or thread) and the answers are
        finished (a reply streams into a draft first); return them as a client shows them now."""
        deadline = time.monotonic() + within
        while len(shown(await person.events(room_id), self.bot.user_id, thread)) < n:
            if time.monotonic() > deadline:
                found = shown(await person.events(room_id), self.bot.user_id, thread)
                raise AssertionError(f"the bot sent {len(found)} of {n} messages: {[m.body for m in found]}")
            await asyncio.sleep(0.1)
        await asyncio.wait_for(self.settled(), within)
        return shown(await person.events(room_id), self.bot.user_id, thread)

    async def settled(self) -> None:
        """No answer is running and nothing waits to be sent or edited."""
        await self.bridge.lanes.idle()
        await self.bridge.delivery.idle()

    async def joined(self, person: Person, room_id: str, within: float = 15.0) -> None:
        deadline = time.monotonic() + within
        while await person.membership(room_id, self.bot.user_id) != "join":
            if time.monotonic() > deadline:
                raise AssertionError(f"the bot did not join {room_id}")
            await asyncio.sleep(0.1)


@pytest.fixture
async def people(synapse: Synapse) -> AsyncIterator[Callable[[str], Any]]:
    """`await people("ann")`: a new user on the homeserver, as a client, with that display name."""
    async with httpx.AsyncClient(base_url=synapse.base_url, timeout=30.0, trust_env=False) as http:

        async def make(name: str) -> Person:
            account = synapse.register(name)
            person = Person(account, http, name.capitalize())
            await person.call(
                "PUT", _path("profile", account.user_id, "displayname"), {"displayname": person.name}
            )
            return person

        yield make


def matrix_settings(
    tmp_path: Path, synapse: Synapse, bot: Account, llm: FakeOpenAI, owners: list[str], **section: Any
) -> Settings:
    auth: dict[str, Any] = {"access_token": bot.access_token}
    if "password" in section:
        auth = {}
    return make_settings(
        tmp_path,
        llm.base_url,
        owners=owners,
        matrix={"enabled": True, "homeserver": synapse.base_url, "user_id": bot.user_id, **auth, **section},
    )


@pytest.fixture
def bot(synapse: Synapse) -> Account:
    """The bot's account, new for each test, named Bridge."""
    account = synapse.register("bridge")
    synapse.request(
        "PUT",
        _path("profile", account.user_id, "displayname"),
        {"displayname": "Bridge"},
        token=account.access_token,
    )
    return account


@pytest.fixture
def matrix_rig(tmp_path: Path, synapse: Synapse, bot: Account) -> RigFactory:
    """`async with matrix_rig(llm, owners=[...], **matrix_section) as r:` runs Bridge + MatrixAdapter
    until the block ends. stream=False sends each reply whole; configure(settings) changes other
    sections before the Bridge is built."""

    @asynccontextmanager
    async def make(
        llm: FakeOpenAI,
        *,
        owners: list[str] | None = None,
        stream: bool = True,
        configure: Callable[[Settings], None] | None = None,
        **section: Any,
    ) -> AsyncIterator[MatrixRig]:
        settings = matrix_settings(tmp_path, synapse, bot, llm, owners or [], **section)
        if configure is not None:
            configure(settings)
        settings.llm.stream = stream
        waits: list[float] = []

        async def no_wait(seconds: float) -> None:
            waits.append(seconds)

        adapter = MatrixAdapter(settings.matrix, settings.owners, sleep=no_wait, sync_timeout_s=5.0)
        adapter.min_edit_interval_s = 0.01  # coalescing has its own test; keep these quick
        async with Bridge(settings) as bridge:
            bridge.add_sender(adapter)
            await adapter.start(bridge.handle)
            try:
                yield MatrixRig(bridge, adapter, bot, waits)
            finally:
                await adapter.stop()

    return make
