"""The dashboard's chat in Chromium against a real `bridge run`: log in, open Chat, talk in main and see
the answer stream in, a tool's activity as it runs, /clear, a new web session of its own, and the page
at a phone's width."""

from __future__ import annotations

import json
from pathlib import Path

from playwright.async_api import Browser, expect

from devkit.fakes.openai_server import FakeOpenAI, paced, text, tool_call
from devkit.fakes.telegram_api import FakeTelegram
from tests.browser.conftest import PHONE, bridge_site, log_in, shot
from tests.browser.test_dashboard_browser import no_horizontal_scroll

WAIT_MS = 20_000
ANSWER = "Hello, operator: this answer streams in a few characters at a time."


async def test_an_operator_chats_with_the_bot_from_the_dashboard(
    tmp_path: Path, tg: FakeTelegram, browser: Browser
) -> None:
    async with FakeOpenAI() as llm, bridge_site(tmp_path, tg, llm) as site:
        page = await browser.new_page()
        await log_in(page, site)
        await page.get_by_role("link", name="Chat").click()
        await expect(page.get_by_role("combobox", name="Session")).to_have_value("main")
        await expect(page.locator("#conversation")).to_contain_text("No messages yet")
        await expect(page.locator("body.connected")).to_have_count(1)

        # The answer streams in: the bubble grows before the reply is whole.
        llm.push(paced(text(ANSWER), 0.15))
        box = page.get_by_role("textbox", name="Message")
        await box.fill("hello from the dashboard")
        await box.press("Enter")
        log = page.locator("#conversation")
        await expect(log.locator(".msg.user")).to_contain_text("hello from the dashboard")
        await expect(log.locator(".msg.bot.streaming")).to_have_count(1, timeout=WAIT_MS)
        partial = await log.locator(".msg.bot.streaming .text").text_content()
        assert partial and ANSWER.startswith(partial) and partial != ANSWER
        await expect(log.locator(".msg.bot")).to_contain_text(ANSWER, timeout=WAIT_MS)
        await expect(log.locator(".msg.streaming")).to_have_count(0)
        await expect(page.locator("#chat-typing")).to_be_hidden()

        # A tool call shows as it runs, one line edited when it finishes, then the answer.
        llm.push(tool_call("get_current_time", {}), text("It is noon."))
        await box.fill("what time is it?")
        await page.get_by_role("button", name="Send").click()
        activity = log.locator(".msg.activity")
        await expect(activity).to_contain_text("get_current_time", timeout=WAIT_MS)
        await expect(activity).to_contain_text("✓", timeout=WAIT_MS)
        await expect(log.locator(".msg.bot .text").last).to_have_text("It is noon.", timeout=WAIT_MS)
        await shot(page, "chat")

        # What was said is main's history: the page drawn again shows it from the store.
        await page.reload()
        await expect(log.locator(".msg.user")).to_have_count(2)
        await expect(log.locator("details.tool")).to_contain_text("get_current_time")

        # /clear starts a fresh session: the old conversation leaves the page, the notice stays.
        await expect(page.locator("body.connected")).to_have_count(1)
        await box.fill("/clear")
        await box.press("Enter")
        await expect(log.locator(".msg.note")).to_contain_text("Started a new session", timeout=WAIT_MS)
        await expect(log).not_to_contain_text("hello from the dashboard")
        await page.reload()
        await expect(log).to_contain_text("No messages yet")

        # A new web session of its own: its own history, nothing of main's.
        await page.get_by_role("combobox", name="Session").select_option(label="New session…")
        await page.get_by_role("textbox", name="Name").fill("scratch")
        await page.get_by_role("button", name="Open").click()
        await expect(page).to_have_url(site.url("/chat?session=scratch"))
        await expect(page.locator("body.connected")).to_have_count(1)
        llm.push(text("Hi, scratch."))
        await box.fill("hi from scratch")
        await box.press("Enter")
        await expect(log.locator(".msg.bot")).to_contain_text("Hi, scratch.", timeout=WAIT_MS)
        asked = json.dumps(llm.last_request["messages"])
        assert "hi from scratch" in asked and "what time is it?" not in asked
        await expect(page.locator(".chat-facts")).to_contain_text("web:dm:scratch")
        await page.goto(site.url("/chat"))
        await expect(page.get_by_role("combobox", name="Session")).to_contain_text("scratch")

        # On a phone: the chat fills the screen, nothing sticks out sideways, the box is in reach.
        phone = await browser.new_page(viewport=PHONE)
        await log_in(phone, site, "/chat?session=scratch")
        await expect(phone.locator("#conversation")).to_contain_text("Hi, scratch.")
        await no_horizontal_scroll(phone)
        form = await phone.locator("#chat-form").bounding_box()
        assert form is not None and form["width"] > PHONE["width"] * 0.85
        await expect(phone.get_by_role("textbox", name="Message")).to_be_in_viewport()
        await shot(phone, "chat-phone")
