"""Telegram intake: long polling and the webhook, each confirming an update only once the core took it."""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from telegram import Bot
from telegram.error import Conflict, InvalidToken, TelegramError

from bridge.errors import IntakeUnavailable
from bridge.jsonutil import loads
from bridge.retry import Backoff, retry_line
from bridge.serving import ConnectionLimits, LimitedServer

log = logging.getLogger(__name__)

ALLOWED_UPDATES = ["message"]
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 30.0
# Tries are unlimited: the poller's loop counts them, and only the waits come from here.
POLL_BACKOFF = Backoff(base=BACKOFF_BASE_S, cap=BACKOFF_CAP_S)
# A failing streak logs its first failure and then every LOG_EVERY-th: at the cap that is one line
# every ~5 minutes, where PTB's own updater wrote ~1 MB a second against one unparsable update.
LOG_EVERY = 10
# stop() lets an update that is being stored finish for this long before it cancels the poll.
HANDLING_GRACE_S = 1.0
# Bounds each step of stop(), so a stuck request can't hold up `bridge run`'s exit.
STOP_STEP_S = 2.0
REASON_LIMIT = 200

UpdateSink = Callable[[Any], Awaitable[None]]
Sleep = Callable[[float], Awaitable[None]]


class _QuietNonJsonAnswers(logging.Filter):
    """Drops PTB's ERROR and traceback for each answer that is not JSON, such as a proxy's 502 page.

    The request fails with NetworkError all the same, and the poller logs that once per streak and a
    send logs its retries; only with DEBUG logging on does PTB's record still get through.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Can not load invalid JSON data"):
            return True
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


# The logger of telegram.request's BaseRequest, which writes that record.
logging.getLogger("telegram.request.BaseRequest").addFilter(_QuietNonJsonAnswers())


class IntakeBot(Bot):
    """A PTB Bot that can fetch getUpdates' raw list, to parse each update on its own, and make calls
    whose answer is not parsed at all."""

    async def call_raw(self, endpoint: str, data: dict[str, Any]) -> Any:
        """A Bot API call's result as Telegram sent it. A send reads only the id of the Message it gets
        back, and PTB's objects for one cost ~150 µs to build (two sends and an edit each turn)."""
        return await self._post(endpoint, data)

    async def get_raw_updates(self, offset: int, timeout_s: int) -> list[Any]:
        """One long poll: the updates from `offset` on, unparsed; asking for `offset` confirms those below."""
        # Bot.get_updates parses the batch in one go, so one update PTB can't parse fails them all, and
        # do_api_request("getUpdates") warns on every call that get_updates exists. _post is what both
        # call: it encodes, picks the getUpdates connection and maps HTTP errors to PTB's exceptions.
        result = await self._post(
            "getUpdates",
            {"offset": offset or None, "timeout": timeout_s, "allowed_updates": ALLOWED_UPDATES},
        )
        if not isinstance(result, list):
            raise TelegramError(f"getUpdates answered {type(result).__name__}, not a list of updates")
        return result


