"""Breaks 5, 7, 8 and 10 of the authority issue, each through a real `bridge run` (devkit/processes.py)
against the fake Bot API and the fake model, as an attacker or a second worker would meet them.

5. Telegram webhook mode on two workers with no webhook_secret: each registered a random secret of
   its own, Telegram kept the last, and the other worker answered 403.
7. Login sent a correct token's browser to `//evil.example` for next=/%09/evil.example.
8. A wrong bearer token cost nothing: parallel guesses were all answered, none ever refused.
10. An attachment was read whole before its size was checked: 1 KB announced, 50 MB in memory.

Breaks 6, 9 and 11 have theirs in tests/adapters (test_tasks_run, test_poller_cutoff,
test_admin_limits_run), breaks 1 to 4 in test_breaks_run.py.
"""

from __future__ import annotations

import asyncio
import html
import re
import sqlite3
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from bridge.http.throttle import PER_CLIENT, WINDOW_S
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI, Reply
from devkit.fakes.telegram_api import MB, FakeTelegram
from devkit.processes import bridge_running, start_bridge, telegram_run_config
from tests.adapters.conftest import OWNER
from tests.adapters.test_failover import FIRST_USER, Worker, answered, config_for
from tests.adapters.test_run import SECRET_HEADER
from tests.http.conftest import TOKEN
from tests.http.test_admin_hardening import where_a_browser_goes
from tests.pg import PostgresServer, free_port

WAIT_S = 30.0
WRONG = "a-guess-at-the-admin-token-000000"


def admin_config(tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, port: int) -> Path:
    extra = f'[admin]\nenabled = true\nport = {port}\ntoken = "{TOKEN}"\n'
    return telegram_run_config(tmp_path, OWNER, tg.token, tg.api_base, llm.base_url, extra)


async def admin_up(base: str) -> None:
    """Until the admin server of the starting process answers its open login page."""
    async with asyncio.timeout(WAIT_S), httpx.AsyncClient(base_url=base, trust_env=False) as client:
        while True:
            try:
                if (await client.get("/login")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)


# -- 5 -------------------------------------------------------------------------------------------


async def echo(request: dict[str, Any]) -> Reply:
    """Answers "answer to: <the last user message>" (a caption with a photo is in that text too)."""
    asked = next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user")
    return fake.text(f"answer to: {asked}")


async def test_webhook_workers_without_a_configured_secret_register_one_and_both_take_updates(
    tmp_path: Path, tg: FakeTelegram, postgres: PostgresServer
) -> None:
    url = postgres.database()
    started: list[Worker] = []
    ports: list[int] = []
    async with FakeOpenAI(echo) as llm:
        try:
            # Two workers of one bot on one database, each on its own port so a request can be sent
            # to either; no webhook_secret, so each picks the default one.
            for name in ("a", "b"):
                folder = tmp_path / name
                folder.mkdir()
                port = free_port()
                ports.append(port)
                hook = f"http://127.0.0.1:{port}/telegram-hook"
                webhook = f'mode = "webhook"\nwebhook_url = "{hook}"\nport = {port}\n'
                config = config_for(folder, tg, llm, url, extra=webhook)
                started.append(Worker(await start_bridge(folder, "run", "--config", str(config))))
                # One after the other: the second one's setWebhook is the one Telegram keeps.
                await started[-1].wait_until_said("running: telegram")
            registered = [params for method, params in tg.calls if method == "setwebhook"]
            assert len(registered) == 2, registered
            assert tg.webhook is not None
            kept = str(tg.webhook["secret_token"])
            # What Telegram would do: post each update with the secret it kept, to whichever worker.
            statuses = []
            for n, port in enumerate(ports):
                user = FIRST_USER + n
                update = {"update_id": user, "message": tg.dm(user, f"hello {user}")}
                async with (
                    aiohttp.ClientSession() as http,
                    http.post(
                        f"http://127.0.0.1:{port}/telegram-hook", json=update, headers={SECRET_HEADER: kept}
                    ) as answer,
                ):
                    statuses.append(answer.status)
            assert statuses == [200, 200], f"worker answers with Telegram's secret: {statuses}"
            users = [FIRST_USER, FIRST_USER + 1]
            await tg.wait_for(lambda: all(answered(tg, u, f"hello {u}") for u in users), timeout=WAIT_S)
        finally:
            for worker in started:
                await worker.end()
    assert len({str(params["secret_token"]) for params in registered}) == 1
    # The default secret is derived from the token, never the token itself, and never logged.
    assert kept != tg.token and not any(kept in line for w in started for line in w.lines)


# -- 7 -------------------------------------------------------------------------------------------

# The report's own target, then the same trick in other forms: each as the login form posts it.
HOSTILE_TARGETS = [
    "/%09/evil.example",
    "/\t/evil.example",
    "/%2F%2Fevil.example",
    "/%5Cevil.example",
    "/\\evil.example",
    "//evil.example",
    "https://evil.example/",
]


