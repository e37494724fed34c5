"""The real-model tier: llama-server with a small Qwen on 127.0.0.1, one per tool mode, for the session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bridge.localmodel import LocalModel, Running

# Ports apart from the default, so a server a developer started by hand is left alone.
PORTS = {"native": 18181, "text": 18182}


@pytest.fixture(scope="session")
def local_servers() -> Iterator[dict[str, Running]]:
    """The default model's servers by tool mode. The build and the model are cached
    (BRIDGE_LOCAL_MODEL_DIR), so only the first run on a machine builds; each mode's server gets a
    state folder of its own."""
    managers = []
    servers = {}
    try:
        for mode, port in PORTS.items():
            manager = LocalModel(name=f"test-{mode}")
            managers.append(manager)
            servers[mode] = manager.start(port=port, mode=mode)  # type: ignore[arg-type]
        yield servers
    finally:
        for manager in managers:
            manager.stop()
