"""Matrix: the real MatrixAdapter (matrix-nio) on a real Synapse. Wraps the `synapse`, `bot`, `people`
and `matrix_rig` fixtures of tests/adapters/matrix/conftest.py; the bot talks to the homeserver
through `CarryingHomeserver`, a pass-through proxy that counts the bot's requests and can answer its
next message with Synapse's own rate-limit error or carry it out and never answer. What the bot shows
is read from Synapse, as a client sees it (edits applied, threads apart)."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import httpx
from aiohttp import web

from devkit.fakes.openai_server import FakeOpenAI
from tests.adapters.matrix.conftest import MatrixRig, Person, RigFactory, shown
from tests.adapters.matrix.synapse import Account, Synapse
from tests.platforms.rig import HAS, Capabilities, Configure, Lacks, PlatformRig, Process, Said

# Headers that belong to one hop, not to the request or answer the proxy passes on.
HOP = frozenset({"host", "content-length", "transfer-encoding", "connection", "content-encoding"})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class CarryingHomeserver:
    """The homeserver as the bot sees it: each request passed on to Synapse, recorded; the bot's next
    message can be refused as Synapse's rate limiter refuses it (429, M_LIMIT_EXCEEDED,
    retry_after_ms), or carried out and then never answered."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.requests: list[dict[str, Any]] = []
        self._faults: list[tuple[str, int]] = []
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> CarryingHomeserver:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._pass)
        self._http = aiohttp.ClientSession(auto_decompress=True)
        # A bot's long-poll /sync is still open upstream when the bot stops: don't wait it out.
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._http is not None:
            await self._http.close()

    def fail_next_message(self, fault: str, retry_after_ms: int = 0) -> None:
        """ "429": refused as Synapse's limiter refuses; "hang": carried out, never answered."""
        self._faults.append((fault, retry_after_ms))

    def messages(self) -> list[dict[str, Any]]:
        """Requests to send a message (edits included, as Matrix makes them), refused ones too."""
        return [r for r in self.requests if r["method"] == "PUT" and "/send/m.room.message/" in r["path"]]

    def outputs(self) -> int:
        """Sends of any event, typing notices and uploads."""
        return sum(
            1
            for r in self.requests
            if (r["method"] == "PUT" and ("/send/" in r["path"] or "/typing/" in r["path"]))
            or (r["method"] == "POST" and r["path"].endswith("/upload"))
        )

    def syncs(self) -> int:
        return sum(1 for r in self.requests if r["path"].endswith("/sync"))

    async def _pass(self, request: web.Request) -> web.StreamResponse:
        record: dict[str, Any] = {"method": request.method, "path": request.path, "at": time.monotonic()}
        self.requests.append(record)
        fault, after_ms = "", 0
        if request.method == "PUT" and "/send/m.room.message/" in request.path and self._faults:
            fault, after_ms = self._faults.pop(0)
            record["fault"] = fault
        if fault == "429":
            error = {"errcode": "M_LIMIT_EXCEEDED", "error": "Too Many Requests", "retry_after_ms": after_ms}
            return web.json_response(error, status=429)
        assert self._http is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP | {"accept-encoding"}}
        async with self._http.request(
            request.method, self.upstream + request.raw_path, headers=headers, data=await request.read()
        ) as answer:
            body = await answer.read()
            status = answer.status
            answer_headers = {k: v for k, v in answer.headers.items() if k.lower() not in HOP}
        if fault == "hang":
            await self._closing.wait()  # Synapse has it; the bot never hears so
        return web.Response(body=body, status=status, headers=answer_headers)


