"""bridge_relay: the conformance suite's example third-party adapter, for the toy Relay service.

Written as a plugin would be: it imports only what docs/adapters.md allows (bridge.events,
bridge.platform, bridge.errors, bridge.config, bridge.retry) and is found by its entry point
(`relay = "tests.platforms.thirdparty.relay:RelayAdapter"`, registered at test time by
tests/platforms/thirdparty/plugin.py). Its platform has DMs and groups with mentions, a text limit,
rate limits and idempotent sends; no edits, no files, no threads.

Bridge's config has no section for a plugin, so it reads where its service is from the environment
(RELAY_API_BASE, RELAY_TOKEN), as a plugin must until one can add a section.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Any

import aiohttp

from bridge.config import Settings
from bridge.errors import AdapterStartError, IntakeUnavailable
from bridge.events import Inbound, InboundHandler, Outbound
from bridge.platform import Adapter
from bridge.retry import GIVE_UP, RETRY, Backoff, RetryableError, Sleep, Verdict, retry_after, with_retries

log = logging.getLogger(__name__)

BOT = "relay-bot"
POLL_TIMEOUT_S = 1.0
SEND_BACKOFF = Backoff(attempts=4, base=0.2, cap=5.0, retry_after_cap=30.0)


class RelayRateLimited(RetryableError):
    """Relay said "too many requests" and how long to wait."""


def _classify(exc: BaseException) -> Verdict:
    """A 429 waits what Relay asked; the network and 5xx are retried (a repeat is safe: the key)."""
    if isinstance(exc, RetryableError):
        return retry_after(exc.retry_after)
    return RETRY if isinstance(exc, aiohttp.ClientError | TimeoutError | OSError) else GIVE_UP


class RelayAdapter(Adapter):
    surface = "relay"
    text_limit = 500
    # Relay posts a message once per (chat, key): a resend after a kill never shows twice.
    dedupes_by_nonce = True

    def __init__(self, api_base: str, token: str, *, sleep: Sleep = asyncio.sleep) -> None:
        self.api_base = api_base.rstrip("/")
        self.token = token
        self._sleep = sleep
        self._http: aiohttp.ClientSession | None = None
        self._poller: asyncio.Task[None] | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> RelayAdapter:
        return cls(os.environ.get("RELAY_API_BASE", ""), os.environ.get("RELAY_TOKEN", ""))

    async def start(self, handler: InboundHandler) -> None:
        self._http = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {self.token}"}, timeout=aiohttp.ClientTimeout(total=30)
        )
        try:
            await self._updates(0, 0)  # the service is there and takes the token
        except (aiohttp.ClientError, OSError) as exc:
            await self.stop()
            raise AdapterStartError(f"Relay at {self.api_base} is not reachable: {exc}") from exc
        self._poller = asyncio.create_task(self._poll(handler), name="relay-poller")

    async def stop(self) -> None:
        poller, self._poller = self._poller, None
        if poller is not None:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
        http, self._http = self._http, None
        if http is not None:
            await http.close()

    async def _updates(self, offset: int, wait_s: float) -> list[Any]:
        """Updates from `offset` on, waiting up to wait_s for one to come (a long poll)."""
        assert self._http is not None
        params = {"offset": str(offset), "timeout": str(wait_s)}
        async with self._http.get(f"{self.api_base}/updates", params=params) as response:
            response.raise_for_status()
            body = await response.json()
        updates: list[Any] = body["updates"]
        return updates

    async def _poll(self, handler: InboundHandler) -> None:
        offset = 0
        while True:
            try:
                updates = await self._updates(offset, POLL_TIMEOUT_S)
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                log.warning("Relay: polling failed (%s); trying again in 1 s", exc)
                await self._sleep(1.0)
                continue
            for update in updates:
                try:
                    inbound = self.normalize(update)
                    if inbound is not None:
                        await handler(inbound)
                except IntakeUnavailable:
                    break  # not confirmed: Relay offers it again with the next poll
                except Exception:
                    log.exception("Relay: skipped update %s", update.get("update_id"))
                offset = int(update["update_id"]) + 1

    def normalize(self, update: dict[str, Any]) -> Inbound | None:
        message = update.get("message")
        if message is None:
            return None  # an update of a kind this adapter does not follow
        chat = message["chat"]
        return Inbound(
            surface=self.surface,
            chat_type="dm" if chat["type"] == "dm" else "group",
            chat_id=str(chat["id"]),
            sender_id=str(message["from"]),
            text=message["text"],
            message_id=str(message["id"]),
            mentioned=chat["type"] == "dm" or BOT in message["mentions"],
        )

    async def send(self, item: Outbound) -> str | None:
        assert self._http is not None, "the Relay adapter is not started"
        http = self._http
        body = {"chat": item.route.chat_id, "text": item.text, "key": item.nonce}

        async def post() -> str:
            async with http.post(f"{self.api_base}/messages", json=body) as response:
                if response.status == 429:
                    wait = float(response.headers.get("Retry-After", "1"))
                    raise RelayRateLimited(f"rate limited for {wait:g} s", retry_after=wait)
                response.raise_for_status()
                answer = await response.json()
            return str(answer["id"])

        return await with_retries(
            post,
            what=f"Relay: posting to chat {item.route.chat_id}",
            log=log,
            classify=_classify,
            backoff=SEND_BACKOFF,
            sleep=self._sleep,
        )
