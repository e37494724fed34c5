"""The dashboard in Chromium against a real `bridge run` on the fake Bot API and the fake model: log in,
watch a chat live, open a run's trace, edit the send policy and see its effect, and the locks."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from playwright.async_api import Browser, Page, expect

from devkit.fakes.openai_server import FakeOpenAI, text, tool_call
from devkit.fakes.telegram_api import FakeTelegram
from tests.adapters.conftest import OWNER
from tests.browser.conftest import PHONE, TOKEN, Site, bridge_site, eventually, log_in, shot

GROUP = -100777
MENTION = "@bridge_test_bot"
WAIT_MS = 20_000


async def no_horizontal_scroll(page: Page) -> None:
    """The page fits a phone's width: nothing sticks out to the side (tables scroll in their box)."""
    width = await page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert width <= 0, f"the page is {width}px wider than the screen"


async def test_an_operator_logs_in_watches_a_telegram_chat_live_and_opens_a_runs_trace(
    tmp_path: Path, tg: FakeTelegram, browser: Browser
) -> None:
    async with FakeOpenAI() as llm, bridge_site(tmp_path, tg, llm) as site:
        llm.push(tool_call("get_current_time", {}), text("It is noon."))
        tg.dm(OWNER, "what time is it?")
        await tg.wait_for(lambda: any("noon" in m["text"] for m in tg.messages_in(OWNER)), timeout=30)

        page = await browser.new_page()
        await page.goto(site.url("/"))
        await expect(page).to_have_url(re.compile(r"/login\?next=/$"))
        await shot(page, "login")
        await log_in(page, site)
        await expect(page.get_by_role("heading", name="Overview")).to_be_visible()
        await expect(page.locator("#platforms")).to_contain_text("running")
        await shot(page, "overview")

        await page.get_by_role("link", name="Sessions").click()
        await expect(page.get_by_role("link", name="main")).to_be_visible()
        await shot(page, "sessions")
        await page.get_by_role("link", name="main").click()
        chat = page.locator("#chat")
        await expect(chat.locator(".msg.user")).to_contain_text("what time is it?")
        await expect(chat.locator(".msg.bot")).to_contain_text("It is noon.")

        # The next turn appears on the open page by itself: the page is the same (no reload). The
        # overview, open beside it, lists it in its live feed.
        overview = await browser.new_page()
        await log_in(overview, site)
        # Both pages' event streams are open (the server subscribes before it answers).
        for watching in (page, overview):
            await expect(watching.locator("body.connected")).to_have_count(1)
        await page.evaluate("window.stayed = true")
        llm.push(text("Still noon, a minute later."))
        tg.dm(OWNER, "and now?")
        await expect(chat.locator(".msg.user").last).to_contain_text("and now?", timeout=WAIT_MS)
        await expect(chat.locator(".msg.bot").last).to_contain_text("Still noon", timeout=WAIT_MS)
        assert await page.evaluate("window.stayed === true")
        feed = overview.locator("#feed")
        await expect(feed).to_contain_text("message in", timeout=WAIT_MS)
        await expect(feed).to_contain_text("and now?")
        await expect(feed).to_contain_text("run finished")
        await expect(overview.locator("#recent tbody tr")).to_have_count(2, timeout=WAIT_MS)
        await shot(overview, "overview-live")

        # The tool call is folded; opened, it shows its arguments and result.
        tool = chat.locator("details.tool").first
        await expect(tool.locator("pre").first).to_be_hidden()
        await tool.locator("summary").click()
        await expect(tool).to_contain_text("Result")
        await shot(page, "session")

        # The owner's actions: /send off and back, each answered as the chat command answers.
        sending = page.locator("form.actions")
        await sending.get_by_role("button", name="off").click()
        await expect(page.locator("#notice")).to_contain_text("off")
        await expect(sending.locator("[aria-pressed=true]")).to_have_text("off")
        await sending.get_by_role("button", name="inherit").click()
        await expect(sending.locator("[aria-pressed=true]")).to_have_text("inherit")

        await chat.locator(".msg.bot").first.get_by_role("link", name="run").click()
        await expect(page.get_by_role("heading", name=re.compile("^Run "))).to_be_visible()
        steps = page.locator(".timeline > li")
        await expect(steps).to_have_count(3)
        await expect(steps.nth(1)).to_contain_text("Tool get_current_time")
        await steps.nth(0).locator("summary").click()
        await expect(steps.nth(0)).to_contain_text("Request")
        await shot(page, "run-trace")

        # /clear from the page, once confirmed: a fresh session, the old one still stored.
        await page.go_back()
        page.once("dialog", lambda dialog: dialog.accept())
        await page.get_by_role("button", name="Clear").click()
        await expect(page.locator("#chat")).to_contain_text("No messages yet.", timeout=WAIT_MS)

        # On a phone's screen every page fits, the chat included.
        phone = await browser.new_page(viewport=PHONE)
        await log_in(phone, site, "/runs")
        await no_horizontal_scroll(phone)
        await shot(phone, "runs-phone")
        for path, name in [
            ("/", "overview"),
            ("/outbox", "outbox"),
            ("/policy", "policy"),
            ("/sessions", "sessions"),
            ("/pairing", "pairing"),
        ]:
            await phone.goto(site.url(path))
            await no_horizontal_scroll(phone)
            await shot(phone, f"{name}-phone")


