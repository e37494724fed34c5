"""The `bridge` command (layer 1, the top): `main` is the console script and `python -m bridge`.

`root.py` holds the parser and sends each command to its module: `serve` (run, chat), `checks`
(check-config, policy explain), `store` (runs, trace, status, backup, migrate), `admin` (admin,
health), `pair`, `tasks`, `mcp`, `local` (local-model); `exits.py` holds the exit statuses and `fail`.
A command module imports only `exits` of its siblings; `root` alone imports the others.

May import anything in Bridge. Keep this module light: it runs before the CLI's imports.
"""

from __future__ import annotations

import os
import signal
import sys


def main(argv: list[str] | None = None) -> int:
    """Run `bridge ARGV` (default: the process's arguments) and return its exit status."""
    # `bridge run` promises that SIGTERM ends it with status 0 at any moment; before its event loop
    # takes signals over there is nothing started worth keeping, so the process just ends. Signals
    # first, then the CLI, whose imports take a quarter second.
    if argv is None and sys.argv[1:2] == ["run"]:
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    from bridge.cli.root import main as run_command

    return run_command(argv)
