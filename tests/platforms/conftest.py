"""The conformance suite's fixtures: `platform`, one rig per parametrized platform (suite.RIGS), the
platforms' fakes (the existing fixtures and Bridge factories of tests/adapters, reused; Telegram's and
Discord's fakes extended, and Synapse put behind a proxy, so a send can be carried out and never
answered), the example plugin's entry point, and a summary of the run per platform: passed, failed,
or not applicable and why."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from discord.gateway import DiscordWebSocket
from discord.http import Route as DiscordRoute

from tests.adapters.conftest import discord_rig, rig  # noqa: F401 (fixtures the rigs take)
from tests.adapters.matrix.conftest import bot, matrix_rig, people, synapse  # noqa: F401 (fixtures the rigs take)
from tests.adapters.matrix.synapse import Synapse
from tests.adapters.slack.conftest import slack, slack_rig  # noqa: F401 (fixtures the rigs take)
from tests.platforms.rig import PlatformRig
from tests.platforms.rigs.discord import CarryingDiscord, discord_world
from tests.platforms.rigs.matrix import CarryingHomeserver
from tests.platforms.rigs.telegram import CarryingTelegram
from tests.platforms.suite import CASES, RIGS
from tests.platforms.thirdparty import plugin
from tests.platforms.thirdparty.fake_relay import FakeRelay

CONFORMANCE = "tests/platforms/test_conformance.py::"
# (case, platform) → "passed" / "failed", as the run went.
OUTCOMES: dict[tuple[str, str], str] = {}


@pytest.fixture
def platform(request: pytest.FixtureRequest, tmp_path: Path) -> PlatformRig:
    """The parametrized platform's rig (`@on(...)` in test_conformance.py)."""
    rig_class: type[PlatformRig] = request.param
    return rig_class(request, tmp_path)


@pytest.fixture
async def tg() -> AsyncIterator[CarryingTelegram]:
    async with CarryingTelegram() as server:
        yield server


@pytest.fixture
async def dc(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[CarryingDiscord]:
    # The adapter points discord.py's class attributes at the fake; restore them after the test.
    monkeypatch.setattr(DiscordRoute, "BASE", DiscordRoute.BASE)
    monkeypatch.setattr(DiscordWebSocket, "DEFAULT_GATEWAY", DiscordWebSocket.DEFAULT_GATEWAY)
    async with CarryingDiscord() as server:
        discord_world(server)
        yield server


@pytest.fixture
async def matrix_hs(synapse: Synapse) -> AsyncIterator[CarryingHomeserver]:  # noqa: F811
    async with CarryingHomeserver(synapse.base_url) as server:
        yield server


@pytest.fixture
async def relay() -> AsyncIterator[FakeRelay]:
    async with FakeRelay() as server:
        yield server


@pytest.fixture(scope="module", autouse=True)
def relay_plugin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The example plugin installed for this module's tests (and its processes' PYTHONPATH), and
    uninstalled after, so no other test sees a platform named relay."""
    site = str(plugin.install(tmp_path_factory.mktemp("site")))
    sys.path.append(site)
    try:
        yield Path(site)
    finally:
        sys.path.remove(site)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not report.nodeid.startswith(CONFORMANCE) or "[" not in report.nodeid:
        return
    case, platform = report.nodeid.removeprefix(CONFORMANCE).rstrip("]").split("[", 1)
    if report.failed:
        OUTCOMES[(case, platform)] = "failed"
    elif report.when == "call" and report.passed:
        OUTCOMES.setdefault((case, platform), "passed")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Per platform, each case: passed, failed, or not applicable with the rig's reason."""
    if not OUTCOMES:
        return
    terminalreporter.section("platform conformance")
    for rig_class in RIGS:
        counts: dict[str, int] = {}
        lines = []
        for case, needs in CASES.items():
            lacks = rig_class.capabilities.missing(*needs)
            outcome = "not applicable" if lacks else OUTCOMES.get((case, rig_class.name), "not run")
            counts[outcome] = counts.get(outcome, 0) + 1
            lines.append(f"  {outcome:<15} {case}" + (f": {lacks.why}" if lacks else ""))
        summary = ", ".join(f"{n} {outcome}" for outcome, n in counts.items())
        terminalreporter.write_line(f"{rig_class.name}: {summary}")
        for line in lines:
            terminalreporter.write_line(line)
