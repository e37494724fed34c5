"""What to do when a client-API call fails. nio answers with an ErrorResponse rather than raising;
`checked` turns one into a MatrixError, so that the one retry helper (bridge.retry) can rule on it.

    MatrixError, M_LIMIT_EXCEEDED or HTTP 429   retried after the retry_after_ms the server named
    MatrixError, HTTP 5xx                       retried with a back-off
    MatrixError, M_FORBIDDEN or M_NOT_FOUND     DeliveryRefused: the bot is not in the room, or may
                                                not write there (a send or an edit)
    MatrixError, anything else                  given up: a bug or a config error, logged by the courier
    no connection, a timeout, a dropped answer  retried: every send carries a transaction id, and
                                                the homeserver answers a repeat with the event it
                                                made the first time, so nothing shows twice
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import aiohttp
from nio import ErrorResponse

from bridge.errors import DeliveryRefused
from bridge.retry import GIVE_UP, RETRY, Backoff, Verdict, retry_after

T = TypeVar("T")

SEND_BACKOFF = Backoff(attempts=5, base=0.5, cap=30.0, retry_after_cap=120.0)
# Refusals of a room, for good: the bot left or was removed, the room is gone, or its power level
# is too low to write.
ROOM_REFUSALS = frozenset({"M_FORBIDDEN", "M_NOT_FOUND", "M_UNKNOWN_ROOM"})


class MatrixError(Exception):
    """An error answer of the homeserver: its errcode (M_FORBIDDEN, ...), its words and HTTP status."""

    def __init__(
        self, what: str, errcode: str, message: str, status: int, retry_after_ms: int | None
    ) -> None:
        super().__init__(f"{what}: {errcode} {message}".strip())
        self.what = what
        self.errcode = errcode
        self.message = message
        self.status = status
        self.retry_after_ms = retry_after_ms


def checked(response: Any, what: str) -> Any:
    """The response, or a MatrixError in its place where the homeserver said no."""
    if not isinstance(response, ErrorResponse):
        return response
    transport = response.transport_response
    status = transport.status if transport is not None else 0
    # nio keeps the errcode in status_code (a str), or the HTTP status where the body had none.
    errcode = str(response.status_code or f"HTTP {status}")
    raise MatrixError(what, errcode, str(response.message or ""), status, response.retry_after_ms)


def describe(exc: BaseException) -> str:
    """A failure in one line, for retry lines and row reasons (no token: it travels in a header)."""
    if isinstance(exc, MatrixError):
        return f"{exc.errcode} {exc.message}".strip()
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def classify(exc: BaseException) -> Verdict:
    """The homeserver's named wait, its 5xx and the network are retried; a refusal is final."""
    if isinstance(exc, MatrixError):
        if exc.errcode == "M_LIMIT_EXCEEDED" or exc.status == 429:
            return retry_after(exc.retry_after_ms / 1000 if exc.retry_after_ms is not None else None)
        return RETRY if exc.status >= 500 else GIVE_UP
    if isinstance(exc, TimeoutError | aiohttp.ClientError | OSError):
        # May have arrived; repeating it is safe where the call carries a transaction id.
        return Verdict(True, may_have_arrived=True)
    return GIVE_UP


@contextmanager
def refusals(what: str) -> Iterator[None]:
    """The homeserver's final refusals of a room as the core's DeliveryRefused (the row failed, one
    WARNING), with what was asked and why."""
    try:
        yield
    except MatrixError as exc:
        if exc.errcode in ROOM_REFUSALS:
            raise DeliveryRefused(f"{what}: {exc.errcode} {exc.message}".strip()) from exc
        raise
    except asyncio.CancelledError:
        raise
