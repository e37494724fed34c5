"""The `bridge` console script: signals first, then the CLI (whose imports take a quarter second)."""

from __future__ import annotations

import os
import signal
import sys


def main() -> int:
    # `bridge run` promises that SIGTERM ends it with status 0 at any moment; before its event loop
    # takes signals over there is nothing started worth keeping, so the process just ends.
    if sys.argv[1:2] == ["run"]:
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    from bridge.cli import main as cli_main

    return cli_main()
