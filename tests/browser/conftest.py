"""Chromium for the dashboard's browser tests: Debian's binary driven by Playwright, never a download;
a real `bridge run` on the fake Bot API and the fake model; screenshots under tests/artifacts/."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, ViewportSize, async_playwright

from devkit.fakes.openai_server import FakeOpenAI
from devkit.fakes.telegram_api import FakeTelegram
from devkit.processes import bridge_running, telegram_run_config
from tests.adapters.conftest import OWNER
from tests.pg import free_port
from tests.system import chromium_binary

ARTIFACTS = Path(__file__).parent.parent / "artifacts"
TOKEN = "browser-test-token-0123456789abcdef"
PHONE: ViewportSize = {"width": 390, "height": 844}
# Chromium as root in a container, offline: no sandbox (it needs user namespaces), no GPU, and none of
# the background connections to Google that this closed network refuses; no proxy for 127.0.0.1.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-proxy-server",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]


@pytest.fixture
async def tg() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    binary = chromium_binary()
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=binary, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            await launched.close()


async def shot(page: Page, name: str) -> Path:
    """A full-page screenshot at tests/artifacts/<name>.png, to look at after the run."""
    ARTIFACTS.mkdir(exist_ok=True)
    safe = re.sub(r"[^\w.-]+", "-", name)
    path = ARTIFACTS / f"{safe}.png"
    await page.screenshot(path=str(path), full_page=True)
    return path


@dataclass
class Site:
    """A running `bridge run` with its admin server, the fakes it talks to, and its config file."""

    tg: FakeTelegram
    llm: FakeOpenAI
    base: str
    config: Path

    def url(self, path: str) -> str:
        return self.base + path


@asynccontextmanager
async def bridge_site(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, extra: str = "", *, stream: bool = True
) -> AsyncIterator[Site]:
    """`bridge run` on Telegram with the admin server on a free port and a known token; `extra` lines
    go into [telegram] (or start sections of their own); `stream=False` sends replies whole. The config
    file starts with a comment, which the policy editor must keep."""
    port = free_port()
    admin = f'[admin]\nenabled = true\nport = {port}\ntoken = "{TOKEN}"\n'
    config = telegram_run_config(
        tmp_path, OWNER, tg.token, tg.api_base, llm.base_url, extra + admin, stream=stream
    )
    config.write_text("# Bridge for the browser tests: keep this comment\n" + config.read_text())
    async with bridge_running(tmp_path, config):
        await tg.wait_for(lambda: tg.open_polls > 0, timeout=30)
        yield Site(tg, llm, f"http://127.0.0.1:{port}", config)


async def eventually(check: Callable[[], Awaitable[bool]], what: str, within: float = 30) -> None:
    """Poll an async `check` until it holds; AssertionError after `within` seconds."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within} s waiting for {what}")
        await asyncio.sleep(0.1)


async def log_in(page: Page, site: Site, path: str = "/") -> None:
    await page.goto(site.url(path))
    await page.get_by_label("Token").fill(TOKEN)
    await page.get_by_role("button", name="Log in").click()
    await page.wait_for_url(site.url(path))
