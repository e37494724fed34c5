"""The Logs page in Chromium against a real `bridge run`: from a failed run to the log around it, the
level filter and search, new lines arriving live (and held while paused), and a phone's width."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.async_api import Browser, expect

from devkit.fakes.openai_server import FakeOpenAI, http_error, text
from devkit.fakes.telegram_api import FakeTelegram
from tests.adapters.conftest import OWNER
from tests.browser.conftest import PHONE, bridge_site, log_in, shot
from tests.browser.test_dashboard_browser import no_horizontal_scroll

WAIT_MS = 20_000


async def test_an_operator_reads_the_log_around_a_failed_run_and_follows_it_live(
    tmp_path: Path, tg: FakeTelegram, browser: Browser
) -> None:
    async with FakeOpenAI() as llm, bridge_site(tmp_path, tg, llm) as site:
        llm.push(http_error(500, "the model is down"))
        tg.dm(OWNER, "hello?")
        await tg.wait_for(lambda: any("⚠️" in m["text"] for m in tg.messages_in(OWNER)), timeout=30)

        # The failed run's page links to the log around it, where the runner's warning is marked.
        page = await browser.new_page()
        await log_in(page, site, "/runs")
        await page.locator("table.runs tbody tr").first.get_by_role("link").first.click()
        await expect(page.locator(".pill.error").first).to_be_visible()
        await page.get_by_role("link", name="Log around this run").click()
        await expect(page).to_have_url(re.compile(r"/logs\?run=[0-9a-f]{16}$"))
        log = page.locator("#log")
        warning = log.locator(".line.WARNING.of-run", has_text="the model failed")
        await expect(warning).to_have_count(1)
        await expect(warning).to_contain_text("the model is down")
        assert tg.token not in await page.content()
        await shot(page, "logs")

        # The level filter applies as it is chosen: ERROR hides the warning, WARNING shows it again.
        await page.get_by_label("Level at least").select_option("ERROR")
        await expect(page).to_have_url(re.compile(r"level=ERROR"))
        await expect(log.locator(".line.WARNING")).to_have_count(0)
        await page.get_by_label("Level at least").select_option("WARNING")
        await expect(warning).to_have_count(1)
        # The search keeps the run and the level, and leaves only the lines that contain it.
        await page.get_by_label("Search").fill("MODEL FAILED")
        await page.get_by_label("Search").press("Enter")
        await expect(page).to_have_url(re.compile(r"q=MODEL\+FAILED&run="))
        await expect(log.locator(".line")).to_have_count(1)
        href = await page.get_by_role("link", name="Download").get_attribute("href") or ""
        assert href.startswith("/api/logs/download?")
        assert all(part in href for part in ("level=WARNING", "q=MODEL+FAILED", "run="))

        # The whole log, live: the next turn's line appears without a reload.
        await page.get_by_role("navigation").get_by_role("link", name="Logs").click()
        await expect(page).to_have_url(site.url("/logs"))
        await expect(page.locator("body.connected")).to_have_count(1)
        await page.evaluate("window.stayed = true")
        llm.push(text("Back again."))
        tg.dm(OWNER, "and now?")
        await expect(log.locator(".line", has_text=re.compile(r"main: ok"))).to_have_count(1, timeout=WAIT_MS)
        assert await page.evaluate("window.stayed === true")

        # Paused, new lines wait (counted on the button) and arrive on Resume.
        pause = page.get_by_role("button", name="Pause")
        await pause.click()
        llm.push(text("Once more."))
        tg.dm(OWNER, "once more?")
        resume = page.get_by_role("button", name=re.compile(r"Resume \(\d+ new\)"))
        await expect(resume).to_be_visible(timeout=WAIT_MS)
        await expect(log.locator(".line", has_text=re.compile(r"main: ok"))).to_have_count(1)
        await resume.click()
        await expect(log.locator(".line", has_text=re.compile(r"main: ok"))).to_have_count(2)

        # On a phone, long lines wrap and nothing scrolls sideways.
        phone = await browser.new_page(viewport=PHONE)
        await log_in(phone, site, "/logs")
        await expect(phone.locator("#log .line").first).to_be_visible()
        await no_horizontal_scroll(phone)
        await shot(phone, "logs-phone")