def update_id_of(raw: Any) -> int | None:
    """The update_id of a raw update, or None when it has no usable one."""
    value = raw.get("update_id") if isinstance(raw, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class Intake:
    """Hands raw updates to the adapter one at a time; one that fails is logged once and skipped."""

    def __init__(self, sink: UpdateSink) -> None:
        self._sink = sink
        self._traced: set[type[BaseException]] = set()

    async def take(self, raw: Any) -> None:
        """Return once the update is stored or skipped; raise IntakeUnavailable to have it offered again."""
        try:
            await self._sink(raw)
        except IntakeUnavailable:
            raise
        except Exception as exc:
            self._skip(update_id_of(raw), exc)

    def _skip(self, update_id: int | None, exc: Exception) -> None:
        # A poison update is never retried, so this logs once per update; the traceback is kept for
        # the first of each kind, as an old Bot API server makes every poll message fail the same way.
        first = type(exc) not in self._traced
        self._traced.add(type(exc))
        log.error(
            "Telegram: skipped update %s, which could not be handled (%s); other updates carry on",
            update_id,
            _one_line(exc),
            exc_info=exc if first else None,
        )


class Streak:
    """A run of failures of one kind: its growing, jittered wait and the few log lines it deserves.

    The poller never gives up (there is nothing to give up to), so it keeps its own loop; the waits
    are bridge.retry's back-off, and the line is that helper's `retry_line`.
    """

    def __init__(self, what: str, then: str = "retrying", *, waits: bool = True) -> None:
        self.what = what
        self.then = then
        # False where nothing is waited here: a webhook answers 500 and Telegram sends it again.
        self.waits = waits
        self.failures = 0

    def failed(self, reason: str) -> float:
        """Count a failure and return how long to wait before the next try."""
        self.failures += 1
        wait = POLL_BACKOFF.wait(self.failures)
        if self.failures == 1 or self.failures % LOG_EVERY == 0:
            line = retry_line(
                f"Telegram: {self.what}",
                reason,
                wait=wait if self.waits else None,
                attempt=self.failures + 1,
                then=self.then,
            )
            log.warning("%s", line)
        return wait

    def succeeded(self) -> None:
        if self.failures:
            log.info("Telegram: %s recovered after %d failed attempt(s)", self.what, self.failures)
        self.failures = 0


def _one_line(exc: BaseException) -> str:
    """An exception's type and message, cut short: PTB quotes a whole HTML error page in a message."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= REASON_LIMIT else text[: REASON_LIMIT - 1] + "…"


def _reason(exc: Exception) -> str:
    """A polling failure as one line, with the likely remedy where there is one."""
    text = _one_line(exc)
    if isinstance(exc, Conflict) and "webhook" not in str(exc).lower():
        return f"{text} (is another copy of this bot polling with the same token?)"
    return text


class _NoProgress(Exception):
    """A batch that could not move the offset: fetching again at once would loop."""


class Poller:
    """Long-polls getUpdates; a batch is confirmed, by asking past it, only after every update was taken."""

    def __init__(self, bot: IntakeBot, intake: Intake, *, timeout_s: int, sleep: Sleep) -> None:
        self._bot = bot
        self._intake = intake
        self._timeout_s = timeout_s
        self._sleep = sleep
        # The id of the first update not yet taken: Telegram forgets every update below it once asked.
        self.offset = 0
        self._asked = 0  # the offset the last getUpdates carried, i.e. what Telegram knows is taken
        self._webhook_may_be_set = True  # as PTB's start_polling, delete a webhook before polling
        self._handling = False
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="telegram-poll")

    async def stop(self) -> None:
        """End polling promptly, whatever it is doing, and confirm what was taken; never raises."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping = True
        if self._handling:
            # Let an update being stored finish, so it is confirmed now rather than offered again.
            await asyncio.wait([task], timeout=HANDLING_GRACE_S)
        task.cancel()  # a long poll in flight is abandoned, not waited out
        await asyncio.wait([task], timeout=STOP_STEP_S)
        if not task.done():
            log.warning("Telegram: polling did not end within %g s of its cancel", STOP_STEP_S)
        elif not task.cancelled() and task.exception() is not None:
            log.error("Telegram: polling ended with an error", exc_info=task.exception())
        if self.offset > self._asked:
            # What was taken since the last poll: confirmed now, so the next start doesn't fetch it again.
            try:
                async with asyncio.timeout(STOP_STEP_S):
                    await self._bot.get_raw_updates(self.offset, 0)
            except Exception as exc:  # stopping must never fail; unconfirmed updates only come again
                log.info("Telegram: could not confirm the last updates at stop (%r); they come again", exc)

    async def _run(self) -> None:
        polling = Streak("polling (getUpdates)")
        storing = Streak("storing an update", then="offering it again")
        while not self._stopping:
            try:
                batch = await self._fetch()
            except InvalidToken:
                log.error(
                    "Telegram: the bot token was rejected while polling (revoked in @BotFather?). Polling "
                    "has stopped; set the new token in [telegram] token and restart Bridge."
                )
                return
            except Exception as exc:  # network errors, 5xx, 409, timeouts, anything: back off, never spin
                if isinstance(exc, Conflict) and "webhook" in str(exc).lower():
                    self._webhook_may_be_set = True
                await self._sleep(polling.failed(_reason(exc)))
                continue
            polling.succeeded()
            try:
                await self._take_all(batch)
            except IntakeUnavailable as exc:
                await self._sleep(storing.failed(str(exc) or type(exc).__name__))
                continue
            except _NoProgress as exc:
                await self._sleep(polling.failed(str(exc)))
                continue
            storing.succeeded()

    async def _fetch(self) -> list[Any]:
        if self._webhook_may_be_set:
            await self._bot.delete_webhook(drop_pending_updates=False)
            self._webhook_may_be_set = False
        self._asked = self.offset
        return await self._bot.get_raw_updates(self.offset, self._timeout_s)

    async def _take_all(self, batch: list[Any]) -> None:
        """Hand the batch over in order, moving the offset past each update once it is taken."""
        before = self.offset
        for raw in batch:
            if self._stopping:
                return
            update_id = update_id_of(raw)
            self._handling = True
            try:
                # IntakeUnavailable leaves the offset at this update: it and those after it come again,
                # while the next getUpdates confirms the ones before it.
                await self._intake.take(raw)
            finally:
                self._handling = False
            if update_id is not None:
                self.offset = max(self.offset, update_id + 1)
        if batch and self.offset == before:
            raise _NoProgress("getUpdates keeps answering updates without an update_id")


class WebhookServer:
    """Telegram's webhook POSTs: 200 once the core stored the update, 500 to have Telegram send it again."""

    def __init__(
        self,
        intake: Intake,
        *,
        listen: str,
        port: int,
        path: str,
        secret: str,
        reuse_port: bool = False,
        routes: list[tuple[str, str, Any]] | None = None,
        limits: ConnectionLimits | None = None,
    ) -> None:
        self._intake = intake
        self._limits = limits or ConnectionLimits()
        # The core's own routes, served beside Telegram's (see `http_routes` in adapters/base.py).
        self._routes = routes or []
        self._reuse_port = reuse_port
        self._listen = listen
        self._port = port
        self._path = path
        self._secret = secret.encode()
        self._storing = Streak(
            "storing a webhook update", then="answered 500, so Telegram sends it again", waits=False
        )
        self._server: LimitedServer | None = None

    @property
    def open_connections(self) -> int:
        return self._server.open_connections if self._server is not None else 0

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post(self._path, self._receive)
        for method, path, handler in self._routes:
            app.router.add_route(method, path, handler)
        server = LimitedServer(
            app,
            listen=self._listen,
            port=self._port,
            limits=self._limits,
            name="Telegram webhook server",
            remedy="[telegram] webhook_max_connections",
            # Requests still open at stop get STOP_STEP_S; Telegram resends what was not answered 200.
            shutdown_timeout=STOP_STEP_S,
            # Workers sharing a database all take webhook requests, on one host too.
            reuse_port=self._reuse_port,
        )
        await server.start()
        self._server = server

    async def stop(self) -> None:
        """Close the server; the webhook stays registered with Telegram, which queues updates meanwhile."""
        server, self._server = self._server, None
        if server is None:
            return
        try:
            async with asyncio.timeout(2 * STOP_STEP_S):
                await server.stop()
        except Exception as exc:  # stopping must never fail
            log.warning("Telegram: closing the webhook server: %r", exc)

    async def _receive(self, request: web.Request) -> web.Response:
        given = request.headers.get(SECRET_HEADER, "").encode("utf-8", "replace")
        if not hmac.compare_digest(given, self._secret):
            return web.Response(status=403, text="wrong or missing secret token")
        try:
            raw = loads(await request.read())
        except ValueError:  # nested too deep included: aiohttp's own json() would answer 500 forever
            return web.Response(status=400, text="the body is not JSON")
        try:
            await self._intake.take(raw)
        except IntakeUnavailable as exc:
            self._storing.failed(str(exc) or type(exc).__name__)
            return web.Response(status=500, text="not stored; send it again")
        self._storing.succeeded()
        return web.Response(status=200)


async def close_quietly(bot: Bot) -> None:
    """Shut the Bot's HTTP clients down; a failure here is only logged."""
    try:
        async with asyncio.timeout(STOP_STEP_S):
            await bot.shutdown()
    except Exception as exc:  # stopping must never fail
        log.warning("Telegram: closing the Bot API client: %r", exc)
