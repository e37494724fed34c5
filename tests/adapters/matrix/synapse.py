"""A real Matrix homeserver for the tests: Synapse from PyPI, on SQLite in a temp folder, on 127.0.0.1.

Synapse has heavy dependencies of its own (Twisted, its Rust extension, ...), so it lives in a virtual
environment of its own: BRIDGE_SYNAPSE names that environment's python (`.ci/run` makes it in
~/.cache/bridge/synapse-venv); without it, that one and /tmp/synapse-venv are tried. Where none has
Synapse the Matrix tests are skipped, saying how to install it, unless BRIDGE_REQUIRE_SYNAPSE is set
(as `.ci/run` does), where they fail (tests/system.py's pattern).

One server serves a whole test session (it starts in about 2 s); each test registers users of its
own through the shared-secret admin API and makes fresh rooms, so tests never see each other's chats.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from base64 import b64encode
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SERVER_NAME = "localhost"
START_TIMEOUT_S = 90.0
_DEFAULT_PYTHONS = (
    str(Path.home() / ".cache/bridge/synapse-venv/bin/python"),
    "/tmp/synapse-venv/bin/python",
)
_INSTALL = "python3 -m venv /tmp/synapse-venv && /tmp/synapse-venv/bin/pip install matrix-synapse"
_names = itertools.count(1)


def synapse_python() -> str:
    """The python of the environment Synapse is installed in; skips (or fails, in CI) without one."""
    candidates = (
        [os.environ["BRIDGE_SYNAPSE"]] if os.environ.get("BRIDGE_SYNAPSE") else list(_DEFAULT_PYTHONS)
    )
    for candidate in candidates:
        path = Path(candidate)
        if path.is_file() and os.access(path, os.X_OK):
            found = subprocess.run(
                [str(path), "-c", "import synapse"], capture_output=True, timeout=60, check=False
            )
            if found.returncode == 0:
                return str(path.absolute())
    message = f"Synapse is not installed (tried {', '.join(candidates)}): {_INSTALL}"
    if os.environ.get("BRIDGE_REQUIRE_SYNAPSE"):
        pytest.fail(message)
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _signing_key() -> str:
    # Synapse's key file format: algorithm, version, the unpadded base64 of a 32-byte ed25519 seed.
    seed = b64encode(secrets.token_bytes(32)).decode().rstrip("=")
    return f"ed25519 a_test {seed}\n"


def _config(folder: Path, port: int, shared_secret: str) -> dict[str, Any]:
    many = {"per_second": 1000, "burst_count": 1000}
    return {
        "server_name": SERVER_NAME,
        "public_baseurl": f"http://127.0.0.1:{port}/",
        "pid_file": str(folder / "homeserver.pid"),
        "listeners": [
            {
                "port": port,
                "bind_addresses": ["127.0.0.1"],
                "type": "http",
                "tls": False,
                "x_forwarded": False,
                "resources": [{"names": ["client", "media"], "compress": False}],
            }
        ],
        "database": {"name": "sqlite3", "args": {"database": str(folder / "homeserver.db")}},
        "log_config": str(folder / "log.yaml"),
        "media_store_path": str(folder / "media"),
        "signing_key_path": str(folder / "signing.key"),
        "registration_shared_secret": shared_secret,
        "macaroon_secret_key": secrets.token_hex(16),
        "form_secret": secrets.token_hex(16),
        "enable_registration": False,
        "report_stats": False,
        "trusted_key_servers": [],
        "suppress_key_server_warning": True,
        # No federation: nothing leaves 127.0.0.1.
        "federation_domain_whitelist": [],
        "url_preview_enabled": False,
        "presence": {"enabled": False},
        # Cheap password hashes: each test registers users of its own.
        "bcrypt_rounds": 4,
        "max_upload_size": "20M",
        # Tests send quickly; rate limits have tests of their own elsewhere.
        "rc_message": many,
        "rc_registration": many,
        "rc_login": {"address": many, "account": many, "failed_attempts": many},
        "rc_joins": {"local": many, "remote": many},
        "rc_joins_per_room": many,
        "rc_invites": {"per_room": many, "per_user": many, "per_issuer": many},
        "rc_admin_redaction": many,
        "rc_media_create": many,
        "rc_3pid_validation": many,
        "rc_delayed_event_mgmt": many,
    }


_LOG_CONFIG = """\
version: 1
formatters:
  plain:
    format: '%(asctime)s %(name)s %(levelname)s %(message)s'
