"""Retry a flaky network call with tenacity: jittered exponential backoff, or the server's Retry-After."""

from __future__ import annotations

import asyncio
import email.utils
import math
import random
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
)

T = TypeVar("T")

Sleep = Callable[[float], Awaitable[None]]
OnRetry = Callable[["RetryableError", int, float], None]


class RetryableError(Exception):
    """One failed attempt worth repeating; `retry_after` is the wait the server asked for, if any."""

    def __init__(self, reason: str, *, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after
        # Filled in by with_retries when it gives up, so the caller can say "after N attempts".
        self.attempts = 0


def parse_retry_after(headers: Mapping[str, str], *, now: datetime | None = None) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `Retry-After` as seconds or an HTTP date; None if absent."""
    millis = headers.get("retry-after-ms")
    if millis:
        # OpenAI sends this finer-grained variant alongside Retry-After; prefer it when it parses.
        seconds = _finite(millis)
        if seconds is not None:
            return max(0.0, seconds / 1000)
    value = (headers.get("retry-after") or "").strip()
    if not value:
        return None
    seconds = _finite(value)
    if seconds is None:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    return max(0.0, seconds)


def _finite(value: str) -> float | None:
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def backoff_wait(*, base: float, cap: float, retry_after_cap: float) -> Callable[[RetryCallState], float]:
    """A tenacity wait: exactly the server's Retry-After (capped) when given, else jittered exponential."""

    def wait(state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, RetryableError) and error.retry_after is not None:
            return min(error.retry_after, retry_after_cap)
        # base, 2·base, 4·base... plus up to one base of jitter, so clients that failed together
        # do not retry in lockstep. Written out rather than tenacity's wait_exponential_jitter,
        # whose parameter names changed within 9.x.
        exponent = min(state.attempt_number - 1, 64)
        return min(cap, base * 2.0**exponent + random.uniform(0, base))

    return wait


async def with_retries(
    attempt: Callable[[], Awaitable[T]],
    *,
    max_retries: int,
    backoff_base: float = 0.5,
    backoff_cap: float = 20.0,
    retry_after_cap: float = 60.0,
    sleep: Sleep = asyncio.sleep,
    on_retry: OnRetry | None = None,
) -> T:
    """Run `attempt`, repeating it up to `max_retries` more times while it raises RetryableError.

    When every attempt failed, the last RetryableError is raised with `.attempts` set. Any other
    exception (including cancellation) propagates at once.
    """
    attempts = 0

    async def counted() -> T:
        nonlocal attempts
        attempts += 1
        return await attempt()

    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        if on_retry is not None and isinstance(error, RetryableError) and state.next_action:
            on_retry(error, state.attempt_number, state.next_action.sleep)

    retrying = AsyncRetrying(
        stop=stop_after_attempt(max_retries + 1),
        wait=backoff_wait(base=backoff_base, cap=backoff_cap, retry_after_cap=retry_after_cap),
        retry=retry_if_exception_type(RetryableError),
        before_sleep=before_sleep,
        sleep=sleep,
        reraise=True,
    )
    try:
        return await retrying(counted)
    except RetryableError as error:
        error.attempts = attempts
        raise