class MatrixPlatform(PlatformRig):
    name = "matrix"
    capabilities = Capabilities(
        groups=HAS,  # rooms
        threads=HAS,
        edits=HAS,  # m.replace
        streaming=HAS,  # a draft edited as it grows
        files=HAS,
        rate_limits=HAS,  # M_LIMIT_EXCEEDED with retry_after_ms
        idempotent_sends=HAS,  # transaction ids
        encryption=Lacks("end-to-end encryption is not supported: an encrypted room gets a notice"),
    )

    def __init__(self, request: Any, tmp_path: Path) -> None:
        super().__init__(request, tmp_path)
        self.synapse: Synapse = request.getfixturevalue("synapse")
        self.hs: CarryingHomeserver = request.getfixturevalue("matrix_hs")
        self.bot: Account = request.getfixturevalue("bot")
        self.people = request.getfixturevalue("people")
        self.factory: RigFactory = request.getfixturevalue("matrix_rig")
        self.live: MatrixRig | None = None
        self._owner: Person | None = None
        self._member: Person | None = None
        self.dm_room = ""
        self.group_room = ""
        self.thread_root: str | None = None
        self.poisoned: str | None = None

    @property
    def owner(self) -> Person:
        assert self._owner is not None, "matrix: no people yet"
        return self._owner

    @property
    def member(self) -> Person:
        assert self._member is not None, "matrix: no people yet"
        return self._member

    @property
    def addressed(self) -> Person:
        """The bot as someone to mention: its user id and the display name the `bot` fixture gave it."""
        return Person(self.bot, self.owner.http, "Bridge")

    async def _world(self) -> None:
        """The owner, a member, and a room of theirs the bot may join (made before the bot starts, as
        allowed_rooms names it)."""
        if self._owner is not None:
            return
        self._owner, self._member = await self.people("ann"), await self.people("bob")
        self.group_room = await self.owner.create_room(self.member.user_id, name="general")
        await self.member.join(self.group_room)
        # The room is made per test, so its key is known only now.
        self.group_key = f"matrix:group:{self.group_room}"  # type: ignore[misc]

    async def _joined(self, room: str) -> None:
        deadline = time.monotonic() + 20
        while await self.owner.membership(room, self.bot.user_id) != "join":
            assert time.monotonic() < deadline, f"matrix: the bot did not join {room}"
            await asyncio.sleep(0.1)

    async def _rooms(self) -> None:
        """The owner's direct room with the bot, and the bot in the group (each made once)."""
        if not self.dm_room:
            self.dm_room = await self.owner.create_room(self.bot.user_id, direct=True)
            await self._joined(self.dm_room)

    @asynccontextmanager
    async def running(
        self, llm: FakeOpenAI, *, stream: bool = True, configure: Configure | None = None
    ) -> AsyncIterator[None]:
        await self._world()
        async with self.factory(
            llm,
            owners=[f"matrix:{self.owner.user_id}"],
            stream=stream,
            configure=configure,
            homeserver=self.hs.base_url,
            allowed_rooms=[self.group_room],
        ) as live:
            self.live = live
            await self._rooms()
            await self.owner.invite(self.group_room, self.bot.user_id)
            await self._joined(self.group_room)
            with self.started(live.bridge, live.adapter):
                yield

    # -- reading what the bot shows, from Synapse -------------------------------------------------

    def _get(self, path: str, **params: Any) -> httpx.Response:
        # Synchronous, as the rig's readers are: Synapse is another process, so waiting on it here
        # holds up nothing it needs.
        response = httpx.get(
            self.synapse.base_url + path,
            params=params,
            headers={"Authorization": f"Bearer {self.owner.account.access_token}"},
            timeout=30,
            trust_env=False,
        )
        response.raise_for_status()
        return response

    def _events(self, room: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        params: dict[str, Any] = {"dir": "b", "limit": 100}
        while True:
            page = self._get(f"/_matrix/client/v3/rooms/{room}/messages", **params).json()
            found.extend(page.get("chunk", []))
            if not page.get("end") or not page.get("chunk"):
                return list(reversed(found))
            params["from"] = page["end"]

    def _said(self, room: str, thread: str | None = None) -> list[Said]:
        said = []
        for message in shown(self._events(room), self.bot.user_id, thread):
            file = None
            if "url" in message.content:
                server, media = str(message.content["url"]).removeprefix("mxc://").split("/", 1)
                data = self._get(f"/_matrix/client/v1/media/download/{server}/{media}").content
                file = (str(message.content.get("filename") or message.body), data)
            said.append(Said(message.event_id, message.body, 1 + len(message.edits), file))
        return said

    async def dm(self, text: str) -> None:
        await self.owner.say(self.dm_room, text)

    def dm_said(self) -> list[Said]:
        return self._said(self.dm_room)

    def output_calls(self) -> int:
        return self.hs.outputs()

    async def group(self, text: str, *, mention: bool) -> None:
        await self.member.say(self.group_room, text, mention=self.addressed if mention else None)

    def group_said(self) -> list[Said]:
        return self._said(self.group_room)

    async def in_thread(self, text: str) -> None:
        root = await self.member.say(self.group_room, "a topic to discuss")
        self.thread_root = root
        self.thread_key = f"matrix:group:{self.group_room}:topic:{root}"
        await self.member.say(self.group_room, text, mention=self.addressed, thread=root)

    def thread_said(self) -> list[Said]:
        return self._said(self.group_room, self.thread_root)

    async def dm_file(self, caption: str, name: str, mime: str, data: bytes) -> None:
        url = await self.owner.upload(data, mime, name)
        msgtype = "m.image" if mime.startswith("image/") else "m.file"
        content = {
            "msgtype": msgtype,
            "body": caption,  # the caption, since Matrix 1.10, where a filename is given beside it
            "filename": name,
            "url": url,
            "info": {"mimetype": mime, "size": len(data)},
        }
        await self.owner.send_event(self.dm_room, "m.room.message", content)

    # -- the platform's faults ------------------------------------------------------------------

    def rate_limit_next_send(self) -> float:
        self.hs.fail_next_message("429", retry_after_ms=7000)
        return 7.0

    def rate_limit_waits(self) -> list[float]:
        assert self.live is not None
        return list(self.live.waits)  # the adapter's sleeps, recorded instead of slept

    def send_attempts(self) -> int:
        return len(self.hs.messages())

    async def poison(self) -> None:
        # A sticker whose body is no string. Synapse refuses an m.room.message like that from a client
        # (its event validator wants body and msgtype strings) but takes an m.sticker, which the
        # adapter reads as a message: it can't read this one.
        content = {"body": 5, "url": "mxc://localhost/sticker", "info": {"mimetype": "image/png"}}
        self.poisoned = await self.owner.send_event(self.dm_room, "m.sticker", content)

    async def assert_poison_skipped(self, records: list[logging.LogRecord]) -> None:
        # /sync moves past an event once its batch is handled: skipping it is logging it once.
        skipped = [r.getMessage() for r in records if "skipped event" in r.getMessage()]
        why = "the event's 'body' is int, not a string"
        assert skipped == [f"Matrix: skipped event {self.poisoned} in {self.dm_room}: {why}"]

    # -- a real process ---------------------------------------------------------------------------

    @asynccontextmanager
    async def process(self, llm: FakeOpenAI) -> AsyncIterator[Process]:
        await self._world()
        section = (
            f'[matrix]\nenabled = true\nhomeserver = "{self.hs.base_url}"\nuser_id = "{self.bot.user_id}"\n'
            f'access_token = "{self.bot.access_token}"\n'
        )
        config = self.config_file(llm, f"matrix:{self.owner.user_id}", section)
        syncs = self.hs.syncs()
        async with self.bridge_run(config, lambda: self.hs.syncs() > syncs) as process:
            await self._rooms()
            yield process

    def hang_next_send(self) -> None:
        self.hs.fail_next_message("hang")
