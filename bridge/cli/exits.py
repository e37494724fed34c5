"""Exit statuses of the `bridge` command, and `fail`: an error printed for the operator."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from bridge.config.base import mask_url
from bridge.errors import BridgeError, ConfigError, LocalModelError, SessionKeyError, StoreError
from bridge.logs import redactor

if TYPE_CHECKING:
    from bridge.config import Settings

EXIT_CONFIG = 2
EXIT_RUNTIME = 1


# How each kind of error is introduced on the CLI; the first class that matches wins.
_LABELS: tuple[tuple[type[BridgeError], str], ...] = (
    (SessionKeyError, ""),
    (ConfigError, "config error:\n"),
    (StoreError, "storage error: "),
    (LocalModelError, "local model: "),
)


def fail(exc: BridgeError, settings: Settings | None = None, *, doing: str | None = None) -> int:
    """Print a BridgeError for the operator, what went wrong and then what to do, and return the exit
    status it calls for: 2 for a config error, 1 for anything else."""
    text = exc.for_log()
    if settings is not None:
        # Not through logging, so not through its filter: a platform's error can quote its API URL.
        text = mask_url(redactor(settings)(text))
    label = f"{doing}: " if doing else next((lab for cls, lab in _LABELS if isinstance(exc, cls)), "")
    print(f"bridge: {label}{text}", file=sys.stderr)
    return EXIT_CONFIG if isinstance(exc, ConfigError) else EXIT_RUNTIME
