"""The example plugin installed for a test run, as `pip install bridge-relay` would: a distribution's
metadata with its `bridge.adapters` entry point, in a folder put on sys.path (and on a process's
PYTHONPATH), so `bridge.app.load_adapter_class("relay")` finds it exactly as it finds Bridge's own."""

from __future__ import annotations

from pathlib import Path

ENTRY_POINT = "relay = tests.platforms.thirdparty.relay:RelayAdapter"
DIST_INFO = "bridge_relay_example-0.1.dist-info"


def install(site: Path) -> Path:
    """Write the distribution's metadata under `site`; returns `site`, the folder to put on the path."""
    dist = site / DIST_INFO
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: bridge-relay-example\nVersion: 0.1\n", encoding="utf-8"
    )
    (dist / "entry_points.txt").write_text(f"[bridge.adapters]\n{ENTRY_POINT}\n", encoding="utf-8")
    return site
