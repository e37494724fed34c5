"""Delivery truth and stuck chats in Chromium, on a real `bridge run` with the fake Bot API: a reply the
user's block refused shows as failed in the open conversation without a reload, its Retry sends it and
the Outbox page follows live; a slow chat's run and waiting message show their ages with Stop in the
row; a failed run is answered again from the Runs page."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import Browser, expect

from devkit.fakes.openai_server import FakeOpenAI, delay, http_error, text
from devkit.fakes.telegram_api import FakeTelegram
from tests.adapters.conftest import OWNER
from tests.browser.conftest import PHONE, bridge_site, log_in, shot

WAIT_MS = 20_000


def texts_to(tg: FakeTelegram, chat: int) -> list[str]:
    return [m["text"] for m in tg.messages_in(chat)]


async def test_a_refused_reply_shows_as_failed_live_and_retry_delivers_it_while_the_outbox_follows(
    tmp_path: Path, tg: FakeTelegram, browser: Browser
) -> None:
    # Replies go whole (no draft edited in place): the reply is one sendMessage, which the fault refuses.
    async with FakeOpenAI() as llm, bridge_site(tmp_path, tg, llm, stream=False) as site:
        llm.push(text("First answer."))
        tg.dm(OWNER, "hello")
        await tg.wait_for(lambda: "First answer." in texts_to(tg, OWNER), timeout=30)

        page = await browser.new_page()
        await log_in(page, site, "/sessions/main")
        outbox = await browser.new_page()
        await log_in(outbox, site, "/outbox")
        overview = await browser.new_page()
        await log_in(overview, site)
        for watching in (page, outbox, overview):
            await expect(watching.locator("body.connected")).to_have_count(1)
        chat = page.locator("#chat")
        await expect(chat.locator(".msg.bot", has_text="First answer.").locator(".pill")).to_have_text("sent")

        # The user blocks the bot: the next reply is refused. The open pages learn it by themselves.
        await page.evaluate("window.stayed = true")
        tg.fail_next("sendMessage", "403")
        llm.push(text("Second answer."))
        tg.dm(OWNER, "are you there?")
        bubble = chat.locator(".msg.bot", has_text="Second answer.")
        await expect(bubble.locator(".pill")).to_have_text("failed", timeout=WAIT_MS)
        await expect(bubble.locator(".delivery")).to_contain_text("blocked by the user")
        assert await page.evaluate("window.stayed === true")
        await expect(overview.locator("#feed")).to_contain_text("reply failed", timeout=WAIT_MS)
        row = outbox.locator("table.outbox tbody tr", has_text="Second answer.")
        await expect(row.locator(".pill")).to_have_text("failed", timeout=WAIT_MS)
        await shot(page, "session-delivery-failed")
        assert "Second answer." not in texts_to(tg, OWNER)

        # Unblocked: Retry in the conversation sends it, and both pages show it sent, unreloaded.
        await bubble.get_by_role("button", name="Retry").click()
        await tg.wait_for(lambda: "Second answer." in texts_to(tg, OWNER), timeout=30)
        await expect(bubble.locator(".pill")).to_have_text("sent", timeout=WAIT_MS)
        await expect(row.locator(".pill")).to_have_text("sent", timeout=WAIT_MS)
        await shot(outbox, "outbox-live")
        assert texts_to(tg, OWNER).count("Second answer.") == 1


async def test_a_stuck_chat_shows_how_long_it_has_run_and_waited_and_stop_in_its_row_ends_it(
    tmp_path: Path, tg: FakeTelegram, browser: Browser
) -> None:
    async with FakeOpenAI() as llm, bridge_site(tmp_path, tg, llm, stream=False) as site:
        llm.push(delay(60, text("Too late.")))
        tg.dm(OWNER, "a hard question")
        await llm.wait_for_requests(1, timeout=30)
        tg.dm(OWNER, "hello? anyone?")

        page = await browser.new_page()
        await log_in(page, site)
        lane = page.locator("#platforms table", has_text="session").locator("tbody tr", has_text="main")
        await expect(lane).to_contain_text("for ", timeout=WAIT_MS)
        await expect(lane).to_contain_text("1 message, the oldest for", timeout=WAIT_MS)
        runs = await browser.new_page()
        await log_in(runs, site, "/runs")
        running = runs.locator("table.runs tbody tr", has_text="running for")
        await expect(running).to_have_count(1)
        await expect(running.get_by_role("button", name="Stop")).to_be_visible()
        # The ages count up between refreshes, without any event coming.
        ran = lane.locator("[data-since]").first
        before = await ran.text_content()
        await expect(ran).not_to_have_text(before or "", timeout=5_000)
        await shot(page, "overview-queues")
        await shot(runs, "runs-running")

        page.once("dialog", lambda dialog: dialog.accept())
        await lane.get_by_role("button", name="Stop").click()
        await expect(page.locator("#notice")).to_contain_text("Stopped the answer in progress.")
        await expect(page.locator("#platforms")).to_contain_text(
            "Nothing running or waiting.", timeout=WAIT_MS
        )
        await expect(runs.locator("table.runs tbody tr", has_text="running for")).to_have_count(
            0, timeout=WAIT_MS
        )
        phone = await browser.new_page(viewport=PHONE)
        await log_in(phone, site, "/runs")
        width = await phone.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert width <= 0, f"the runs page is {width}px wider than a phone"
        await shot(phone, "runs-stop-phone")


async def test_a_failed_run_is_answered_again_from_the_runs_page(
    tmp_path: Path, tg: FakeTelegram, browser: Browser
) -> None:
    async with FakeOpenAI() as llm, bridge_site(tmp_path, tg, llm, stream=False) as site:
        llm.push(http_error(500))
        tg.dm(OWNER, "what is two and two?")
        await tg.wait_for(lambda: any("saved" in t for t in texts_to(tg, OWNER)), timeout=60)

        page = await browser.new_page()
        await log_in(page, site, "/runs")
        failed = page.locator("table.runs tbody tr", has_text="error")
        await expect(failed).to_have_count(1)
        await shot(page, "runs-failed")
        llm.push(text("Four."))
        await failed.get_by_role("button", name="Answer again").click()
        await expect(page.locator("#notice")).to_contain_text("Answering the last message again.")
        await tg.wait_for(lambda: "Four." in texts_to(tg, OWNER), timeout=30)
        await expect(page.locator("table.runs tbody tr", has_text="ok")).to_have_count(1, timeout=WAIT_MS)
        # The session's conversation tells the same story: the failure notice, then the answer, sent.
        await page.goto(site.url("/sessions/main"))
        await expect(page.locator("#chat .msg.bot", has_text="Four.").locator(".pill")).to_have_text("sent")
        await expect(page.locator("#chat .msg.notice")).to_contain_text("saved")
        await shot(page, "session-answered-again")
