"""The Tools page in Chromium against a real `bridge run` with two real MCP servers: both `not started`
until a Telegram turn loads them, then, on the open page by itself, one `connected` with its tools
and their token cost and one `failing` with its last error; Connect now; a phone's width."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from playwright.async_api import Browser, expect

from devkit.fakes.openai_server import FakeOpenAI, text, tool_call
from devkit.fakes.telegram_api import FakeTelegram
from tests.adapters.conftest import OWNER
from tests.browser.conftest import PHONE, bridge_site, log_in, shot
from tests.browser.test_dashboard_browser import no_horizontal_scroll
from tests.mcp.conftest import ROOT, starts

WAIT_MS = 20_000
SECRET = "s3cret-env-value-4242"


def servers(log: Path) -> str:
    """Two [[mcp.servers]]: the test server over stdio, and one whose process exits at once."""
    return (
        "[[mcp.servers]]\n"
        'name = "fake"\n'
        'description = "A test server: echo, add, picture and more."\n'
        f'command = "{sys.executable}"\n'
        'args = ["-m", "devkit.fakes.mcp_server"]\n'
        f'cwd = "{ROOT}"\n'
        f'env = {{ MCP_TEST_LOG = "{log}", FAKE_API_TOKEN = "{SECRET}" }}\n'
        "[[mcp.servers]]\n"
        'name = "broken"\n'
        'description = "A server whose process exits before it answers."\n'
        f'command = "{sys.executable}"\n'
        'args = ["-c", "import sys; sys.exit(3)"]\n'
        f'env = {{ BROKEN_TOKEN = "{SECRET}" }}\n'
    )


async def test_the_tools_page_shows_a_connected_and_a_failing_mcp_server_live_and_fits_a_phone(
    tmp_path: Path, tg: FakeTelegram, browser: Browser
) -> None:
    log = tmp_path / "mcp.log"
    async with FakeOpenAI() as llm, bridge_site(tmp_path, tg, llm, servers(log)) as site:
        page = await browser.new_page()
        await log_in(page, site, "/tools")
        await expect(page.get_by_role("heading", name="Tools", exact=True)).to_be_visible()
        fake, broken = page.locator("#mcp-fake"), page.locator("#mcp-broken")
        await expect(fake.locator(".pill")).to_have_text("not started")
        await expect(broken.locator(".pill")).to_have_text("not started")
        await expect(page.locator("#groups")).to_contain_text("webfetch")
        assert starts(log) == []

        # A turn loads both groups; the open page follows by itself.
        await expect(page.locator("body.connected")).to_have_count(1)
        llm.push(
            tool_call("load_tool_group", {"group_name": "fake"}),
            tool_call("load_tool_group", {"group_name": "broken"}),
            text("One works, one does not."),
        )
        tg.dm(OWNER, "load the servers")
        await tg.wait_for(lambda: any("One works" in m["text"] for m in tg.messages_in(OWNER)), timeout=30)
        await expect(fake.locator(".pill")).to_have_text("connected", timeout=WAIT_MS)
        await expect(fake.locator(".tool-list")).to_contain_text("echo")
        await expect(fake.locator(".tool-list")).to_contain_text("Echo the text back.")
        await expect(fake.locator(".tokens").first).to_have_text(re.compile(r"^~?[1-9][\d,]*$"))
        await expect(broken.locator(".pill")).to_have_text("failing", timeout=WAIT_MS)
        await expect(broken.locator(".last-error")).to_have_text(
            "it exited or closed the connection before answering"
        )
        await expect(broken.locator(".next-try")).to_contain_text("at the next call")
        assert SECRET not in await page.content()
        await shot(page, "tools")

        # Connect now tries the failing server at once and says why it failed again; the page, loaded
        # again, counts the second failure.
        await broken.get_by_role("button", name="Connect now").click()
        await expect(page.locator("#notice")).to_contain_text("could not be started")
        await page.reload()
        await expect(broken).to_contain_text("2 in a row")

        phone = await browser.new_page(viewport=PHONE)
        await log_in(phone, site, "/tools")
        await expect(phone.locator("#mcp-fake .pill")).to_have_text("connected")
        await no_horizontal_scroll(phone)
        await shot(phone, "tools-phone")