async def suppressed(site: Site, text_part: str) -> bool:
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False) as client:
        answer = await client.get(site.url("/api/outbox"), params={"state": "suppressed"})
        return any(text_part in row["text"] for row in answer.json()["outbox"])


async def test_denying_a_group_in_the_policy_editor_suppresses_its_next_reply_and_lists_it_in_the_outbox(
    tmp_path: Path, tg: FakeTelegram, browser: Browser
) -> None:
    allowed = f'allowed_chats = ["{GROUP}"]\n'
    async with FakeOpenAI() as llm, bridge_site(tmp_path, tg, llm, allowed) as site:
        llm.push(text("Hello, group."))
        tg.group(GROUP, OWNER, f"{MENTION} hello")
        await tg.wait_for(lambda: any("Hello, group" in m["text"] for m in tg.messages_in(GROUP)), timeout=30)

        page = await browser.new_page()
        await log_in(page, site, "/policy")
        await page.get_by_role("button", name="Add rule").click()
        rule = page.locator("#rules tbody tr").last
        await rule.get_by_label("action").select_option("deny")
        await rule.get_by_label("surface").fill("telegram")
        await rule.get_by_label("chat type").select_option("group")

        # The tester explains the draft before it is saved.
        await page.get_by_label("Session key").fill(f"telegram:group:{GROUP}")
        await page.get_by_role("button", name="Explain").click()
        await expect(page.locator("#explain-action")).to_have_text("deny")
        await expect(page.locator("#explain-lines")).to_contain_text("matches")
        await shot(page, "policy-explain")

        await page.get_by_role("button", name="Save").click()
        await expect(page.locator("#policy-result")).to_contain_text("Saved")
        saved = site.config.read_text()
        assert "# Bridge for the browser tests: keep this comment" in saved
        assert 'action = "deny"' in saved and 'chat_type = "group"' in saved

        llm.push(text("A secret answer."))
        tg.group(GROUP, OWNER, f"{MENTION} still there?")
        await eventually(lambda: suppressed(site, "A secret answer."), "the reply held back")
        await page.get_by_role("link", name="Outbox").click()
        await page.get_by_role("link", name=re.compile("^suppressed")).click()
        row = page.locator("table.outbox tbody tr", has_text="A secret answer.")
        await expect(row).to_contain_text("suppressed")
        await expect(row.locator(".reason")).to_contain_text("deny")
        await shot(page, "outbox-suppressed")
        assert not any("secret" in m["text"] for m in tg.messages_in(GROUP))


async def test_an_invalid_rule_is_refused_with_its_key_and_reason_and_changes_nothing(
    tmp_path: Path, tg: FakeTelegram, browser: Browser
) -> None:
    async with FakeOpenAI() as llm, bridge_site(tmp_path, tg, llm) as site:
        before = site.config.read_text()
        page = await browser.new_page()
        await log_in(page, site, "/policy")
        await page.get_by_role("button", name="Add rule").click()
        await page.locator("#rules tbody tr").last.get_by_label("surface").fill("telegarm")
        await page.get_by_role("button", name="Save").click()
        result = page.locator("#policy-result")
        await expect(result).to_contain_text("Not saved")
        await expect(result).to_contain_text("session.send_policy.rules.0.match.surface")
        await expect(result).to_contain_text("not a known surface")
        await shot(page, "policy-invalid")
        assert site.config.read_text() == before
        await page.reload()
        await expect(page.locator("#rules tbody tr")).to_have_count(0)


