"""The platform contract: what a platform adapter is, what it can do, and what the core asks of it.

Every capability is declared here once, with its type and its default, as an attribute of `Sender`
or `Adapter`; an adapter sets the ones its platform has (as class attributes, or per instance), and
the core reads them as typed attributes. Nothing is looked up by name with a default, so a misspelt
capability in the core fails the type check instead of silently reading as "no".

Optional operations are methods here too. Each default either does the plain thing (`split` cuts at
`text_limit`, `edit_reply` edits as plain text, `send_file` sends the caption with the file named,
`typing` shows nothing) or raises `bridge.errors.Unsupported`, which the core expects and handles
(`stream`, `edit`, `download`, `start_sending`): override the ones the platform offers.

    Sender                    what the core delivers through: send, edit in place, typing, files
    └── Adapter               a platform connection: built from settings, started, stopped

`docs/adapters.md` walks through a minimal adapter; `adapters/base.py` documents the plugin API (the
entry points, the lifecycle, what an adapter may and may not touch). `GuardedAdapter`
(bridge.gateway.lifecycle) wraps every adapter the core loads and enforces that lifecycle.

This module sits in the base layer: it imports only the vocabulary it speaks (`bridge.events`,
`bridge.errors`, `bridge.text`).
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, Self

from bridge.errors import Unsupported
from bridge.events import Attachment, InboundHandler, Outbound, Route
from bridge.text import split_message

# (method, path, aiohttp handler): a route the core asks an adapter's own HTTP server to serve.
HttpRoute = tuple[str, str, Callable[..., Awaitable[Any]]]


class Sender(ABC):
    """What the core needs of a platform to deliver: send, and where it can, edit, type and send files.

    `send` is the one operation every sender implements. The capabilities below are read by the
    core before it plans a reply; their defaults describe a platform that can do nothing extra.
    """

    # The entry point's name (console, telegram, discord, ...); every Inbound, Route and row carries it.
    surface: str

    # -- capabilities: declared once, here, with their defaults --------------------------------------

    # `edit` works: tool activity is one message edited in place (else one message per finished tool).
    supports_edit: bool = False
    # The longest message; `split` cuts longer items at it. None: items go whole.
    text_limit: int | None = None
    # The least time between two edits of one message (the platform's rate limits): activity edits
    # and draft updates are coalesced to it.
    min_edit_interval_s: float = 0.0
    # The platform drops a second send with the same Outbound.nonce, so a send cut short by a crash
    # may be repeated after a restart (else the row is resent or marked uncertain, per the config).
    dedupes_by_nonce: bool = False
    # An answer may stream into a "draft" message edited as it grows (at most every
    # min_edit_interval_s); the reply's first chunk then edits that message (Outbound.edit_of,
    # through `edit_reply`). Needs `edit`.
    streams_drafts: bool = False
    # The surface prints text as it comes (`stream`), as a terminal does; takes precedence over drafts.
    supports_stream: bool = False
    # The largest file and photo `send_file` may send; a larger one is refused before it is queued.
    # None: the core's own ceiling (bridge.gateway.files_out), and any image goes as a photo.
    max_upload_bytes: int | None = None
    max_photo_bytes: int | None = None

    # -- operations -----------------------------------------------------------------------------

    @abstractmethod
    async def send(self, item: Outbound) -> str | None:
        """Send one chunk and return the platform's message id (None where the surface has none).

        Never let model text notify people: no @everyone, @here, role or user mentions.
        """

    async def edit(self, route: Route, message_id: str, text: str) -> None:
        """Replace the text of a message this sender sent (where `supports_edit`)."""
        raise Unsupported(f"{self.surface} cannot edit messages")

    async def typing(self, route: Route) -> None:
        """Show that the bot is typing, where the platform has such an indicator; by default nothing."""
        return None

    def split(self, kind: str, text: str) -> list[str]:
        """The chunks one item is sent as: cut at `text_limit`, else whole. Override where the platform
        needs its own splitting (formatting that must not be cut in half)."""
        return split_message(text, self.text_limit) if self.text_limit is not None else [text]

    async def edit_reply(self, route: Route, message_id: str, text: str) -> None:
        """The reply's first chunk into the draft it streamed into, with the reply's formatting where
        the platform formats replies (by default a plain `edit`)."""
        await self.edit(route, message_id, text)

    async def stream(self, route: Route, delta: str) -> None:
        """Print a piece of the answer where the reply goes (where `supports_stream`). The reply still
        arrives through `send` once the run ends; show only what the stream has not."""
        raise Unsupported(f"{self.surface} cannot stream text")

    async def send_file(self, item: Outbound) -> str | None:
        """Send `item.file` (a name and a path to read) with `item.text` as its caption; as a photo where
        `file.photo` and the platform shows one. By default the chat gets the caption with the file named."""
        assert item.file is not None
        named = f"📎 {item.file.name} (this chat can't receive files)"
        text = f"{item.text}\n{named}" if item.text else named
        return await self.send(dataclasses.replace(item, text=text, file=None))

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """An Inbound attachment's bytes, fetched when a run needs them; MediaError with a short reason
        (too large, gone) when it can't."""
        raise Unsupported(f"{self.surface} cannot fetch attachments")


class Adapter(Sender):
    """A platform connection: a Sender that is built from the settings, listens, and stops.

    Found through the `bridge.adapters` entry point group; see adapters/base.py for the lifecycle and
    docs/adapters.md for a walk through a minimal one.
    """

    # Senders that own the bot by being there (the local console's user).
    implicit_owners: tuple[str, ...] = ()
    # Set to True by the core before `start` where several workers listen at once (a webhook, which
    # every worker answers): listen so that they can share an address and port.
    shared_intake: bool = False
    # An adapter that runs an HTTP server of its own (a webhook) sets this to a list; the core may then
    # fill it before `start` with routes that server should serve beside its own (Bridge's webhooks,
    # when the admin server is off). None: no server of its own.
    http_routes: list[HttpRoute] | None = None

    @classmethod
    @abstractmethod
    def from_settings(cls, settings: Any) -> Self:
        """The adapter for this bot's settings (the root bridge.config.Settings; typed Any because this
        contract sits below the config layer); no I/O until `start`."""

    @abstractmethod
    async def start(self, handler: InboundHandler) -> None:
        """Connect and deliver each platform message to `handler` as one Inbound; return once listening.
        Raise AdapterStartError with a message for the operator, after closing what it opened."""

    @abstractmethod
    async def stop(self) -> None:
        """Stop listening and close connections, within seconds, without raising."""

    async def start_sending(self) -> None:
        """Connect for sending only, without listening (a worker that answers the chats it claims
        while another worker holds the platform's one listening connection); `start` may follow.
        Unsupported by default: such an adapter's chats are answered by the worker that listens."""
        raise Unsupported(f"{self.surface} cannot send without listening")
