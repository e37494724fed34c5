"""The adapter plugin API: what a platform adapter implements, when the core calls it, and what it may call.

Adapters are plugins. A package registers its class under the `bridge.adapters` entry point group,
and the entry point's name is the surface (`console`, `telegram`, `discord`, ...)::

    [project.entry-points."bridge.adapters"]
    matrix = "bridge_matrix:MatrixAdapter"

What an adapter implements (the `Adapter` protocol below; `bridge.events.Sender` is its sending half):

- `surface: str`: its entry point name; every Inbound, Route and outbox row carries it.
- `supports_edit: bool`: whether `edit` works; without it, tool activity is sent as new messages.
- `from_settings(settings) -> Adapter`: a classmethod building it from the whole `Settings`.
- `async start(handler)`: connect and begin delivering each platform message as one `Inbound` to
  `handler`. Return once it is listening; raise `AdapterStartError` (bad token, unreachable API) with a
  message for the operator, after closing whatever it opened.
- `async send(item) -> str | None`: send one `Outbound` chunk and return the platform's message id.
  Never let model text notify people: no @everyone, @here, role or user mentions.
- `async edit(route, message_id, text)` and `async typing(route)`.
- `async stop()`: stop listening and close connections, within a few seconds, without raising.

Optional, looked up with getattr (leave them out rather than set them to None):

- `text_limit: int`: the longest message; longer items are split at it.
- `split(kind, text) -> list[str]`: the chunks one item is sent as, where the platform needs its own
  splitting (formatting that must not be cut in half). Takes precedence over `text_limit`.
- `dedupes_by_nonce: bool`: True where the platform drops a second send with the same
  `Outbound.nonce`, so a send cut short by a crash may be repeated after a restart.
- `min_edit_interval_s: float`: the least time between two edits of one message (rate limits).
- `implicit_owners: tuple[str, ...]`: senders that own the bot by being there (the local console).
- `streams_drafts: bool`: True where an answer may stream into a message edited as it grows (a
  "draft" Outbound, edited at most every `min_edit_interval_s`); the reply's first chunk then edits
  that message (`Outbound.edit_of`). `edit_reply(route, message_id, text)`: that edit with the
  reply's formatting, where `edit` would send plain text. `supports_stream: bool` with
  `stream(route, delta)`: a surface that prints text as it comes (the console) instead.
- Attachments: set `Inbound.attachments` (bridge.media.model.Attachment: kind `image`, `audio` or
  `file`, a name, `ref` the platform's handle, mime type and size when known) and the caption as the
  text; never download in the handler. `async download(attachment, max_bytes) -> bytes` fetches one
  when a run needs it, raising `bridge.errors.MediaError` with a short reason (too large, gone).
- `async send_file(item) -> str | None`: send `item.file` (bridge.media.model.OutFile: a name and a
  path to read) with `item.text` as its caption; as a photo where `file.photo` and the platform shows
  one. `max_upload_bytes` and `max_photo_bytes`: the largest file and photo it can send; send_file
  refuses a larger one before anything is queued. Without `send_file`, the chat gets the caption and
  the file's name.
- `async start_sending()`: connect for sending only, without listening. Where several workers share
  one database, only one of them listens on a platform connection that must be unique (Telegram
  polling, a Discord gateway), and the others call this to answer the chats they claim; `start`
  may follow it later, when the worker takes the connection over. Without it, an adapter's chats are
  answered only by the worker that listens.
- `shared_intake: bool`: set to True by the core before `start` where several workers listen at once
  (a webhook, where every worker takes requests): listen so that they can share an address and port.
- `http_routes: list[tuple[str, str, handler]]`: where the adapter runs an HTTP server of its own (a
  webhook), the core may set this before `start` to (method, path, aiohttp handler) triples that
  server should serve beside its own route: Bridge's webhooks, `POST /hooks/<name>`, when the admin
  server is off. The handlers check their own secrets; serve them as they are.

Lifecycle, in this order, enforced by the core (`bridge.gateway.lifecycle.GuardedAdapter` wraps every
adapter it loads, and raises `AdapterLifecycleError` on misuse):

1. constructed (by `from_settings`): no I/O yet;
2. `start(handler)` once. Sends may begin while it runs, once it delivers messages;
3. `send`, `edit`, `typing` any number of times, concurrently for different chats. A send the core
   makes while the adapter is not running leaves its outbox row `pending`, for the next start;
4. `stop()` once, at shutdown, after the runs in flight have finished and their answers were sent.
   A second `stop`, or a stop before start, does nothing. A stopped adapter is not started again:
   the core builds a new one.

What an adapter may call in the core: only the `handler` it was given, with one `Inbound` per message,
in the order the platform delivered them. The handler stores the message before it returns (a run
answers later, through `send`). It raises `IntakeUnavailable` when the message could not be stored
now: keep the message and offer it again (Telegram leaves the update unconfirmed; Discord, which never
redelivers, retries with a back-off). It may use `bridge.events`, `bridge.errors`, `bridge.config`
(its own settings section) and `bridge.retry` for retries.

What an adapter must not do: touch the store, sessions, the runner or the outbox; decide who may talk
to the bot (access and send policies are the core's); send to another surface; block the event loop
(run blocking reads in a thread); swallow `asyncio.CancelledError`; log tokens or URLs that hold them;
or pass platform SDK objects into the core (normalise to `Inbound` first).
"""

from __future__ import annotations

from typing import Protocol, Self

from bridge.config import Settings
from bridge.events import InboundHandler, Sender


class Adapter(Sender, Protocol):
    """A platform connection: a Sender that can also start listening and stop (see the module docs)."""

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        """The adapter for this bot's settings; no I/O until `start`."""
        ...

    async def start(self, handler: InboundHandler) -> None:
        """Connect and deliver each platform message to `handler`; AdapterStartError when it can't."""
        ...

    async def stop(self) -> None:
        """Stop listening and close connections, within seconds, without raising."""
        ...
