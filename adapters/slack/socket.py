"""Slack's Socket Mode: events over a WebSocket that this side opens, acknowledged once stored.

slack_sdk's aiohttp SocketModeClient keeps the connection: it asks apps.connections.open for the
address, answers pings, and reconnects when Slack sends `disconnect` (it does so every few hours) or
the connection drops. What it delivers goes through one queue here, in the order Slack sent it, and
each envelope is acknowledged (its envelope_id sent back) only once the core has stored the message:

- stored, or not a message at all: acknowledged;
- the store can't take it now (IntakeUnavailable): tried again with a back-off for up to a minute,
  then left unacknowledged, so Slack delivers it again (with retry_attempt counting up);
- it can't be handled (a poison event): logged once and acknowledged, so it is never retried forever.

Slack delivers an unacknowledged envelope again, and may deliver one twice around a reconnect: the
message's channel and ts make it one row in the store, answered once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.retrying import describe, error_code
from bridge.errors import AdapterStartError, IntakeUnavailable
from bridge.retry import GIVE_UP, RETRY, Backoff, Sleep, Verdict, with_retries

log = logging.getLogger(__name__)

# Slack says hello on every new connection; start() waits this long for the first.
HELLO_TIMEOUT_S = 30.0
# A message the store could not take is tried again for up to a minute; then Slack redelivers it.
INTAKE_BACKOFF = Backoff(attempts=8, cap=15.0, total_s=60.0)
STOP_STEP_S = 2.0
# Ping Slack this often; a connection without a pong for four of these is replaced.
PING_INTERVAL_S = 10.0

# The events_api payload's event, handed on by the adapter; raises for a poison event.
EventSink = Callable[[Any], Awaitable[None]]
# A run of connection failures logs its first and then every LOG_EVERY-th: at one try per ping
# interval, the SDK's own lines came to an ERROR with a traceback every 10 s while Slack was away.
LOG_EVERY = 10
# What slack_sdk's Socket Mode client says while it can't reach Slack, and when it is back.
_TROUBLE = (
    "Failed to check the current session",
    "Failed to connect",
    "Failed to retrieve WSS URL",
    "Failed to send a ping message",
    "Failed to receive or enqueue a message",
    "Failed to close the old session",
)
_BACK = "A new session"


class _ConnectionTrouble(logging.Filter):
    """slack_sdk's lines about a lost connection as WARNINGs without tracebacks, a few per outage.

    The client reconnects by itself and a lost connection loses nothing (unacknowledged events come
    again), so these are no errors of Bridge's; a long outage still shows, once in LOG_EVERY tries.
    """

    def __init__(self) -> None:
        super().__init__()
        self.failures = 0

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        if message.startswith(_BACK):
            self.failures = 0
            return True
        if not message.startswith(_TROUBLE):
            return True
        self.failures += 1
        if self.failures != 1 and self.failures % LOG_EVERY:
            return False
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.exc_info, record.exc_text = None, None
        record.msg = f"Slack: {message} (failure {self.failures}; the client keeps reconnecting)"
        return True


SDK_LOG = logging.getLogger("slack_sdk.socket_mode")
SDK_LOG.addFilter(_ConnectionTrouble())


def _intake_verdict(exc: BaseException) -> Verdict:
    return RETRY if isinstance(exc, IntakeUnavailable) else GIVE_UP


class SocketIntake:
    """One Socket Mode connection delivering events_api envelopes to `sink`, one at a time."""

    def __init__(
        self,
        web: AsyncWebClient,
        app_token: str,
        sink: EventSink,
        *,
        sleep: Sleep = asyncio.sleep,
        ping_interval_s: float = PING_INTERVAL_S,
    ) -> None:
        self._web = web
        self._app_token = app_token
        self._sink = sink
        self._sleep = sleep
        self._ping_interval_s = ping_interval_s
        self._client: SocketModeClient | None = None
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None
        self._hello = asyncio.Event()
        self._traced: set[type[BaseException]] = set()
        self.connections = 0

    async def start(self) -> None:
        """Open the connection and return once Slack said hello; AdapterStartError, after closing
        what was opened, when the app token is refused or Slack can't be reached."""
        url = await self._open_url()
        client = SocketModeClient(
            self._app_token,
            web_client=self._web,
            logger=SDK_LOG,
            ping_interval=self._ping_interval_s,
        )
        client.message_listeners.append(self._on_message)
        client.wss_uri = url
        self._client = client
        self._worker = asyncio.create_task(self._work(), name="slack-intake")
        try:
            # connect() itself tries again and again while the address can't be reached.
            async with asyncio.timeout(HELLO_TIMEOUT_S):
                await client.connect()  # type: ignore[no-untyped-call]
                await self._hello.wait()
        except TimeoutError:
            await self.stop()
            raise AdapterStartError("Slack's Socket Mode connection never said hello") from None
        except BaseException:
            await self.stop()
            raise

    async def _open_url(self) -> str:
        try:
            response = await self._web.apps_connections_open(app_token=self._app_token)
        except SlackApiError as exc:
            code = error_code(exc)
            if code in ("invalid_auth", "not_authed", "token_revoked", "not_allowed_token_type"):
                raise AdapterStartError(
                    f"Slack rejected the app-level token ({code}). Check [slack] app_token, or "
                    "BRIDGE_SLACK__APP_TOKEN: Basic Information → App-Level Tokens, with the "
                    "connections:write scope, and Socket Mode turned on."
                ) from None
            raise AdapterStartError(f"Slack refused to open a Socket Mode connection ({code})") from None
        except (OSError, TimeoutError) as exc:
            raise AdapterStartError(f"Can't reach the Slack API for Socket Mode: {describe(exc)}") from None
        url = response.get("url")
        if not isinstance(url, str) or not url:
            raise AdapterStartError("Slack's apps.connections.open gave no address")
        return url

    async def stop(self) -> None:
        """Close the connection and the queue's worker; returns within seconds and never raises."""
        client, self._client = self._client, None
        worker, self._worker = self._worker, None
        if client is not None:
            try:
                async with asyncio.timeout(STOP_STEP_S):
                    await client.close()  # type: ignore[no-untyped-call]
            except Exception as exc:  # stopping must never fail
                log.info("Slack: closing the Socket Mode connection: %r", exc)
            # close() cancels the client's tasks without waiting for them; they end here.
            tasks = [client.message_processor, client.current_session_monitor, client.message_receiver]
            for task in tasks:
                if task is not None:
                    task.cancel()
            await asyncio.gather(*(t for t in tasks if t is not None), return_exceptions=True)
            with contextlib.suppress(Exception):
                await client.aiohttp_client_session.close()
        if worker is not None:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)

    # ------------------------------------------------------------------ receiving

    async def _on_message(self, client: AsyncBaseSocketModeClient, message: dict[str, Any], raw: Any) -> None:
        # Runs in a task of its own per message, started in the order they came: only queue here.
        kind = message.get("type")
        if kind == "hello":
            self.connections += 1
            self._hello.set()
            return
        if "envelope_id" in message:
            self._queue.put_nowait(message)

    async def _work(self) -> None:
        while True:
            envelope = await self._queue.get()
            await self._handle(envelope)

    async def _handle(self, envelope: dict[str, Any]) -> None:
        envelope_id = envelope.get("envelope_id")
        if envelope.get("type") == "events_api":
            payload = envelope.get("payload")
            event = payload.get("event") if isinstance(payload, dict) else None
            try:
                await with_retries(
                    lambda: self._sink(event),
                    what=f"Slack: storing event {envelope_id}",
                    log=log,
                    classify=_intake_verdict,
                    backoff=INTAKE_BACKOFF,
                    sleep=self._sleep,
                )
            except IntakeUnavailable as exc:
                log.warning(
                    "Slack: event %s could not be stored (%s); left unacknowledged, so Slack sends it again",
                    envelope_id,
                    exc,
                )
                return
            except Exception as exc:
                self._skip(envelope_id, envelope, exc)
        # Other envelopes (slash commands, interactivity) are not used: acknowledged and dropped,
        # so Slack does not send them again.
        await self._ack(envelope_id)

    def _skip(self, envelope_id: Any, envelope: dict[str, Any], exc: Exception) -> None:
        # The traceback is kept for the first of each kind: the same fault tends to repeat.
        first = type(exc) not in self._traced
        self._traced.add(type(exc))
        log.error(
            "Slack: skipped event %s (retry %s), which could not be handled (%s); other events carry on",
            envelope_id,
            envelope.get("retry_attempt", 0),
            describe(exc),
            exc_info=exc if first else None,
        )

    async def _ack(self, envelope_id: Any) -> None:
        client = self._client
        if client is None or not isinstance(envelope_id, str):
            return
        try:
            await client.send_socket_mode_response({"envelope_id": envelope_id})
        except Exception as exc:
            # The connection went meanwhile: Slack sends the event again, and the store knows it.
            log.info("Slack: could not acknowledge event %s (%s); it will come again", envelope_id, exc)
