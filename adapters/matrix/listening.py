"""Listening on Matrix: the /sync loop, invites, and where the bot has read up to.

A sync token is Matrix's acknowledgement: /sync from it returns what came after. So the token is
moved past a batch of events only once the core has stored each of them (IntakeUnavailable leaves
it, and the same batch is asked for again: the core drops what it stored already), and it is kept
on the homeserver, in the bot's own account data (`io.bridge.sync`), so a restart, or another
worker taking over, reads on from there: nothing sent while Bridge was away is lost. On the very
first start there is no token, and what the rooms hold already is history, not asked of the bot.

Invites: the bot joins a room it is invited to only where it may talk there, as far as the
settings say: a room in allowed_rooms, or a direct chat from an owner or someone in allowed_users
(from anyone under dm_policy = "pairing", who then gets a code). Any other invite is declined.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

import aiohttp
from nio import AsyncClient, InviteMemberEvent, SyncResponse, UnknownAccountDataEvent

from adapters.matrix.events import ENCRYPTED, Identity, NotAMessage, Place, Remembered, normalize
from adapters.matrix.retrying import MatrixError, checked, describe
from bridge.config.platforms import MatrixSettings
from bridge.errors import IntakeUnavailable
from bridge.events import Inbound, InboundHandler
from bridge.retry import Backoff

log = logging.getLogger("adapters.matrix.adapter")

TOKEN_TYPE = "io.bridge.sync"
# Events per room one /sync returns at most: more came while Bridge was away only in a busy room.
TIMELINE_LIMIT = 100
SYNC_FILTER = {"room": {"timeline": {"limit": TIMELINE_LIMIT}}, "presence": {"not_types": ["*"]}}
SYNC_BACKOFF = Backoff(attempts=1_000_000, base=1.0, cap=30.0)
# An encrypted room is told it can't be read at most this often.
ENCRYPTED_NOTICE_EVERY_S = 3600.0
# A failing /sync logs its first failure and then every tenth at WARNING (each at INFO).
_LOUD_EVERY = 10


def api_path(*parts: str) -> str:
    """A client-API path with each part quoted (room and user ids hold '!', '@' and ':')."""
    return "/_matrix/client/v3/" + "/".join(quote(part, safe="") for part in parts)


class Listener:
    """The /sync loop of one bot account, handing each message to the core in the rooms' order."""

    def __init__(
        self,
        client: AsyncClient,
        settings: MatrixSettings,
        me: Identity,
        owners: Iterable[str],
        handler: InboundHandler,
        *,
        mine: Remembered,
        threads: Remembered,
        sync_timeout_s: float,
    ) -> None:
        self.client = client
        self.settings = settings
        self.me = me
        self.owners = frozenset(owners)
        self.handler = handler
        self._mine = mine
        self._threads = threads
        self._sync_timeout_ms = int(sync_timeout_s * 1000)
        self._since: str | None = None
        self._direct: set[str] = set()
        # Messages handed to the core lately: a batch asked for again after IntakeUnavailable hands
        # over only what it did not take (so a command is not carried out twice).
        self._handed_over = Remembered()
        self._told_encrypted = Remembered()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """The first sync (the rooms' whole state, and what came since the stored token); then the
        loop, in the background. Raises what the first sync raised."""
        self._direct = await self._direct_rooms()
        self._since = await self._stored_token()
        response = await self._sync(full_state=True, timeout_ms=0)
        # Without a token this is the bot's first start: the rooms' messages so far are history.
        await self._take(response, history=self._since is None)
        await self._advance(response, force=True)
        self._task = asyncio.create_task(self._listen(), name="matrix-sync")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, 5)

    # ------------------------------------------------------------------ the loop

    async def _sync(self, *, full_state: bool = False, timeout_ms: int) -> SyncResponse:
        response = await self.client.sync(
            timeout=timeout_ms, sync_filter=SYNC_FILTER, since=self._since, full_state=full_state
        )
        return checked(response, "/sync")

    async def _listen(self) -> None:
        failures = 0
        while True:
            try:
                response = await self._sync(timeout_ms=self._sync_timeout_ms)
                handed = await self._take(response)
                await self._advance(response, force=handed)
            except asyncio.CancelledError:
                raise
            except IntakeUnavailable as exc:
                failures += 1
                log.warning("Matrix: a message could not be stored (%s); asking for it again", exc)
                await asyncio.sleep(SYNC_BACKOFF.wait(failures))
                continue
            except (MatrixError, OSError, TimeoutError, aiohttp.ClientError) as exc:
                failures += 1
                level = logging.WARNING if failures % _LOUD_EVERY == 1 else logging.INFO
                remedy = ""
                if isinstance(exc, MatrixError) and exc.errcode == "M_UNKNOWN_TOKEN":
                    remedy = " (the bot was logged out: give [matrix] a new access_token, or its password)"
                log.log(level, "Matrix: /sync failed (%s)%s; trying again", describe(exc), remedy)
                await asyncio.sleep(SYNC_BACKOFF.wait(failures))
                continue
            failures = 0

    async def _advance(self, response: SyncResponse, *, force: bool) -> None:
        """Read on from this batch; keep the token on the homeserver where the batch held messages
        (an empty batch changes nothing worth a request)."""
        self._since = str(response.next_batch)
        if not force:
            return
        try:
            await self._put_account_data(TOKEN_TYPE, {"next_batch": self._since})
        except (MatrixError, OSError, TimeoutError, aiohttp.ClientError) as exc:
            # Kept next time; a restart before then reads a batch again, which the core drops.
            log.info("Matrix: could not keep the sync token (%s)", describe(exc))

    async def _take(self, response: SyncResponse, *, history: bool = False) -> bool:
        """Hand each new message of the batch to the core, in order; answer invites. Whether any
        message was handed over."""
        for event in response.account_data_events:
            # nio parses the types it knows (push rules, ...); m.direct is not one of them.
            if (
                isinstance(event, UnknownAccountDataEvent)
                and event.type == "m.direct"
                and isinstance(event.content, dict)
            ):
                self._direct = _rooms_of(event.content)
        for room_id, info in response.rooms.invite.items():
            await self._invited(room_id, info.invite_state)
        handed = False
        for room_id, info in response.rooms.join.items():
            for event in info.timeline.events:
                source = event.source
                if not isinstance(source, dict):
                    continue
                self._note_own(source)
                if history:
                    continue
                inbound = self._inbound(room_id, source)
                if inbound is None or (inbound.message_id or "") in self._handed_over:
                    continue
                await self._hand_over(inbound)
                handed = True
        return handed

    def _note_own(self, source: dict[str, Any]) -> None:
        """The bot's own events (this process's or an earlier one's): a reply to one, or a thread
        one is in, is addressed to it."""
        if source.get("sender") != self.me.user_id or not isinstance(source.get("event_id"), str):
            return
        self._mine.add(source["event_id"])
        relates = (
            source.get("content", {}).get("m.relates_to") if isinstance(source.get("content"), dict) else None
        )
        if isinstance(relates, dict) and relates.get("rel_type") == "m.thread":
            root = relates.get("event_id")
            if isinstance(root, str):
                self._threads.add(root)

    def _inbound(self, room_id: str, source: dict[str, Any]) -> Inbound | None:
        room = self.client.rooms.get(room_id)
        sender = source.get("sender")
        place = Place(
            room_id,
            direct=room_id in self._direct and (room is None or room.member_count <= 2),
            title=room.display_name if room is not None else None,
            my_name=room.user_name(self.me.user_id) if room is not None else None,
        )
        name = room.user_name(sender) if room is not None and isinstance(sender, str) else None
        try:
            inbound = normalize(source, place, self.me, self._mine, self._threads, name)
        except NotAMessage as exc:
            log.warning("Matrix: skipped event %s in %s: %s", source.get("event_id"), room_id, exc)
            return None
        if inbound is not None and inbound.unsupported == ENCRYPTED:
            # One notice a room an hour: each encrypted message would be one more of the same.
            last = self._told_encrypted.when(room_id)
            if last is not None and time.monotonic() - last < ENCRYPTED_NOTICE_EVERY_S:
                return None
            self._told_encrypted.add(room_id, time.monotonic())
        return inbound

    async def _hand_over(self, inbound: Inbound) -> None:
        """The core stores it before this returns; IntakeUnavailable goes up (the batch is asked for
        again); anything else is this message's fault: logged, and skipped."""
        try:
            await self.handler(inbound)
        except IntakeUnavailable:
            raise
        except Exception:
            log.exception(
                "Matrix: message %s in %s could not be handled; skipped", inbound.message_id, inbound.chat_id
            )
        assert inbound.message_id is not None
        self._handed_over.add(inbound.message_id)

    # ------------------------------------------------------------------ invites

    async def _invited(self, room_id: str, state: list[Any]) -> None:
        # nio takes the content out of the stripped state's source: its own fields are read.
        mine = next(
            (
                event
                for event in state
                if isinstance(event, InviteMemberEvent)
                and event.state_key == self.me.user_id
                and event.membership == "invite"
            ),
            None,
        )
        inviter = str(mine.sender) if mine is not None else None
        direct = mine is not None and isinstance(mine.content, dict) and mine.content.get("is_direct") is True
        allowed = self._may_join(room_id, inviter, direct)
        try:
            if not allowed:
                log.info(
                    "Matrix: declining an invite to %s from %s (not in [matrix] allowed_rooms%s)",
                    room_id,
                    inviter,
                    "" if not direct else ", and a direct chat from someone not in allowed_users",
                )
                checked(await self.client.room_leave(room_id), "decline the invite")
                return
            checked(await self.client.join(room_id), "join")
            if direct:
                self._direct.add(room_id)
                await self._save_direct(room_id, str(inviter))
            log.info("Matrix: joined %s, invited by %s", room_id, inviter)
        except (MatrixError, OSError, TimeoutError, aiohttp.ClientError) as exc:
            log.warning(
                "Matrix: could not answer the invite to %s (%s); trying at the next sync",
                room_id,
                describe(exc),
            )

    def _may_join(self, room_id: str, inviter: str | None, direct: bool) -> bool:
        cfg = self.settings
        if "*" in cfg.allowed_rooms or room_id in cfg.allowed_rooms:
            return True
        if not direct or inviter is None:
            return False
        return (
            inviter in self.owners
            or "*" in cfg.allowed_users
            or inviter in cfg.allowed_users
            or (cfg.dm_policy == "pairing")
        )

    # ------------------------------------------------------------------ account data

    async def _direct_rooms(self) -> set[str]:
        return _rooms_of(await self._get_account_data("m.direct"))

    async def _save_direct(self, room_id: str, inviter: str) -> None:
        """The room in the bot's m.direct, as clients keep it: a restart knows it is a direct chat."""
        direct = await self._get_account_data("m.direct")
        rooms = direct.get(inviter)
        rooms = [r for r in rooms if isinstance(r, str)] if isinstance(rooms, list) else []
        if room_id not in rooms:
            direct[inviter] = [*rooms, room_id]
            await self._put_account_data("m.direct", direct)

    async def _stored_token(self) -> str | None:
        token = (await self._get_account_data(TOKEN_TYPE)).get("next_batch")
        return token if isinstance(token, str) and token else None

    async def _get_account_data(self, kind: str) -> dict[str, Any]:
        path = api_path("user", self.me.user_id, "account_data", kind)
        async with self._request("GET", path) as response:
            if response.status == 404:
                return {}
            data = await response.json(content_type=None)
            if response.status >= 400:
                raise MatrixError(
                    "account data", str(data.get("errcode")), str(data.get("error")), response.status, None
                )
        return data if isinstance(data, dict) else {}

    async def _put_account_data(self, kind: str, content: dict[str, Any]) -> None:
        path = api_path("user", self.me.user_id, "account_data", kind)
        async with self._request("PUT", path, content) as response:
            if response.status >= 400:
                data = await response.json(content_type=None)
                raise MatrixError(
                    "account data", str(data.get("errcode")), str(data.get("error")), response.status, None
                )

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        session = self.client.client_session
        assert session is not None
        return session.request(
            method,
            f"{self.settings.homeserver}{path}",
            json=body,
            headers={"Authorization": f"Bearer {self.client.access_token}"},
            timeout=aiohttp.ClientTimeout(total=30.0),
        )


def _rooms_of(direct: dict[str, Any]) -> set[str]:
    """The room ids of an m.direct content ({user id: [room ids]})."""
    return {
        room
        for rooms in direct.values()
        if isinstance(rooms, list)
        for room in rooms
        if isinstance(room, str)
    }
