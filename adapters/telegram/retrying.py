"""What to do when a Bot API call fails: flood control names its wait, a refusal is final, and the
network is retried, except a send that may have reached Telegram (never sent twice)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import aiohttp
import httpx
from telegram.error import BadRequest, Forbidden, InvalidToken, NetworkError, RetryAfter, TimedOut
from telegram.warnings import PTBDeprecationWarning

from bridge.errors import DeliveryRefused, DeliveryUncertain
from bridge.retry import GIVE_UP, RETRY, Backoff, Verdict, retry_after

MAX_ATTEMPTS = 5
BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 30.0
RETRY_AFTER_CAP_S = 120.0
SEND_BACKOFF = Backoff(
    attempts=MAX_ATTEMPTS, base=BACKOFF_BASE_S, cap=BACKOFF_CAP_S, retry_after_cap=RETRY_AFTER_CAP_S
)
# Bad Requests that refuse the chat itself, not the message: no such chat, no right to write there.
CHAT_REFUSALS = ("chat not found", "have no rights", "not enough rights", "chat_write_forbidden")


def _retry_after_s(exc: RetryAfter) -> float:
    # PTB 22 returns an int (with a deprecation warning) or a timedelta (PTB_TIMEDELTA=true).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = exc.retry_after
    # Capped by SEND_BACKOFF's retry_after_cap.
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def _surely_unsent(exc: TimedOut) -> bool:
    """A connect or pool timeout never reached Telegram; a read timeout may have been delivered. The
    aiohttp transport (adapters/telegram/transport.py) times the pool wait and the connection out
    together, and says "*not* sent" as PTB's HTTPXRequest does for its pool timeout."""
    unsent = aiohttp.ConnectionTimeoutError | httpx.ConnectTimeout | httpx.PoolTimeout
    return isinstance(exc.__cause__, unsent) or "not* sent" in str(exc)


def classify(exc: BaseException) -> Verdict:
    """A Bot API failure: flood control names its wait; a refusal is final; the network is retried."""
    if isinstance(exc, RetryAfter):
        return retry_after(_retry_after_s(exc))
    if isinstance(exc, BadRequest | Forbidden | InvalidToken):
        return GIVE_UP
    if isinstance(exc, TimedOut):
        return Verdict(True, may_have_arrived=not _surely_unsent(exc))
    return RETRY if isinstance(exc, NetworkError) else GIVE_UP


@contextmanager
def refusals() -> Iterator[None]:
    """Telegram's final refusals of a chat (the user blocked the bot, it was removed from the group, no
    such chat) as the core's DeliveryRefused, with Telegram's reason once: a WARNING, not a traceback.
    A read timeout, which a message is not sent again after (it may have arrived), is the core's
    DeliveryUncertain."""
    try:
        yield
    except TimedOut as exc:
        if _surely_unsent(exc):
            raise
        raise DeliveryUncertain(f"no answer from Telegram in time, so it may have arrived ({exc})") from exc
    except Forbidden as exc:
        raise DeliveryRefused(exc.message) from exc
    except BadRequest as exc:
        if any(words in exc.message.lower() for words in CHAT_REFUSALS):
            raise DeliveryRefused(exc.message) from exc
        raise
