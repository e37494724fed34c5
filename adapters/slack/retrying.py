"""What to do when a Web API call fails: a 429 names its wait, a refusal is final, the network is
retried, and a post that may have reached Slack is never sent twice (chat.postMessage has no
idempotency key).

    SlackApiError, 429 or "ratelimited"     retried after Retry-After (capped)
    SlackApiError, 5xx or a server error    retried with a back-off
    SlackApiError, a refusal of the chat    DeliveryRefused: channel_not_found, not_in_channel, ...
    SlackApiError, anything else            given up: a bug or a config error, logged by the courier
    no connection, connect timeout          retried: nothing reached Slack
    read timeout, connection lost mid-way   may have arrived: an edit is repeated, a post is given up
                                            as DeliveryUncertain
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

import aiohttp
from slack_sdk.errors import SlackApiError

from bridge.errors import DeliveryRefused, DeliveryUncertain
from bridge.retry import GIVE_UP, RETRY, Backoff, Verdict, parse_retry_after, retry_after

MAX_ATTEMPTS = 5
SEND_BACKOFF = Backoff(attempts=MAX_ATTEMPTS, base=0.5, cap=30.0, retry_after_cap=120.0)
# Errors that refuse the chat itself, for good: no such channel, the bot was removed or never invited,
# the channel archived, the user deactivated, or the workspace forbids the bot to post there.
CHAT_REFUSALS = frozenset(
    {
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "account_inactive",
        "user_not_found",
        "cannot_dm_bot",
        "restricted_action",
        "restricted_action_read_only_channel",
        "restricted_action_thread_only_channel",
        "restricted_action_non_threadable_channel",
        "team_access_not_granted",
        "ekm_access_denied",
    }
)
# chat.update's refusals of one message: gone, not ours, or past the workspace's edit window.
EDIT_REFUSALS = frozenset({"message_not_found", "cant_update_message", "edit_window_closed"})
# Slack's own words for "try again later".
_PASSING = frozenset(
    {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)


def error_code(exc: SlackApiError) -> str:
    """Slack's error string ("channel_not_found"), or the HTTP status where the body had none."""
    data = exc.response.data
    code = data.get("error") if isinstance(data, dict) else None
    return str(code) if code else f"HTTP {exc.response.status_code}"


def describe(exc: BaseException) -> str:
    """A failure in one line, for retry lines and row reasons: SlackApiError's own text quotes the
    whole response, and none of these carries the token (it travels in a header)."""
    if isinstance(exc, SlackApiError):
        return error_code(exc)
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _unsent(exc: BaseException) -> bool:
    """The request never left: no connection was made (refused, DNS, a connect timeout)."""
    return isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError)


def classify(exc: BaseException) -> Verdict:
    """A Web API failure: Slack's named wait, its passing errors and the network are retried; a read
    that timed out, or a connection lost after the request went, may have been carried out."""
    if isinstance(exc, SlackApiError):
        status = exc.response.status_code
        code = error_code(exc)
        if status == 429 or code == "ratelimited":
            return retry_after(parse_retry_after(exc.response.headers))
        if status >= 500 or code in _PASSING:
            return RETRY
        return GIVE_UP
    if _unsent(exc):
        return RETRY
    if isinstance(exc, TimeoutError | aiohttp.ClientError | OSError):
        # aiohttp's read timeouts are TimeoutErrors too (SocketTimeoutError, a total timeout).
        return Verdict(True, may_have_arrived=True)
    return GIVE_UP


@contextmanager
def refusals(method: str, *, posts: bool = True) -> Iterator[None]:
    """Slack's final refusals of a chat or a message as the core's DeliveryRefused (one WARNING, the
    row failed); where the call `posts` a message, a failure that may have delivered it as
    DeliveryUncertain (the row `uncertain`, never sent again by itself). An edit is repeated
    instead, so its last failure stays what it was."""
    try:
        yield
    except SlackApiError as exc:
        code = error_code(exc)
        if code in CHAT_REFUSALS or code in EDIT_REFUSALS:
            raise DeliveryRefused(f"{method}: {code}") from exc
        raise
    except asyncio.CancelledError:
        raise
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        if not posts or _unsent(exc):
            raise
        raise DeliveryUncertain(
            f"no answer from Slack to {method} in time, so it may have arrived ({describe(exc)})"
        ) from exc
