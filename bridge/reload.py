"""Live reload: edits to the config file (or SIGHUP) update the send policy, access lists and agents."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from pathlib import Path

from bridge.config import Settings
from bridge.config.io import load_settings
from bridge.errors import ConfigError

log = logging.getLogger(__name__)

WATCH_INTERVAL_S = 1.0
# Where the live-reloadable settings live; other changes wait for a restart.
RELOADABLE = (
    "session.send_policy",
    # [agents.NAME] and [[agents.bindings]]: bridge.agent.chat_agents.ChatAgents takes them.
    "agents",
    "telegram.allowed_users",
    "telegram.allowed_chats",
    "telegram.require_mention",
    "telegram.dm_policy",
    "telegram.pairing_code_ttl_s",
    "discord.allowed_users",
    "discord.allowed_guilds",
    "discord.allowed_channels",
    "discord.require_mention",
    "discord.dm_policy",
    "discord.pairing_code_ttl_s",
    "slack.allowed_users",
    "slack.allowed_channels",
    "slack.require_mention",
    "slack.dm_policy",
    "slack.pairing_code_ttl_s",
)


def restart_needed(old: Settings, new: Settings) -> list[str]:
    """Keys that differ between two settings but are not reloaded live."""
    old_flat, new_flat = _flatten(old.model_dump()), _flatten(new.model_dump())
    changed = {k for k in old_flat.keys() | new_flat.keys() if old_flat.get(k) != new_flat.get(k)}
    return sorted(k for k in changed if not any(k == r or k.startswith(r + ".") for r in RELOADABLE))


def _flatten(data: dict[str, object], prefix: str = "") -> dict[str, object]:
    flat: dict[str, object] = {}
    for name, value in data.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict):
            flat.update(_flatten(value, key + "."))
        else:
            flat[key] = value
    return flat


class ConfigReloader:
    """Reloads the settings when the file changes (polled) or on request (SIGHUP).

    An invalid edit keeps the last good settings and logs one error naming the key; the same broken
    file is not reported again until it changes.
    """

    def __init__(
        self,
        path: Path | None,
        current: Settings,
        apply: Callable[[Settings], None],
        *,
        interval_s: float = WATCH_INTERVAL_S,
    ) -> None:
        self.path = path
        self.current = current
        self.apply = apply
        self.interval_s = interval_s
        # Unknown at first: the file may have changed between the load at startup and now, so the
        # first poll loads it and compares the settings (quietly, when nothing changed).
        self._digest: bytes | None = None
        self._seen: bytes | None = None
        self._task: asyncio.Task[None] | None = None

    def _read_digest(self) -> bytes | None:
        if self.path is None:
            return None
        try:
            return hashlib.sha256(self.path.read_bytes()).digest()
        except OSError:
            return None

    def reload(self, digest: bytes | None = None) -> bool:
        """Load and apply the config now; False (and one logged error) when it is invalid."""
        self._digest = digest or self._read_digest()
        try:
            settings = load_settings(self.path)
        except ConfigError as exc:
            log.error("config reload failed; keeping the last good settings:\n%s", exc)
            return False
        if digest is not None and settings == self.current:
            return True  # the watcher's first look, or a save that changed nothing that matters
        later = restart_needed(self.current, settings)
        self.apply(settings)
        self.current = settings
        log.info("config reloaded: send policy, access lists and agents are live")
        if later:
            log.warning("these changed settings apply after a restart: %s", ", ".join(later))
        return True

    def start(self) -> None:
        if self.path is not None and self._task is None:
            self._task = asyncio.create_task(self._watch(), name="config-watch")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _watch(self) -> None:
        while True:
            await self.poll()
            await asyncio.sleep(self.interval_s)

    async def poll(self) -> None:
        """One look at the file: reload once a change has stayed the same for a whole interval.

        A hash, not the mtime, so a save that changes nothing causes no reload; and a file caught
        half written (an empty one would mean "all defaults") is never applied.
        """
        digest = await asyncio.to_thread(self._read_digest)
        if digest is None or digest == self._digest:
            self._seen = digest
        elif digest == self._seen:
            self.reload(digest)
        else:
            self._seen = digest
