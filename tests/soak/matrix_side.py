"""The soak on Matrix: the seam (tests.soak.side.Side) on a real Synapse, the bot talking to it through
a pass-through proxy that holds each message send open a random moment, so a kill can land mid-send."""

from __future__ import annotations

import asyncio
import itertools
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from aiohttp import web

from adapters.matrix.listening import TOKEN_TYPE
from tests.adapters.matrix.conftest import shown
from tests.adapters.matrix.synapse import Account, Synapse
from tests.platforms.rigs.matrix import CarryingHomeserver
from tests.soak.side import FRIEND, GROUP_1, GROUP_2, OWNER, STRANGER, Chat

_txns = itertools.count(1)


def _path(*parts: str) -> str:
    return "/_matrix/client/v3/" + "/".join(quote(part, safe="") for part in parts)


def _sends(request: web.Request) -> bool:
    # An edit is a message event too (m.replace): both are PUT /rooms/{room}/send/m.room.message/{txn}.
    return request.method == "PUT" and "/send/m.room.message/" in request.path


class SlowHomeserver(CarryingHomeserver):
    """CarryingHomeserver whose message sends wait up to `max_delay_s`, part before Synapse has the
    event and part after (the answer lost in flight), counting those in flight. A request whose client
    was killed meanwhile still completes (aiohttp does not cancel the handler): Synapse has the event,
    the bot never heard, and its resend after the restart carries the same transaction id."""

    def __init__(self, upstream: str, rng: random.Random, max_delay_s: float = 0.25) -> None:
        super().__init__(upstream)
        self.rng = rng
        self.max_delay_s = max_delay_s
        self.in_flight = 0
        # New messages (not edits) Synapse has made while the bot waits for the answer: a kill now is
        # the case idempotency is for (an edit sent twice shows nothing twice anyway).
        self.carried = 0

    async def __aenter__(self) -> SlowHomeserver:
        await super().__aenter__()
        return self

    async def _pass(self, request: web.Request) -> web.StreamResponse:
        if not _sends(request):
            return await super()._pass(request)
        edit = b'"m.replace"' in await request.read()  # read once, kept for the pass-through
        delay = self.rng.uniform(0, self.max_delay_s)
        before = self.rng.uniform(0, delay)
        self.in_flight += 1
        try:
            await asyncio.sleep(before)
            answer = await super()._pass(request)
            self.carried += not edit
            try:
                await asyncio.sleep(delay - before)
            finally:
                self.carried -= not edit
            return answer
        finally:
            self.in_flight -= 1


@dataclass
class MatrixSide:
    """Four rooms on Synapse, made before the soak: the owner's and the friend's direct chats with the
    bot, and two group rooms in allowed_rooms. The bot is in them already and its sync token is stored,
    so its first start takes every message sent from then on as new (not as history)."""

    synapse: Synapse
    hs: SlowHomeserver
    bot: Account
    surface: str = "matrix"
    doubles_allowed: bool = False  # a resent event carries its transaction id: Synapse drops it
    media: bool = False
    people: dict[int, Account] = field(default_factory=dict)
    rooms: dict[int, str] = field(default_factory=dict)

    def prepare(self) -> None:
        for who, name in ((OWNER, "ann"), (FRIEND, "bob"), (STRANGER, "cat")):
            self.people[who] = self.synapse.register(name)
        bot = self.bot.user_id
        self.rooms[OWNER] = self._room(OWNER, [], direct=True)
        self.rooms[FRIEND] = self._room(FRIEND, [], direct=True)
        self.rooms[GROUP_1] = self._room(OWNER, [FRIEND, STRANGER])
        self.rooms[GROUP_2] = self._room(FRIEND, [STRANGER])
        owner, friend = self.people[OWNER].user_id, self.people[FRIEND].user_id
        direct = {owner: [self.rooms[OWNER]], friend: [self.rooms[FRIEND]]}
        self._as_bot("PUT", _path("user", bot, "account_data", "m.direct"), direct)
        batch = self._as_bot("GET", "/_matrix/client/v3/sync?timeout=0")["next_batch"]
        self._as_bot("PUT", _path("user", bot, "account_data", TOKEN_TYPE), {"next_batch": batch})

    def _as_bot(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.synapse.request(method, path, body, token=self.bot.access_token)

    def _room(self, maker: int, members: list[int], *, direct: bool = False) -> str:
        account = self.people[maker]
        body = {
            "invite": [self.bot.user_id, *(self.people[m].user_id for m in members)],
            "is_direct": direct,
            "preset": "trusted_private_chat" if direct else "private_chat",
        }
        room = str(
            self.synapse.request("POST", _path("createRoom"), body, token=account.access_token)["room_id"]
        )
        for member in members:
            self.synapse.request("POST", _path("join", room), {}, token=self.people[member].access_token)
        self._as_bot("POST", _path("join", room), {})
        return room

    def config(self, tmp_path: Path, llm_url: str, extra: str) -> Path:
        config = tmp_path / "config.toml"
        friend = self.people[FRIEND].user_id
        config.write_text(
            f'owners = ["matrix:{self.people[OWNER].user_id}"]\n'
            f'[llm]\nbase_url = "{llm_url}"\nmodel = "fake"\nmax_retries = 0\nstream = true\n'
            f'[storage]\npath = "{tmp_path / "bridge.db"}"\n'
            f'[matrix]\nenabled = true\nhomeserver = "{self.hs.base_url}"\nuser_id = "{self.bot.user_id}"\n'
            f'access_token = "{self.bot.access_token}"\nallowed_users = ["{friend}"]\n'
            f'allowed_rooms = ["{self.rooms[GROUP_1]}", "{self.rooms[GROUP_2]}"]\nrequire_mention = false\n'
            f"{extra}",
            encoding="utf-8",
        )
        return config

    def chat_key(self, chat_id: int) -> str:
        return self.rooms[chat_id]

    def push(self, chat: Chat, sender: int, words: str | None, **media: Any) -> str:
        assert words is not None and not media, "the Matrix soak sends text only"
        # Straight to Synapse, synchronously: it is another process, so the bot's requests, which the
        # proxy in this loop passes on, wait only for this one call.
        path = _path("rooms", self.rooms[chat.chat_id], "send", "m.room.message", f"soak{next(_txns)}")
        content = {"msgtype": "m.text", "body": words}
        return str(
            self.synapse.request("PUT", path, content, token=self.people[sender].access_token)["event_id"]
        )

    def sends_in_flight(self) -> int:
        # A kill aimed at a send waits for one Synapse has carried out and not yet answered.
        return self.hs.carried

    def requests_in_flight(self) -> int:
        return self.hs.in_flight

    def unconfirmed(self) -> list[str]:
        return []  # /sync has no acknowledgement: a message no run stored shows as lost in the checks

    def received(self) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        for chat_id, room in self.rooms.items():
            reader = self.people[OWNER if chat_id in (OWNER, GROUP_1) else FRIEND]
            found.extend(
                (room, message.body) for message in shown(self._events(room, reader), self.bot.user_id)
            )
        return found

    def _events(self, room: str, reader: Account) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        since = ""
        while True:
            page = self.synapse.request(
                "GET",
                _path("rooms", room, "messages") + f"?dir=b&limit=100{since}",
                token=reader.access_token,
            )
            events.extend(page.get("chunk", []))
            if not page.get("end") or not page.get("chunk"):
                return list(reversed(events))
            since = f"&from={quote(str(page['end']), safe='')}"
