"""Config of the runs nobody typed: [tasks] (scheduled tasks) and [[hooks]] (webhooks)."""

from __future__ import annotations

import re

from pydantic import Field, SecretStr, field_validator

from bridge.config.base import Section
from bridge.errors import SessionKeyError
from bridge.sessions import keys
from bridge.tasks import template

_HOOK_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
# A dotted path into the event's JSON body: `id`, `release.id`, `commits.0.id`.
_FIELD_PATH = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
MIN_HOOK_SECRET = 16
DEFAULT_HOOK_PROMPT = "Tell the chat about this event in a few lines.\n\n{{body}}"
# `session`: one new session for every event, or one session for all of the hook's events.
PER_EVENT = "per_event"
FIXED = "fixed"


class TasksSettings(Section):
    """Scheduled tasks (the `scheduled_tasks` tool group): how they are kept and caught up."""

    # A firing missed while the bot was down runs at start if it is at most this late; older ones
    # are recorded as missed and the chat that made the task is told.
    catch_up_s: float = Field(600.0, ge=0)
    # Active and paused tasks one chat may hold; past it, schedule_task refuses.
    max_per_chat: int = Field(20, ge=0, le=1000)
    # Consecutive failed firings after which a task is paused (and its chat told).
    pause_after_failures: int = Field(3, ge=1, le=100)
    # In a shared chat, tasks waiting that one member (not an owner) may have made there.
    max_per_member: int = Field(3, ge=0, le=1000)
    # Whether members may make recurring tasks in a shared chat (owners always may); off, so nobody
    # but an owner can make the bot post in a group on a schedule.
    members_recurring: bool = False
    # The shortest gap between two firings of a member's recurring task, in seconds.
    member_min_interval_s: float = Field(900.0, ge=60)


class HookSettings(Section):
    """One [[hooks]] entry: `POST /hooks/<name>`, signed with its secret, answered in `deliver_to`."""

    name: str
    # Signs each request (X-Bridge-Signature: sha256=HMAC-SHA256 hex of '<X-Bridge-Timestamp>.<body>'),
    # or is sent whole as a bearer token (which can be replayed).
    secret: SecretStr
    # The session key of the chat that receives each answer, under that chat's send policy.
    deliver_to: str
    # What the run is asked: {{body}} (the JSON body), {{body.some.field}}, {{hook}}, {{event_id}}.
    prompt: str = DEFAULT_HOOK_PROMPT
    # "per_event": each event runs in a session of its own, hook:<name>.<event>; "fixed": all in
    # hook:<name>, so each run sees the earlier events; or a hook:<id> key of your choosing.
    session: str = PER_EVENT
    # A field of the body that identifies the event (e.g. "id"): a second request with the same value
    # is a redelivery and does nothing. Without it, an Idempotency-Key header inside the signature
    # does the same; one outside it is ignored.
    id_field: str | None = None
    # A signed request's X-Bridge-Timestamp may be at most this many seconds from the server's clock
    # (either way), and its signature is taken once within that window: older, newer or reused
    # requests get 401.
    max_age_s: int = Field(300, ge=1, le=86_400)
    # false: a signature of the body alone, without X-Bridge-Timestamp, is taken too, as before that
    # header existed. Such requests can be replayed by whoever saw one; only for senders not yet updated.
    require_timestamp: bool = True
    # A larger body is refused with 413 before anything is stored.
    max_body_bytes: int = Field(65_536, ge=64, le=10 * 1024 * 1024)
    enabled: bool = True

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _HOOK_NAME.match(value):
            raise ValueError(
                f"{value!r} is not a hook name: a-z, 0-9, _ and - (up to 64), as in POST /hooks/<name>"
            )
        return value

    @field_validator("secret")
    @classmethod
    def _secret(cls, value: SecretStr) -> SecretStr:
        if len(value.get_secret_value()) < MIN_HOOK_SECRET:
            raise ValueError(
                f"must be at least {MIN_HOOK_SECRET} characters (e.g. `openssl rand -hex 24`): it is all "
                "that keeps strangers from making the bot run"
            )
        return value

    @field_validator("deliver_to")
    @classmethod
    def _target(cls, value: str) -> str:
        try:
            kind = keys.kind(value)
        except SessionKeyError as exc:
            raise ValueError(str(exc)) from None
        if kind in ("cron", "hook", "node", "agent"):
            raise ValueError(f"{value!r} is no chat: give the session key of a chat, e.g. 'main'")
        return value

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, value: str) -> str:
        problem = template.problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("session")
    @classmethod
    def _session(cls, value: str) -> str:
        if value in (PER_EVENT, FIXED):
            return value
        try:
            if keys.kind(value) == "hook":
                return value
        except SessionKeyError:
            pass
        raise ValueError(f"{value!r}: use {PER_EVENT!r}, {FIXED!r} or a key such as 'hook:deploys'")

    @field_validator("id_field")
    @classmethod
    def _id_field(cls, value: str | None) -> str | None:
        if value is not None and not _FIELD_PATH.match(value):
            raise ValueError(f"{value!r} is not a field path such as 'id' or 'release.id'")
        return value

    def session_key(self, event: str) -> str:
        """The session an event of this hook runs in; `event` names the event (per_event only)."""
        if self.session == PER_EVENT:
            return str(keys.hook(f"{self.name}.{event}"))
        if self.session == FIXED:
            return str(keys.hook(self.name))
        return self.session


def check_hooks(hooks: list[HookSettings], *, served: bool | None) -> None:
    """Names are unique, and (where `served` is known) some server of `bridge run` takes requests."""
    seen: set[str] = set()
    for hook in hooks:
        if hook.name in seen:
            raise ValueError(f"two entries are named {hook.name!r}: each name is one URL, /hooks/<name>")
        seen.add(hook.name)
    if served is False and any(hook.enabled for hook in hooks):
        raise ValueError(
            "webhooks are served by the admin server or by the Telegram webhook's server, and neither is "
            "on: set [admin] enabled = true (it may stay on 127.0.0.1 behind a reverse proxy), or run "
            'Telegram on a webhook ([telegram] enabled = true, mode = "webhook")'
        )


__all__ = ["DEFAULT_HOOK_PROMPT", "FIXED", "PER_EVENT", "HookSettings", "TasksSettings", "check_hooks"]