handlers:
  file:
    class: logging.FileHandler
    formatter: plain
    filename: {path}
root:
  level: WARNING
  handlers: [file]
disable_existing_loggers: false
"""


@dataclass
class Account:
    """A registered user: how the bot or a test user logs in."""

    user_id: str
    access_token: str
    device_id: str
    password: str
    localpart: str


class Synapse:
    """A running Synapse: its address, and registration of users through the shared secret."""

    def __init__(self, python: str, folder: Path) -> None:
        self.python = python
        self.folder = folder
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.server_name = SERVER_NAME
        self._secret = secrets.token_hex(16)
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "signing.key").write_text(_signing_key())
        (self.folder / "log.yaml").write_text(_LOG_CONFIG.format(path=self.folder / "homeserver.log"))
        # YAML is a superset of JSON: no YAML library is needed to write the config.
        config = self.folder / "homeserver.yaml"
        config.write_text(json.dumps(_config(self.folder, self.port, self._secret), indent=1))
        out = (self.folder / "stdout.log").open("wb")
        self._process = subprocess.Popen(
            [self.python, "-m", "synapse.app.homeserver", "-c", str(config)],
            cwd=self.folder,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        out.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"Synapse exited at start:\n{self._tail()}")
            try:
                self.request("GET", "/_matrix/client/versions")
                return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"Synapse did not answer within {START_TIMEOUT_S:.0f} s:\n{self._tail()}")

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)

    def _tail(self) -> str:
        text = ""
        for name in ("stdout.log", "homeserver.log"):
            path = self.folder / name
            if path.exists():
                text += path.read_text(errors="replace")[-3000:]
        return text

    def request(
        self, method: str, path: str, body: dict[str, Any] | None = None, token: str | None = None
    ) -> dict[str, Any]:
        """One client-API call, synchronously (for fixtures outside the event loop)."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        # No proxy: the server is on 127.0.0.1.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(request, timeout=30) as response:
                answer: dict[str, Any] = json.loads(response.read() or b"{}")
                return answer
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"{method} {path}: HTTP {exc.code} {exc.read()[:300]!r}") from None

    def register(self, name: str | None = None, *, admin: bool = False) -> Account:
        """A new user, registered through the shared-secret admin API (registration is closed)."""
        localpart = f"{name or 'user'}{next(_names)}x{secrets.token_hex(3)}"
        password = secrets.token_urlsafe(12)
        nonce = self.request("GET", "/_synapse/admin/v1/register")["nonce"]
        mac = hmac.new(self._secret.encode(), digestmod=hashlib.sha1)
        for part in (nonce, localpart, password, "admin" if admin else "notadmin"):
            if part != nonce:
                mac.update(b"\x00")
            mac.update(part.encode())
        answer = self.request(
            "POST",
            "/_synapse/admin/v1/register",
            {
                "nonce": nonce,
                "username": localpart,
                "password": password,
                "admin": admin,
                "mac": mac.hexdigest(),
            },
        )
        return Account(answer["user_id"], answer["access_token"], answer["device_id"], password, localpart)


def start_synapse() -> Synapse:
    """A started Synapse in a temp folder (removed again by `stop_synapse`)."""
    python = synapse_python()
    server = Synapse(python, Path(tempfile.mkdtemp(prefix="bridge-synapse-")))
    server.start()
    return server


def stop_synapse(server: Synapse) -> None:
    server.stop()
    shutil.rmtree(server.folder, ignore_errors=True)
