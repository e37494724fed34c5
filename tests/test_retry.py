"""The one retry helper: what it retries, how long it waits, and what it never sends twice."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import aiohttp
import discord
import httpx
import pytest
from telegram.error import BadRequest, Forbidden, NetworkError, RetryAfter, TimedOut

from adapters.discord.adapter import _intake_verdict, _send_verdict
from adapters.telegram.retrying import classify as telegram_verdict
from bridge.errors import IntakeUnavailable
from bridge.retry import (
    GIVE_UP,
    RETRY,
    Backoff,
    RetryableError,
    Verdict,
    classify_retryable,
    retry_after,
    retry_line,
    with_retries,
)

log = logging.getLogger("tests.retry")
FOUR_TRIES = Backoff(attempts=4, base=1.0, cap=100.0)


class FakeTime:
    """A sleep that only moves a clock, so waits and the total-time cap run without waiting."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


class Flaky:
    """Fails with the given errors in turn, then answers "ok"; counts its calls."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


@pytest.fixture
def time() -> FakeTime:
    return FakeTime()


async def run(
    call: Flaky,
    time: FakeTime,
    *,
    classify: Callable[[BaseException], Verdict] = classify_retryable,
    backoff: Backoff = FOUR_TRIES,
    safe_to_resend: bool = True,
) -> str:
    return await with_retries(
        call,
        what="Test request",
        log=log,
        classify=classify,
        backoff=backoff,
        safe_to_resend=safe_to_resend,
        sleep=time.sleep,
        clock=time.clock,
    )


async def test_a_retryable_failure_is_tried_again_until_it_succeeds(time: FakeTime) -> None:
    call = Flaky(RetryableError("502"), RetryableError("502"))
    assert await run(call, time) == "ok"
    assert call.calls == 3 and len(time.waits) == 2


async def test_waits_grow_from_the_base_with_jitter_and_stop_at_the_cap(time: FakeTime) -> None:
    call = Flaky(*[RetryableError("down") for _ in range(5)])
    await run(call, time, backoff=Backoff(attempts=6, base=1.0, cap=5.0))
    # 1, 2, 4, then the cap of 5 twice, each scaled by a factor in [0.75, 1].
    for wait, full in zip(time.waits, [1.0, 2.0, 4.0, 5.0, 5.0], strict=True):
        assert 0.75 * full <= wait <= full


async def test_the_servers_retry_after_is_waited_exactly_but_never_past_its_cap(time: FakeTime) -> None:
    call = Flaky(RetryableError("429", retry_after=7.0), RetryableError("429", retry_after=600.0))
    await run(call, time, backoff=Backoff(attempts=3, retry_after_cap=60.0))
    assert time.waits == [7.0, 60.0]


async def test_an_error_the_classifier_gives_up_on_is_raised_at_once(time: FakeTime) -> None:
    call = Flaky(ValueError("400 bad request"))
    with pytest.raises(ValueError, match="400"):
        await run(call, time)
    assert call.calls == 1 and time.waits == []


async def test_the_last_failure_is_raised_with_the_number_of_attempts(time: FakeTime) -> None:
    call = Flaky(*[RetryableError(f"try {n}") for n in range(1, 10)])
    with pytest.raises(RetryableError, match="try 4") as raised:
        await run(call, time, backoff=Backoff(attempts=4))
    assert raised.value.attempts == 4 and call.calls == 4


@pytest.mark.parametrize(
    ("may_have_arrived", "safe_to_resend", "calls"),
    [(True, False, 1), (False, False, 2), (True, True, 2)],
    ids=["may have arrived: not sent twice", "surely not arrived: resent", "idempotent: repeated"],
)
async def test_a_failure_is_repeated_only_if_it_surely_did_not_arrive_or_a_repeat_is_harmless(
    time: FakeTime, may_have_arrived: bool, safe_to_resend: bool, calls: int
) -> None:
    def timed_out(exc: BaseException) -> Verdict:
        # A read timeout may have arrived; a connect timeout surely did not.
        return Verdict(True, may_have_arrived=may_have_arrived)

    call = Flaky(TimeoutError("timed out"))
    if calls == 1:
        with pytest.raises(TimeoutError):
            await run(call, time, classify=timed_out, safe_to_resend=safe_to_resend)
    else:
        assert await run(call, time, classify=timed_out, safe_to_resend=safe_to_resend) == "ok"
    assert call.calls == calls


async def test_the_total_time_cap_gives_up_before_a_wait_that_would_end_past_it(time: FakeTime) -> None:
    call = Flaky(*[RetryableError("busy", retry_after=10.0) for _ in range(9)])
    with pytest.raises(RetryableError):
        await run(call, time, backoff=Backoff(attempts=10, retry_after_cap=60.0, total_s=25.0))
    # Waits of 10 and 10 end at 20 s; a third would end at 30 s, past the 25 s cap.
    assert time.waits == [10.0, 10.0] and call.calls == 3


async def test_cancellation_is_never_retried(time: FakeTime) -> None:
    call = Flaky(asyncio.CancelledError())
    with pytest.raises(asyncio.CancelledError):
        await run(call, time, classify=lambda exc: RETRY)
    assert call.calls == 1 and time.waits == []


async def test_each_retry_logs_one_line_with_the_reason_the_wait_and_the_attempt(
    time: FakeTime, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tests.retry")
    await run(Flaky(RetryableError("HTTP 503", retry_after=2.0)), time, backoff=Backoff(attempts=3))
    (line,) = [r.getMessage() for r in caplog.records if r.name == "tests.retry"]
    assert line == "Test request failed (HTTP 503); retrying in 2.0 s (attempt 2 of 3)"


def test_the_verdicts_read_as_what_they_do() -> None:
    assert RETRY.retry and not GIVE_UP.retry
    assert retry_after(3.0) == Verdict(True, after=3.0)
    assert classify_retryable(RetryableError("x", retry_after=1.5)) == retry_after(1.5)
    assert classify_retryable(KeyError("x")) == GIVE_UP


def test_a_backoff_wait_is_never_negative_or_past_its_caps() -> None:
    backoff = Backoff(base=0.5, cap=30.0, retry_after_cap=120.0)
    assert backoff.wait(1, after=-5.0) == 0.0
    assert backoff.wait(1, after=1e9) == 120.0
    assert all(0.375 <= backoff.wait(n) <= 30.0 for n in range(1, 200))


def test_the_retry_line_reads_the_same_for_bounded_endless_and_waitless_retries() -> None:
    assert (
        retry_line("Discord: send", "reset", wait=1.25, attempt=2, attempts=4)
        == "Discord: send failed (reset); retrying in 1.2 s (attempt 2 of 4)"
    )
    assert (
        retry_line("Telegram: polling", "502", wait=30.0, attempt=11)
        == "Telegram: polling failed (502); retrying in 30.0 s (attempt 11)"
    )
    assert (
        retry_line("Telegram: webhook", "locked", wait=None, attempt=2, then="answered 500")
        == "Telegram: webhook failed (locked); answered 500 (attempt 2)"
    )


async def test_a_classifier_that_names_a_wait_gets_it_even_for_an_error_of_its_own(time: FakeTime) -> None:
    def flood(exc: BaseException) -> Verdict:
        return retry_after(4.0) if isinstance(exc, OSError) else GIVE_UP

    call = Flaky(OSError("429"), OSError("429"))
    assert await run(call, time, classify=flood) == "ok"
    assert time.waits == [4.0, 4.0]


# -- the callers' classifiers -----------------------------------------------------------------


def _raised_from(error: Exception, cause: Exception) -> Exception:
    try:
        raise error from cause
    except Exception as raised:
        return raised


def test_telegram_retries_flood_control_after_its_wait_and_gives_up_on_a_refusal() -> None:
    assert telegram_verdict(RetryAfter(5)) == retry_after(5.0)
    assert telegram_verdict(NetworkError("Bad Gateway")) == RETRY
    for refused in (BadRequest("chat not found"), Forbidden("bot was blocked"), ValueError("bug")):
        assert telegram_verdict(refused) == GIVE_UP


def test_telegram_counts_a_read_timeout_as_maybe_delivered_but_not_a_connect_or_pool_timeout() -> None:
    read = _raised_from(TimedOut(), httpx.ReadTimeout("read"))
    connect = _raised_from(TimedOut(), httpx.ConnectTimeout("connect"))
    pool = TimedOut("Pool timeout: all connections are occupied. Request was *not* sent to Telegram.")
    assert telegram_verdict(read) == Verdict(True, may_have_arrived=True)
    assert telegram_verdict(connect) == RETRY
    assert telegram_verdict(pool) == RETRY


def test_discord_retries_lost_connections_and_5xx_on_send_and_only_a_busy_store_on_intake() -> None:
    # Stand-ins for aiohttp's response; typed as Any, since discord.py's hints name requests' Response
    # too, which mypy resolves wherever requests is installed (mkdocs brings it).
    unavailable: Any = SimpleNamespace(status=503, reason="Service Unavailable")
    forbidden: Any = SimpleNamespace(status=403, reason="Forbidden")
    assert _send_verdict(aiohttp.ServerDisconnectedError()) == RETRY
    assert _send_verdict(ConnectionResetError()) == RETRY
    assert _send_verdict(discord.DiscordServerError(unavailable, "down")) == RETRY
    assert _send_verdict(discord.Forbidden(forbidden, "Missing Access")) == GIVE_UP
    assert _intake_verdict(IntakeUnavailable("database is locked")) == RETRY
    assert _intake_verdict(ValueError("malformed")) == GIVE_UP
