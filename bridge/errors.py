"""Bridge's exception tree: every error Bridge raises on purpose is a BridgeError.

    BridgeError                      user_message (for the chat) and remedy (for the log) on every one
    ├── ConfigError                  the config, a manifest or a name in it is wrong: which key, and why
    │   ├── ManifestError            a tool manifest that cannot be loaded (bridge.tools.manifest)
    │   ├── RegistryError            two tools or groups claim one name (bridge.tools.registry)
    │   └── SessionKeyError          a malformed or reserved session key (bridge.sessions.keys)
    ├── StoreError                   the database cannot be used: corrupt, locked, unwritable
    │   └── IntakeUnavailable        an update could not be stored now; the adapter offers it again
    ├── ProviderError                a model request failed for good (bridge.llm.base)
    │   └── LocalModelError          installing or starting the local model failed (bridge.localmodel)
    ├── PlatformError                Telegram, Discord or another platform refused or failed
    │   ├── MediaError               an attachment could not be fetched or read (bridge.media.intake)
    │   ├── AdapterStartError        an adapter could not start: bad token, unreachable API
    │   ├── AdapterLifecycleError    an adapter used out of order: started twice, sent to after stop
    │   ├── DeliveryRefused          the platform refused a chat for good: blocked, removed, no such chat
    │   ├── DeliveryUncertain        a send that may have arrived: no answer came back in time
    │   └── Unsupported              an optional operation the platform lacks (bridge.platform)
    ├── ToolError                    a tool could not do what was asked; the model gets it as a result
    │   ├── ToolSourceError          an MCP server could not be reached or broke (bridge.mcp.connection)
    │   ├── OutsideWorkspaceError    a file path that leaves the workspace (bridge.tools.builtin.files)
    │   └── BlockedAddressError      a fetch aimed at a private or loopback address (…builtin.web)
    └── PairingLimited               too many wrong pairing codes from one approver lately (…gateway.pairing)

Catch the narrowest class that fits. Code that reports an error to a person shows `user_message` in
a chat and `str(error)` plus `remedy` in the log or on the CLI. Exceptions that only steer control
flow inside one module (a retry classifier's verdict, a parser's "not this shape") stay private to it.
"""

from __future__ import annotations

import math


class BridgeError(Exception):
    """The root of Bridge's errors.

    `str(error)` says what went wrong, for the operator. `user_message` is what a chat user may be
    shown (None: nothing specific, say that something went wrong). `remedy` is what the operator
    can do about it, for the log and the CLI (None: nothing to add).
    """

    user_message: str | None = None
    remedy: str | None = None

    def __init__(
        self, message: str = "", *, user_message: str | None = None, remedy: str | None = None
    ) -> None:
        super().__init__(message)
        if user_message is not None:
            self.user_message = user_message
        if remedy is not None:
            self.remedy = remedy

    def for_log(self) -> str:
        """The message with its remedy, for a log line or the CLI."""
        text = str(self) or type(self).__name__
        return f"{text}; {self.remedy}" if self.remedy else text


class ConfigError(BridgeError):
    """A configuration problem, worded for the operator: which key, and why (that is its remedy)."""


class ManifestError(ConfigError, ValueError):
    """A manifest that cannot be loaded; the message names the file, the entry and why."""


class RegistryError(ConfigError, ValueError):
    """Two tools or groups claim the same name."""


class SessionKeyError(ConfigError, ValueError):
    """A session key that is malformed, reserved or unbuildable; the message shows the key and the problem."""


class StoreError(BridgeError):
    """The database cannot be used (corrupt, locked by another version, unwritable); each says what to do."""


class IntakeUnavailable(StoreError):
    """The core could not store an update now (e.g. the database is locked or full); offer it again later."""


class ProviderError(BridgeError):
    """A model request that failed for good; `user_message` is what the chat is told, `message` and
    `detail` are for the log and the trace.

    `user_message` never holds the server's own words (by default it is `message`); `message` carries
    at most a one-line summary of what the server said; `detail` holds its whole answer (or the
    connection error), with the configured secrets masked, for `bridge trace`.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        status: int | None = None,
        detail: str = "",
        remedy: str | None = None,
        user_message: str | None = None,
    ) -> None:
        super().__init__(message, user_message=user_message or message, remedy=remedy)
        self.message = message
        self.retryable = retryable
        self.status = status
        self.detail = detail


class LocalModelError(ProviderError):
    """Installing or starting the local model failed; the message says where to look."""

    def __init__(self, message: str, *, remedy: str | None = None) -> None:
        super().__init__(message, remedy=remedy)


class PlatformError(BridgeError):
    """A chat platform (Telegram, Discord, a third-party adapter) refused or failed a request."""


class MediaError(PlatformError):
    """An attachment could not be fetched or read; `str()` is the short reason the user is told
    (e.g. "larger than 20 MB", "the download failed")."""


class AdapterStartError(PlatformError):
    """An adapter could not start (bad token, unreachable API); the message says which setting to check."""


class AdapterLifecycleError(PlatformError):
    """An adapter was used out of order: started twice, started after stop, or sent to after stop."""

    remedy: str | None = "this is a bug in the caller; see the lifecycle in adapters/base.py"


class DeliveryRefused(PlatformError):
    """The platform refused to deliver to a chat, for good: the user blocked the bot, the bot was
    removed or lacks the right to write there, the chat does not exist. Sending again won't help; the
    courier marks the row failed with `str()` (the platform's reason, once) and logs one WARNING."""


class DeliveryUncertain(PlatformError):
    """A send failed in a way that may still have delivered it: the request went out and no answer
    came back in time (a read timeout). The courier marks the row `uncertain`, not `failed`, so the
    dashboard's Retry says it may show twice; `str()` is the platform's reason."""


class Unsupported(PlatformError):
    """An optional operation this platform does not offer: the default of each one in bridge.platform.
    The core expects it where an operation is optional (streaming, downloads, sending without
    listening) and falls back; an adapter overrides the operations its platform has."""


class ToolError(BridgeError):
    """A tool could not do what was asked; it reaches the model as an error result, never the loop."""


class ToolSourceError(ToolError):
    """A lazily loaded group's tools could not be listed or called: its MCP server is down or broke."""


class OutsideWorkspaceError(ToolError):
    """A user-supplied path that resolves outside the workspace root."""


class BlockedAddressError(ToolError):
    """The host resolved to an address the bot may not reach (private, loopback, ...).

    Deliberately not an httpcore/httpx error: httpx would remap those to ConnectError and the
    handler could no longer tell "blocked" from "unreachable".
    """

    remedy: str | None = "set [tools] allow_private_network = true to allow private and loopback addresses"

    def __init__(self, host: str, ip: str) -> None:
        self.host = host
        self.ip = ip
        shown = ip if host == ip else f"{host} ({ip})"
        super().__init__(
            f"{shown} is a private or loopback address; set [tools] allow_private_network = true to allow it"
        )


class PairingLimited(BridgeError):
    """Too many wrong pairing codes from one approver lately: approving is refused for `retry_after_s`,
    whatever the code, so a stolen owner account cannot try codes one after another."""

    def __init__(self, retry_after_s: float) -> None:
        minutes = max(1, math.ceil(retry_after_s / 60))
        super().__init__(
            f"too many wrong pairing codes; try again in {minutes} min",
            user_message=f"Too many wrong codes. Try again in {minutes} min.",
        )
        self.retry_after_s = retry_after_s


def first_line(exc: BaseException) -> str:
    """An error's first line, for a message that names it (a server's error may run on for lines of
    detail); its type's name when it says nothing."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
