"""`python -m tests.platforms.thirdparty.run --config PATH`: Bridge on the example plugin's platform.

`bridge run` starts only the platforms Bridge's config has a section for, so a third-party platform
is started by code that builds the Bridge, as docs/adapters.md ("Registering it") shows: the adapter
loaded by its entry point's name and guarded, what a crash left unsent delivered, and a clean stop on
SIGTERM. The conformance suite's kill -9 case runs the plugin through this.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

from bridge.app import Bridge
from bridge.app.root import load_adapter_class
from bridge.config.io import load_settings
from bridge.gateway.lifecycle import GuardedAdapter
from bridge.logs import setup_logging


async def main(config: Path) -> int:
    settings = load_settings(config)
    setup_logging(settings)
    adapter = GuardedAdapter(load_adapter_class("relay").from_settings(settings))
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with Bridge(settings) as bridge:
        bridge.add_sender(adapter)
        await adapter.start(bridge.handle)
        await bridge.recover()  # deliver what a crash left unsent
        await stop.wait()
        await bridge.shutdown()
        await adapter.stop()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m tests.platforms.thirdparty.run")
    parser.add_argument("--config", type=Path, required=True)
    raise SystemExit(asyncio.run(main(parser.parse_args().config)))
