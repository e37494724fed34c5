"""Who talks in the web chat: the operator in `main`, or a named member session `web:dm:<name>`.

The dashboard's user and an API caller both hold the admin token: they are the operator. Talking as the
operator is talking in `main`, as an owner (`WEB_OPERATOR` is made an owner where the admin server runs,
bridge.cli.serve). Any other name is a member's own DM on the `web` surface, whose runs see that chat
alone, as a stranger's DM on Telegram would: a sandboxed session for a script or a test.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Final

from bridge.errors import SessionKeyError
from bridge.events import Inbound
from bridge.sessions import keys

SURFACE: Final = "web"
# The operator's user id on the web surface, and as `owners` writes them.
OPERATOR_ID: Final = "operator"
WEB_OPERATOR: Final = f"{SURFACE}:{OPERATOR_ID}"
# What a caller that names no session talks in (POST /v1/chat/completions without `user`).
DEFAULT_NAME: Final = "api"
# A member session's name: one part of a session key, and readable in a URL and a select box.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# The id a browser or caller may give a message, so a POST sent twice is stored once.
_MESSAGE_ID = re.compile(r"[A-Za-z0-9-]{8,64}")


class BadName(ValueError):
    """A session name or message id the web chat does not take; the message says why, for the caller."""


@dataclass(frozen=True, slots=True)
class WebTalker:
    """One web chat: its name as the page shows it, its chat id on the web surface, and whom it is."""

    name: str
    # The route's chat id (the operator's for main): what the sender publishes a chat's events under.
    chat_id: str
    operator: bool

    @property
    def key(self) -> str:
        """The session key the dispatcher files its messages under (the session service decides it; this
        is what it decides for this talker)."""
        return keys.MAIN if self.operator else str(keys.dm(SURFACE, self.chat_id))

    def inbound(self, text: str, message_id: str | None = None) -> Inbound:
        """A message from this talker, as the web surface's adapter would normalize it."""
        if message_id is not None and not _MESSAGE_ID.fullmatch(message_id):
            raise BadName("a message id is 8 to 64 letters, digits or '-'")
        return Inbound(
            surface=SURFACE,
            chat_type="dm",
            chat_id=self.chat_id,
            sender_id=self.chat_id,
            text=text,
            message_id=message_id or uuid.uuid4().hex,
            sender_name=self.chat_id,
        )


def talker(name: str | None) -> WebTalker:
    """The web chat called `name` ("main", or a member session's name; None: the default one)."""
    name = (name or DEFAULT_NAME).strip()
    if name == keys.MAIN:
        return WebTalker(keys.MAIN, OPERATOR_ID, operator=True)
    if name == OPERATOR_ID:
        raise BadName(f"{OPERATOR_ID!r} is the operator's own name: talk as the operator in 'main'")
    if not _NAME.fullmatch(name):
        raise BadName(
            f"session name {name[:80]!r}: 'main', or 1 to 64 letters, digits, '.', '_' or '-' "
            "(starting with a letter or digit)"
        )
    try:
        keys.dm(SURFACE, name)
    except SessionKeyError as exc:  # the key grammar is the last word, whatever the pattern above allows
        raise BadName(str(exc)) from None
    return WebTalker(name, name, operator=False)


def name_of_key(key: str) -> str | None:
    """The web chat name of a session key: "main", a member session's name, or None for any other chat."""
    if key == keys.MAIN:
        return keys.MAIN
    try:
        parsed = keys.parse(key)
    except SessionKeyError:
        return None
    if parsed.surface != SURFACE or parsed.scope != "dm" or parsed.id in (None, OPERATOR_ID):
        return None
    return parsed.id
