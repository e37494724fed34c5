"""What the admin server's tests share: a Bridge with the admin server on a free port, and clients."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from bridge.http.server import AdminServer
from bridge.http.webchat import WEB_OPERATOR
from bridge.reload import ConfigReloader
from devkit.fakes.openai_server import FakeOpenAI
from tests.harness import OWNER, Harness, running_bridge
from tests.pg import free_port

TOKEN = "a-token-of-the-operator-0123456789"


def client_of(base: str, token: str | None = TOKEN) -> httpx.AsyncClient:
    """An HTTP client of the admin server: with the token as a bearer header, or none (a browser)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(base_url=base, headers=headers, trust_env=False, timeout=10)


@asynccontextmanager
async def admin_bridge(
    tmp_path: Path,
    llm: FakeOpenAI,
    /,
    *,
    adapters: Sequence[Any] = (),
    config_path: Path | None = None,
    token: str = TOKEN,
    **sections: Any,
) -> AsyncIterator[tuple[Harness, AdminServer, str]]:
    """A started Bridge on the fake model, its admin server listening; yields it and the base URL.
    Keyword sections (hooks=, session=, llm=...) go into the settings."""
    port = free_port()
    admin = {"enabled": True, "port": port, **({"token": token} if token else {})}
    # As bridge run makes it where the admin server runs: the web chat's operator talks in main.
    sections.setdefault("owners", [f"test:{OWNER}", WEB_OPERATOR])
    async with running_bridge(tmp_path, llm, admin=admin, **sections) as harness:
        bridge = harness.bridge
        reloader = (
            ConfigReloader(config_path, bridge.settings, bridge.apply_live_settings) if config_path else None
        )
        server = AdminServer(bridge, adapters, bridge.settings, config_path=config_path, reloader=reloader)
        await server.start()
        try:
            yield harness, server, f"http://127.0.0.1:{port}"
        finally:
            await server.stop()
