"""What the machine must have for a test: Debian's Chromium, bubblewrap. `.ci/run` installs both and
sets BRIDGE_REQUIRE_BROWSER and BRIDGE_REQUIRE_BWRAP, so there a missing one fails the test; elsewhere
the test is skipped, saying what to install."""

from __future__ import annotations

import os
import shutil

import pytest


def _missing(message: str, required_by: str) -> None:
    if os.environ.get(required_by):
        pytest.fail(message)
    pytest.skip(message)


def chromium_binary() -> str:
    """Debian's Chromium (or BRIDGE_CHROMIUM), which Playwright drives; never a browser of its own."""
    found = os.environ.get("BRIDGE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        _missing("Debian's Chromium is not installed (apt-get install chromium)", "BRIDGE_REQUIRE_BROWSER")
    assert found is not None
    return found


def require_bwrap() -> None:
    """bubblewrap, the exec group's sandbox."""
    if shutil.which("bwrap") is None:
        _missing("bubblewrap is not installed (apt-get install bubblewrap)", "BRIDGE_REQUIRE_BWRAP")
