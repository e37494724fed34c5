"""The platforms the conformance suite runs, and which of its cases apply to each.

`RIGS` lists one rig per platform (tests/platforms/rigs/); `on(*needs)` marks a case to run on every
platform whose rig declares those capabilities, and notes the case in `CASES` so that the run's
summary (conftest.py) can name each case a platform skips as "not applicable", with the rig's reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from tests.platforms.rig import PlatformRig
from tests.platforms.rigs.console import ConsolePlatform
from tests.platforms.rigs.discord import DiscordPlatform
from tests.platforms.rigs.matrix import MatrixPlatform
from tests.platforms.rigs.relay import RelayPlatform
from tests.platforms.rigs.slack import SlackPlatform
from tests.platforms.rigs.telegram import TelegramPlatform

RIGS: list[type[PlatformRig]] = [
    ConsolePlatform,
    TelegramPlatform,
    DiscordPlatform,
    SlackPlatform,
    MatrixPlatform,
    RelayPlatform,
]

# Each case's test name → the capabilities it needs.
CASES: dict[str, tuple[str, ...]] = {}

F = TypeVar("F", bound=Callable[..., Any])


def on(*needs: str) -> Callable[[F], F]:
    """Parametrize a case over the platforms that have `needs`; the others are reported not applicable."""

    def mark(case: F) -> F:
        CASES[case.__name__] = needs
        rigs = [rig for rig in RIGS if rig.capabilities.has(*needs)]
        assert rigs, f"{case.__name__}: no platform has {needs}; a case must apply somewhere"
        marked: F = pytest.mark.parametrize("platform", rigs, indirect=True, ids=[r.name for r in rigs])(case)
        return marked

    return mark
