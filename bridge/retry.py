"""The one retry policy: classify each failure, back off with jitter or as told, never resend blindly."""

from __future__ import annotations

import asyncio
import email.utils
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from tenacity import AsyncRetrying, RetryCallState

T = TypeVar("T")

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do about one failure: retry or not, after the server's wait if it named one."""

    retry: bool
    after: float | None = None
    # The request may have reached the other side (e.g. a read timeout): repeat it only if safe.
    may_have_arrived: bool = False


RETRY = Verdict(True)
GIVE_UP = Verdict(False)
Classifier = Callable[[BaseException], Verdict]


def retry_after(seconds: float | None) -> Verdict:
    """Retry, after exactly `seconds` (capped by the Backoff) when given, else after the usual back-off."""
    return Verdict(True, after=seconds)


class RetryableError(Exception):
    """A failure worth another try, for callers that raise their own; `retry_after` is the server's wait.

    `classify_retryable` retries exactly these. When the tries run out it is raised with `attempts` set,
    so the caller can say "after N attempts".
    """

    def __init__(self, reason: str, *, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after
        self.attempts = 0


def classify_retryable(error: BaseException) -> Verdict:
    """Retry a RetryableError (after its Retry-After when it has one); give up on anything else."""
    if isinstance(error, RetryableError):
        return retry_after(error.retry_after)
    return GIVE_UP


@dataclass(frozen=True, slots=True)
class Backoff:
    """How many tries, how long between them, and for how long in all."""

    attempts: int = 3  # tries in all, the first included
    base: float = 0.5
    cap: float = 20.0
    retry_after_cap: float = 60.0
    # Give up once the next wait would end past this many seconds since the first try.
    total_s: float | None = None

    def wait(self, failures: int, after: float | None = None) -> float:
        """The wait after the `failures`-th failure in a row: the server's (capped) if it named one.

        Otherwise base, 2·base, 4·base... up to the cap, each scaled by a random factor in [0.75, 1]:
        the waits still grow, and clients that failed together do not come back in step.
        """
        if after is not None:
            return max(0.0, min(after, self.retry_after_cap))
        grown = self.base * 2.0 ** min(max(failures - 1, 0), 64)
        return min(self.cap, grown) * random.uniform(0.75, 1.0)


async def with_retries(
    attempt: Callable[[], Awaitable[T]],
    *,
    what: str,
    log: logging.Logger,
    classify: Classifier = classify_retryable,
    backoff: Backoff = Backoff(),
    safe_to_resend: bool = True,
    describe: Callable[[BaseException], str] | None = None,
    level: int = logging.WARNING,
    sleep: Sleep = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Run `attempt` until it succeeds, the classifier gives up, or the tries or the time run out.

    `classify` rules on each failure (an Exception; cancellation and other BaseExceptions are never
    retried). `safe_to_resend=False` marks a call whose repeat would show twice (a Telegram message
    has no idempotency key): a failure whose verdict says it may have arrived is then given up.

    Each retry logs one `retry_line` at `level`, named by `what` (the component and the request),
    with the reason from `describe` (default: the exception's text; pass one that masks secrets).
    The last failure is raised as it was, a RetryableError with `attempts` set. `sleep` and `clock`
    are injectable so tests run the waits, and the total-time cap, without waiting.
    """
    # The first try runs outside tenacity: most calls succeed at once, and setting up its machinery
    # for each of them showed in profiles of the model request path.
    attempts = 1
    try:
        return await attempt()
    except Exception as error:
        first: Exception | None = error
    describe = describe or _describe
    verdicts: dict[int, Verdict] = {}

    async def counted() -> T:
        nonlocal attempts, first
        if first is not None:
            # Tenacity's first try is the one already made: it judges that failure as any other.
            error, first = first, None
            raise error
        attempts += 1
        return await attempt()

    def should_retry(state: RetryCallState) -> bool:
        error = state.outcome.exception() if state.outcome else None
        if error is None or not isinstance(error, Exception):
            return False  # success, or a BaseException such as cancellation
        verdict = classify(error)
        verdicts[state.attempt_number] = verdict
        return verdict.retry and (safe_to_resend or not verdict.may_have_arrived)

    def wait(state: RetryCallState) -> float:
        verdict = verdicts.get(state.attempt_number, RETRY)
        return backoff.wait(state.attempt_number, verdict.after)

    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        if error is not None and state.next_action is not None:
            line = retry_line(
                what,
                describe(error),
                wait=state.next_action.sleep,
                attempt=state.attempt_number + 1,
                attempts=backoff.attempts,
            )
            log.log(level, "%s", line)

    started = clock()

    def stop(state: RetryCallState) -> bool:
        # The wait is known by now: give up rather than start a wait that would end past the cap.
        if state.attempt_number >= backoff.attempts:
            return True
        return backoff.total_s is not None and clock() - started + state.upcoming_sleep > backoff.total_s

    retrying = AsyncRetrying(
        stop=stop, wait=wait, retry=should_retry, before_sleep=before_sleep, sleep=sleep, reraise=True
    )
    try:
        return await retrying(counted)
    except RetryableError as error:
        error.attempts = attempts
        raise


def retry_line(
    what: str,
    reason: str,
    *,
    wait: float | None,
    attempt: int,
    attempts: int | None = None,
    then: str = "retrying",
) -> str:
    """The one log line for a retry: "<what> failed (<reason>); retrying in X s (attempt n of m)".

    `attempt` is the try about to be made. Loops that never give up (Telegram's poller) leave out
    `attempts`; one that waits for the other side to try again (a webhook) passes no `wait` and says
    what happens instead in `then`.
    """
    when = "" if wait is None else f" in {wait:.1f} s"
    of = "" if attempts is None else f" of {attempts}"
    return f"{what} failed ({reason}); {then}{when} (attempt {attempt}{of})"


def _describe(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


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