async def test_a_read_only_config_shows_the_editor_read_only_with_the_reason(
    tmp_path: Path, tg: FakeTelegram, browser: Browser
) -> None:
    async with FakeOpenAI() as llm, bridge_site(tmp_path, tg, llm) as site:
        site.config.chmod(0o444)  # as a `:ro` mount would be; no write bit counts even for root
        page = await browser.new_page()
        await log_in(page, site, "/policy")
        await expect(page.locator("#policy-read-only")).to_contain_text(
            "is read-only: mounted read-only? edit it on the host and restart, or mount it writable"
        )
        await expect(page.get_by_role("button", name="Save")).to_have_count(0)
        # The draft can still be tested against a key.
        await page.get_by_role("button", name="Add rule").click()
        await expect(page.locator("#rules tbody tr")).to_have_count(1)


async def test_without_the_token_the_api_answers_401_and_pages_ask_to_log_in(
    tmp_path: Path, tg: FakeTelegram, browser: Browser
) -> None:
    async with FakeOpenAI() as llm, bridge_site(tmp_path, tg, llm) as site:
        page = await browser.new_page()
        answer = await page.request.get(site.url("/api/sessions"))
        assert answer.status == 401
        assert (await page.request.get(site.url("/metrics"))).status == 401
        await page.goto(site.url("/outbox"))
        await expect(page).to_have_url(re.compile(r"/login\?next=/outbox$"))
        await page.get_by_label("Token").fill("not-the-token")
        async with page.expect_response(site.url("/login")) as wrong:
            await page.get_by_role("button", name="Log in").click()
        assert (await wrong.value).status == 401
        await expect(page.get_by_role("alert")).to_contain_text("not right")
        # A cookie from another server's token is no way in either.
        await page.context.add_cookies([{"name": "bridge_admin", "value": "0" * 64, "url": site.base}])
        assert (await page.request.get(site.url("/api/sessions"))).status == 401


STRANGER = 777


def texts_to(tg: FakeTelegram, chat: int) -> list[str]:
    return [m["text"] for m in tg.messages_in(chat)]


async def test_an_owner_approves_a_strangers_pairing_code_in_the_dashboard_and_revokes_it(
    tmp_path: Path, tg: FakeTelegram, browser: Browser
) -> None:
    async with FakeOpenAI() as llm, bridge_site(tmp_path, tg, llm, 'dm_policy = "pairing"\n') as site:
        tg.dm(STRANGER, "hi, may I?")
        await tg.wait_for(lambda: any("approve the code" in t for t in texts_to(tg, STRANGER)), timeout=30)
        code = re.search(r"code (\w{4}-\w{4})", texts_to(tg, STRANGER)[0])
        assert code is not None, texts_to(tg, STRANGER)

        page = await browser.new_page()
        await log_in(page, site, "/pairing")
        await expect(page.locator("main")).to_contain_text("Strangers who DM the bot on Telegram")
        waiting = page.locator("table.pending tbody tr", has_text=code.group(1))
        await expect(waiting).to_contain_text(f"telegram:{STRANGER}")
        await shot(page, "pairing")

        # A wrong code typed in is refused with the reason, and changes nothing.
        await page.get_by_label("Code").fill("ZZZZ-ZZZZ")
        await page.locator("#approve-code").get_by_role("button", name="Approve").click()
        await expect(page.locator("#notice")).to_contain_text("no such code")
        await expect(waiting).to_be_visible()

        await waiting.get_by_role("button", name="Approve").click()
        approved = page.locator("table.approved tbody tr", has_text=f"telegram:{STRANGER}")
        await expect(approved).to_contain_text("dashboard")
        await expect(page.locator("table.pending")).to_contain_text("No codes waiting.")
        await tg.wait_for(lambda: any("approved" in t for t in texts_to(tg, STRANGER)), timeout=30)

        llm.push(text("Welcome aboard."))
        tg.dm(STRANGER, "hello now")
        await tg.wait_for(lambda: "Welcome aboard." in texts_to(tg, STRANGER), timeout=30)

        page.once("dialog", lambda dialog: dialog.accept())
        await approved.get_by_role("button", name="Revoke").click()
        await expect(page.locator("table.approved")).to_contain_text("Nobody yet.")
        await shot(page, "pairing-revoked")
        before = len(texts_to(tg, STRANGER))
        tg.dm(STRANGER, "still there?")
        await tg.wait_for(lambda: len(texts_to(tg, STRANGER)) > before, timeout=30)
        assert "approve the code" in texts_to(tg, STRANGER)[-1]
        assert len(llm.requests) == 1  # only the approved turn reached the model
