"""The tasks and hooks page in Chromium against a real `bridge run` on the fake Bot API and the fake model:
a task made in the owner's DM is listed, paused, run now (its firing appears with a link to its run)
and cancelled; a signed webhook event appears with its state and run; the page fits a phone."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx
from playwright.async_api import Browser, expect

from bridge.tasks.hooks import TIMESTAMP_HEADER, signature
from devkit.fakes.openai_server import FakeOpenAI, text, tool_call
from devkit.fakes.telegram_api import FakeTelegram
from tests.adapters.conftest import OWNER
from tests.browser.conftest import PHONE, Site, bridge_site, log_in, shot
from tests.browser.test_dashboard_browser import no_horizontal_scroll

SECRET = "a-webhook-secret-for-the-browser"
HOOKS = (
    f'[[hooks]]\nname = "deploys"\nsecret = "{SECRET}"\ndeliver_to = "telegram:dm:{OWNER}"\n'
    'prompt = "Deploy of {{body.app}}: {{body.status}}"\nid_field = "id"\n'
)
WAIT_MS = 20_000


def texts_to(tg: FakeTelegram, chat: int) -> list[str]:
    return [m["text"] for m in tg.messages_in(chat)]


async def post_hook(site: Site, body: dict[str, object]) -> httpx.Response:
    """A sender's signed request to the hook, beside the dashboard on the admin server."""
    raw = json.dumps(body).encode()
    stamp = int(time.time())
    headers = {
        "X-Bridge-Signature": signature(SECRET, raw, stamp),
        TIMESTAMP_HEADER: str(stamp),
        "Content-Type": "application/json",
    }
    async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
        return await client.post(site.url("/hooks/deploys"), content=raw, headers=headers)


async def test_an_operator_pauses_runs_now_and_cancels_a_task_and_sees_a_webhook_event(
    tmp_path: Path, tg: FakeTelegram, browser: Browser
) -> None:
    async with FakeOpenAI() as llm, bridge_site(tmp_path, tg, llm, HOOKS) as site:
        llm.push(
            tool_call("load_tool_group", {"group_name": "scheduled_tasks"}),
            tool_call("schedule_task", {"prompt": "Summarise the day", "when": "0 18 * * *"}),
            text("Scheduled."),
        )
        tg.dm(OWNER, "every day at 18:00 summarise the day")
        await tg.wait_for(lambda: "Scheduled." in texts_to(tg, OWNER), timeout=30)

        page = await browser.new_page()
        await log_in(page, site, "/tasks")
        await expect(page.get_by_role("heading", name="Tasks and hooks")).to_be_visible()
        row = page.locator("tr.task")
        await expect(row).to_have_count(1)
        await expect(row).to_contain_text("Summarise the day")
        await expect(row).to_contain_text(f"telegram:{OWNER}")
        await expect(row).to_contain_text("at 18:00")
        await expect(row.locator(".firings")).to_contain_text("none yet")
        await expect(page.locator("body.connected")).to_have_count(1)

        # Pause: the task says so, and offers Resume instead.
        await row.get_by_role("button", name="Pause").click()
        await expect(page.locator("#notice")).to_contain_text("Paused task")
        await expect(row.locator(".pill").first).to_have_text("paused", timeout=WAIT_MS)
        await expect(row.get_by_role("button", name="Resume")).to_be_visible()

        # Run now, paused as it is: the firing appears by itself, with a link to its run.
        llm.push(text("Today: three deploys, no incidents."))
        await row.get_by_role("button", name="Run now").click()
        await expect(page.locator("#notice")).to_contain_text("fires now")
        await tg.wait_for(lambda: "Today: three deploys, no incidents." in texts_to(tg, OWNER), timeout=30)
        run_link = row.locator(".firings a")
        await expect(run_link).to_have_count(1, timeout=WAIT_MS)

        # A signed webhook event appears below, with its state and its run.
        llm.push(text("Shop deployed, all green."))
        sent = await post_hook(site, {"id": "deploy-1", "app": "shop", "status": "green"})
        assert sent.status_code == 202, sent.text
        await tg.wait_for(lambda: "Shop deployed, all green." in texts_to(tg, OWNER), timeout=30)
        event = page.locator("#hook-events tbody tr", has_text="deploy-1")
        await expect(event).to_contain_text("deploys", timeout=WAIT_MS)
        await expect(event.get_by_role("link", name="run")).to_be_visible()
        # The hook's chat, the owner's DM, is linked by its session's key.
        await expect(page.locator("#hook-events p").get_by_role("link")).to_have_text("main")
        await page.reload()
        await expect(row.locator(".firings .pill")).to_have_text("ok")
        await expect(event.locator(".pill")).to_have_text("ok")
        await shot(page, "tasks")

        # On a phone's screen it fits: the tables scroll in their boxes.
        phone = await browser.new_page(viewport=PHONE)
        await log_in(phone, site, "/tasks")
        await expect(phone.locator("tr.task")).to_have_count(1)
        await no_horizontal_scroll(phone)
        await shot(phone, "tasks-phone")

        # The firing's link opens its run.
        await run_link.click()
        await expect(page.get_by_role("heading", name=re.compile("^Run "))).to_be_visible()
        await page.go_back()

        # Cancel, once confirmed: it leaves the live list, and is listed as cancelled with the ended.
        page.once("dialog", lambda dialog: dialog.accept())
        await page.locator("tr.task").get_by_role("button", name="Cancel").click()
        await expect(page.locator("#notice")).to_contain_text("Cancelled task")
        await expect(page.locator("#tasks")).to_contain_text("No scheduled tasks waiting.", timeout=WAIT_MS)
        await page.get_by_role("link", name="Ended ones too").click()
        await expect(page.locator("tr.task .pill").first).to_have_text("cancelled")
        await expect(page.locator("tr.task").get_by_role("button")).to_have_count(0)
    # Fired once: by Run now, never by the pause, the resume or the cancel.
    assert sum("[Scheduled task" in str(r["messages"][-1].get("content")) for r in llm.requests) == 1
