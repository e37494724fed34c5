"""The send-policy editor of the admin API: read the rules, explain a key against a draft, save a draft
into the config file (comments kept, written atomically) and make it live through the reload."""

from __future__ import annotations

import asyncio
import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import tomlkit
from aiohttp import web
from pydantic import ValidationError

from bridge.config.io import settings_from_toml
from bridge.config.session import SendPolicySettings
from bridge.errors import ConfigError, SessionKeyError
from bridge.gateway.policy import Place, SendPolicy
from bridge.http.replies import body_of
from bridge.sessions.keys import parse

if TYPE_CHECKING:
    from bridge.app import Bridge
    from bridge.reload import ConfigReloader


class PolicyEditor:
    """GET /api/policy, POST /api/policy/explain, PUT /api/policy."""

    def __init__(self, bridge: Bridge, path: Path | None, reloader: ConfigReloader | None) -> None:
        self.bridge = bridge
        self.path = path
        self.reloader = reloader
        # One save at a time: two editors saving together must not interleave read and write.
        self._saving = asyncio.Lock()

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/api/policy", self.show)
        app.router.add_post("/api/policy/explain", self.explain)
        app.router.add_put("/api/policy", self.save)

    def read_only(self) -> str | None:
        """Why a save can't write the config file now, or None when it can (asked at each page and save,
        so a file made writable meanwhile needs no restart)."""
        if self.path is None:
            return "bridge run was started without --config, so there is no file to save to"
        return read_only_reason(self.path)

    async def show(self, request: web.Request) -> web.Response:
        live = self.bridge.policy.settings
        read_only = self.read_only()
        return web.json_response(
            {
                **live.model_dump(mode="json"),
                "config_file": str(self.path) if self.path else None,
                "editable": read_only is None,
                "read_only": read_only,
            }
        )

    async def explain(self, request: web.Request) -> web.Response:
        """Each rule of the draft (or of the live policy), whether it matches the key, what decides."""
        body = await body_of(request)
        key = str(body.get("key", ""))
        try:
            parse(key)
        except SessionKeyError as exc:
            return _refused("key", str(exc))
        draft = body.get("draft")
        try:
            settings = (
                SendPolicySettings.model_validate(draft) if draft is not None else self.bridge.policy.settings
            )
        except ValidationError as exc:
            return _invalid(exc)
        session = await self.bridge.store.active_session(key)
        surface = body.get("surface") or (session.surface if session else None)
        override = session.send_policy if session else None
        policy = SendPolicy(settings)
        place = Place.of(key, str(surface) if surface else None)
        decision = policy.decide(place, override)
        return web.json_response(
            {"action": decision.action, "reason": decision.reason, "explain": policy.explain(place, override)}
        )

    async def save(self, request: web.Request) -> web.Response:
        """Write the draft into [session.send_policy] of the config file, if the whole file is then
        valid (checked as check-config checks it), and apply it at once. Refused: nothing changes."""
        if self.path is None:
            return _refused(
                "config_file", "bridge run was started without a config file; start it with --config PATH"
            )
        path = self.path
        why = read_only_reason(path)
        if why is not None:
            return _read_only(why)
        draft = await body_of(request)
        try:
            wanted = SendPolicySettings.model_validate(draft)
        except ValidationError as exc:
            return _invalid(exc)
        async with self._saving:
            text = await asyncio.to_thread(self.path.read_text, encoding="utf-8")
            try:
                document = tomlkit.parse(text)
            except tomlkit.exceptions.ParseError as exc:
                return _refused("config_file", f"{self.path} is not valid TOML now: {exc}")
            _put_policy(document, wanted)
            new_text = tomlkit.dumps(document)
            try:
                settings = settings_from_toml(new_text, self.path)
            except ConfigError as exc:
                return _refused("session.send_policy", str(exc))
            try:
                await asyncio.to_thread(_replace_file, self.path, new_text)
            except OSError as exc:
                # What the look beforehand can't see: a bind mount of the file itself (renaming over it
                # is EBUSY), or a file system made read-only meanwhile. Nothing was written.
                if exc.errno not in UNWRITABLE:
                    raise
                return _read_only(f"{_read_only_text(path)} ({os.strerror(exc.errno)})")
            if self.reloader is not None:
                # Live now, not at the watcher's next look; the watcher then sees nothing new.
                self.reloader.reload()
            else:
                self.bridge.apply_live_settings(settings)
        return web.json_response({"ok": True, **self.bridge.policy.settings.model_dump(mode="json")})


# The errors of a write that says the file or its folder can't be written, rather than a fault.
UNWRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM, errno.EBUSY})
# Any of these set: the operator left the file writable by someone. None: read-only on purpose.
WRITE_BITS = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH


def read_only_reason(path: Path) -> str | None:
    """Why the editor can't save `path`, or None when it can.

    Read-only is a file that this process may not write (os.access: permissions, or a read-only mount
    such as Docker's `:ro`, which answers EROFS even to root), a folder it may not create the temporary
    file in (the save is atomic: a new file beside the old one, renamed over it), or a file with no
    write bit at all: root may write that file anyway, but its owner made it read-only on purpose, so
    the editor leaves it alone as it would for any other user.
    """
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        return f"{path} can't be read: {exc.strerror}"
    if not mode & WRITE_BITS or not os.access(path, os.W_OK):
        return _read_only_text(path)
    if not os.access(path.parent, os.W_OK | os.X_OK):
        return (
            f"{path.parent} is not writable, and a save writes a new {path.name} there and renames it "
            "over the old one: mount the config's folder writable, or edit the file on the host and restart"
        )
    return None


def _read_only_text(path: Path) -> str:
    return f"{path} is read-only: mounted read-only? edit it on the host and restart, or mount it writable"


def _put_policy(document: tomlkit.TOMLDocument, policy: SendPolicySettings) -> None:
    """Set default and rules in [session.send_policy], creating the tables if need be; every other
    line of the file, comments included, stays as it was."""
    session = document.get("session")
    if session is None:
        session = tomlkit.table(is_super_table=True)
        document["session"] = session
    table = session.get("send_policy")
    if table is None:
        table = tomlkit.table()
        session["send_policy"] = table
    table["default"] = policy.default
    rules = tomlkit.array()
    for rule in policy.rules:
        entry = tomlkit.inline_table()
        entry["action"] = rule.action
        match = tomlkit.inline_table()
        for name, value in rule.match.model_dump(exclude_none=True).items():
            match[name] = value
        entry["match"] = match
        rules.append(entry)
    rules.multiline(bool(policy.rules))
    table["rules"] = rules


def _replace_file(path: Path, text: str) -> None:
    """Write `text` to `path` atomically: a reader sees the old file or the new one, never half."""
    mode = path.stat().st_mode & 0o777
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _invalid(exc: ValidationError) -> web.Response:
    """The first problem of a draft, named by its key in the config file."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    key = f"session.send_policy.{where}" if where else "session.send_policy"
    return _refused(key, first["msg"])


def _read_only(reason: str) -> web.Response:
    """409: the draft may be fine, but the file can't take it; the page says the same."""
    return web.json_response({"error": "read_only", "detail": reason}, status=409)


def _refused(key: str, reason: str) -> web.Response:
    return web.json_response({"error": "invalid", "key": key, "reason": reason}, status=422)