async def test_login_in_a_running_bridge_sends_back_only_to_a_path_of_this_server(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    async with FakeOpenAI() as llm, bridge_running(tmp_path, admin_config(tmp_path, tg, llm, port)):
        await admin_up(base)
        async with httpx.AsyncClient(base_url=base, trust_env=False, timeout=10) as browser:
            # The report's own way in: a link to the login page, whose form carries `next` on.
            page = await browser.get("/login?next=/%09/evil.example")
            carried = re.search(r'name="next" value="([^"]*)"', page.text)
            assert carried is not None, page.text
            locations = {}
            for target in [html.unescape(carried[1]), *HOSTILE_TARGETS, "/sessions/main?tab=runs"]:
                answer = await browser.post("/login", data={"token": TOKEN, "next": target})
                assert answer.status_code == 303, (target, answer.status_code, answer.text)
                locations[target] = answer.headers["Location"]
    # A path of this server, as a browser would read the Location (tabs dropped, \ taken for /),
    # even after a proxy decodes it once more; and a plain page of it is kept, not thrown away.
    for target, location in locations.items():
        for form in (location, re.sub("%(09|2[fF]|5[cC])", lambda m: chr(int(m[1], 16)), location)):
            assert where_a_browser_goes(form) == ("http", "admin.local"), (target, location)
    assert locations["/sessions/main?tab=runs"] == "/sessions/main?tab=runs"


# -- 8 -------------------------------------------------------------------------------------------

BURST = 40


async def test_a_burst_of_wrong_bearer_tokens_is_refused_after_a_few_with_one_log_line(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    async with FakeOpenAI() as llm:
        async with bridge_running(tmp_path, admin_config(tmp_path, tg, llm, port)) as process:
            await admin_up(base)
            headers = {"Authorization": f"Bearer {WRONG}"}
            async with httpx.AsyncClient(
                base_url=base, headers=headers, trust_env=False, timeout=10
            ) as guesser:
                answers = await asyncio.gather(*(guesser.get("/healthz") for _ in range(BURST)))
            async with httpx.AsyncClient(
                base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False, timeout=10
            ) as owner:
                # Locked out, the right token waits too: answering it would tell a guesser it was right.
                right = await owner.get("/healthz")
        assert process.stderr is not None
        log = (await process.stderr.read()).decode(errors="replace")
    statuses = [answer.status_code for answer in answers]
    assert sorted(statuses) == [401] * PER_CLIENT + [429] * (BURST - PER_CLIENT), statuses
    for answer in answers:
        if answer.status_code == 429:
            assert 1 <= int(answer.headers["Retry-After"]) <= WINDOW_S
    assert right.status_code == 429 and int(right.headers["Retry-After"]) >= 1
    about = [line for line in log.splitlines() if "wrong tokens" in line]
    assert len(about) == 1, log
    assert "127.0.0.1" in about[0] and "bridge admin" in about[0]  # who, and the remedy
    assert WRONG not in log and TOKEN not in log


# -- 10 ------------------------------------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
LIMIT = 256 * 1024
HUGE = 50 * MB
# The most the bot's peak memory may grow reading a refused 50 MB body: room for the allocator and
# the turn's own work, far below the body itself (reading it whole took 150 MB and more).
GROWTH = 30 * MB


def peak_memory(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM), in bytes."""
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^VmHWM:\s+(\d+) kB$", status, re.MULTILINE)
    assert found is not None, status
    return int(found[1]) * 1024


async def test_a_photo_announced_small_but_served_huge_is_refused_without_reading_it(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    def said(marker: str) -> bool:
        texts = [str(m["text"]) for m in tg.messages_in(OWNER)]
        return any(text.startswith("answer to:") and marker in text for text in texts)

    async with FakeOpenAI(echo) as llm:
        extra = f"[media]\nmax_bytes = {LIMIT}\n"
        config = telegram_run_config(tmp_path, OWNER, tg.token, tg.api_base, llm.base_url, extra)
        async with bridge_running(tmp_path, config) as process:
            # An honest photo under the limit first: the bot's peak with one photo read and answered.
            honest = tg.dm(OWNER, None, photo=PNG, caption="HONEST")
            tg.serve(honest["photo"][-1]["file_id"], size=LIMIT // 2, chunked=True)
            await tg.wait_for(lambda: said("HONEST"), WAIT_S)
            baseline = peak_memory(process.pid)
            # getFile says 1 KB; the download streams 50 MB with no Content-Length to contradict it.
            lying = tg.dm(OWNER, None, photo=PNG, file_size=1024, caption="LYING")
            path = tg.serve(lying["photo"][-1]["file_id"], size=HUGE, chunked=True)
            await tg.wait_for(lambda: said("LYING"), WAIT_S)
            await tg.wait_for(lambda: path in tg.bytes_served, WAIT_S)
            peak = peak_memory(process.pid)
        notices = [str(m["text"]) for m in tg.messages_in(OWNER) if "couldn't fetch" in str(m["text"])]
    assert len(notices) == 1 and "too large" in notices[0], notices
    # The message is kept, with its caption and the attachment named with why it is missing.
    with sqlite3.connect(tmp_path / "bridge.db") as conn:
        stored = dict(conn.execute("SELECT content, media FROM messages WHERE kind = 'user'").fetchall())
    assert set(stored) == {"HONEST", "LYING"}
    assert "too large" in stored["LYING"] and "too large" not in stored["HONEST"]
    # The bot's memory stayed about where it was (reading the body whole raised it 150 MB and more),
    # for it stopped reading near the limit and closed the connection.
    assert peak - baseline < GROWTH, (
        f"peak memory grew {(peak - baseline) / MB:.1f} MB past {baseline / MB:.0f} MB"
    )
    assert tg.bytes_served[path] < HUGE // 2, tg.bytes_served
