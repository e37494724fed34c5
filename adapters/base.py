"""The adapter plugin API: what a platform adapter implements, when the core calls it, and what it may call.

Adapters are plugins. A package registers its class under the `bridge.adapters` entry point group,
and the entry point's name is the surface (`console`, `telegram`, `discord`, ...)::

    [project.entry-points."bridge.adapters"]
    matrix = "bridge_matrix:MatrixAdapter"

What an adapter is: a subclass of `bridge.platform.Adapter` (re-exported here), the one typed
contract between platforms and the core. It declares every capability once, with its type and its
default (`supports_edit`, `text_limit`, `min_edit_interval_s`, `dedupes_by_nonce`, `streams_drafts`,
`supports_stream`, `max_upload_bytes`, `max_photo_bytes`, `implicit_owners`, `shared_intake`,
`http_routes`), and every operation, required or optional. `docs/adapters.md` walks through a
minimal one. In short:

- `surface: str`: its entry point name; every Inbound, Route and outbox row carries it.
- `from_settings(settings) -> Self`: a classmethod building it from the whole `Settings`.
- `async start(handler)`: connect and begin delivering each platform message as one `Inbound` to
  `handler`. Return once it is listening; raise `AdapterStartError` (bad token, unreachable API) with a
  message for the operator, after closing whatever it opened.
- `async send(item) -> str | None`: send one `Outbound` chunk and return the platform's message id.
  Never let model text notify people: no @everyone, @here, role or user mentions.
- `async stop()`: stop listening and close connections, within a few seconds, without raising.
- The capabilities its platform has, as class attributes (or per instance); the rest keep their
  defaults, which describe a platform that can do nothing extra.
- The optional operations its platform offers, overriding the defaults: `edit` and `edit_reply`,
  `typing`, `split`, `stream`, `send_file`, `download`, `start_sending`. A default either does the
  plain thing or raises `bridge.errors.Unsupported`, which the core expects and handles.
- Attachments: set `Inbound.attachments` (bridge.events.Attachment: kind `image`, `audio` or
  `file`, a name, `ref` the platform's handle, mime type and size when known) and the caption as the
  text; never download in the handler. `download(attachment, max_bytes)` fetches one when a run
  needs it, raising `bridge.errors.MediaError` with a short reason (too large, gone).
- Several workers: where they share one database, only one of them listens on a platform connection
  that must be unique (Telegram polling, a Discord gateway), and the others call `start_sending` to
  answer the chats they claim; `start` may follow it later, when the worker takes the connection
  over. Where every worker listens (a webhook), the core sets `shared_intake` before `start`. An
  adapter with an HTTP server of its own sets `http_routes` to a list, and the core may fill it
  before `start` with routes to serve beside its own (Bridge's webhooks, `POST /hooks/<name>`, when
  the admin server is off); the handlers check their own secrets.

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
redelivers, retries with a back-off). It may use `bridge.events`, `bridge.platform`, `bridge.errors`,
`bridge.config` (its own settings section) and `bridge.retry` for retries.

What an adapter must not do: touch the store, sessions, the runner or the outbox; decide who may talk
to the bot (access and send policies are the core's); send to another surface; block the event loop
(run blocking reads in a thread); swallow `asyncio.CancelledError`; log tokens or URLs that hold them;
or pass platform SDK objects into the core (normalise to `Inbound` first).
"""

from __future__ import annotations

from bridge.platform import Adapter, Sender

__all__ = ["Adapter", "Sender"]
