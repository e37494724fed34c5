"""The admin server against a hostile client: login sends back only to a path of this server, and
wrong tokens, as a bearer header or at the login form, are answered 429 after a few (issue 30,
breaks 7 and 8). Responses are counted, never timed."""

from __future__ import annotations

import asyncio
import html
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.http.auth import COOKIE, local_path
from bridge.http.server import AdminServer
from bridge.http.throttle import IN_TOTAL, PER_CLIENT, WINDOW_S, WrongTokens
from devkit.fakes.openai_server import FakeOpenAI
from tests.http.conftest import TOKEN, admin_bridge, client_of

WRONG = "wrong-wrong-wrong-wrong"
THROTTLE_LOG = "bridge.http.throttle"


@pytest.fixture
async def admin(tmp_path: Path) -> AsyncIterator[tuple[AdminServer, str]]:
    async with FakeOpenAI() as llm, admin_bridge(tmp_path, llm) as (_, server, base):
        yield server, base


def browser(base: str, *, source: str | None = None) -> httpx.AsyncClient:
    """A client without the token; from another loopback address when `source` is given."""
    transport = httpx.AsyncHTTPTransport(local_address=source) if source else None
    return httpx.AsyncClient(base_url=base, trust_env=False, timeout=10, transport=transport)


def throttle_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == THROTTLE_LOG]


# ------------------------------------------------------------------------------ break 7: redirect

# Each is the `next` value as the login form posts it. Browsers drop tabs and newlines, take a
# backslash for a slash, and resolve `//host` to another host; some proxies decode %2F.
HOSTILE_TARGETS = [
    "//evil.example",
    "//evil.example/x",
    "///evil.example",
    "/\\evil.example",
    "\\\\evil.example",
    "/\t/evil.example",
    "/\n/evil.example",
    "/\r\n/evil.example",
    "\t//evil.example",
    " //evil.example",
    "/ /evil.example",
    "/\u3000/evil.example",  # an ideographic space
    "/\u200b/evil.example",  # a zero-width space (a format character)
    "/%09/evil.example",
    "/%2F%2Fevil.example",
    "/%2f/evil.example",
    "/%5Cevil.example",
    "/%252F%252Fevil.example",  # encoded twice
    "%2F%2Fevil.example",
    "https://evil.example",
    "https:evil.example",
    "http:/evil.example",
    "javascript:alert(1)",
    "JaVaScRiPt:alert(1)",
    "data:text/html,<script>alert(1)</script>",
    "evil.example",
    "",
    "/x\r\nSet-Cookie: a=b",
]


@pytest.mark.parametrize("target", HOSTILE_TARGETS)
async def test_login_sends_a_hostile_target_back_to_the_overview(
    admin: tuple[AdminServer, str], target: str
) -> None:
    _, base = admin
    async with browser(base) as client:
        answer = await client.post("/login", data={"token": TOKEN, "next": target})
    assert answer.status_code == 303
    assert answer.headers["Location"] == "/"


async def test_the_login_form_carries_no_hostile_target_from_its_query(
    admin: tuple[AdminServer, str],
) -> None:
    """The report's own request: /login?next=/%09/evil.example, then the form posted as it is."""
    _, base = admin
    async with browser(base) as client:
        form = await client.get("/login?next=/%09/evil.example")
        carried = re.search(r'name="next" value="([^"]*)"', form.text)
        assert carried is not None
        assert html.unescape(carried.group(1)) == "/"
        answer = await client.post("/login", data={"token": TOKEN, "next": html.unescape(carried.group(1))})
    assert answer.headers["Location"] == "/"


async def test_a_page_asked_for_before_login_is_where_login_sends_back(
    admin: tuple[AdminServer, str],
) -> None:
    _, base = admin
    async with browser(base) as client:
        asked = await client.get(
            "/sessions/telegram%3Agroup%3A-100?tab=runs&n=2", headers={"Accept": "text/html"}
        )
        assert asked.status_code == 303
        login = await client.get(asked.headers["Location"])
        carried = re.search(r'name="next" value="([^"]*)"', login.text)
        assert carried is not None
        answer = await client.post("/login", data={"token": TOKEN, "next": html.unescape(carried.group(1))})
    # aiohttp writes the Location with ':' unencoded, which is the same path.
    assert unquote(answer.headers["Location"]) == "/sessions/telegram:group:-100?tab=runs&n=2"


def where_a_browser_goes(location: str) -> tuple[str, str]:
    """(scheme, host) a browser on http://admin.local/ reaches through this Location, read the loose
    way browsers read it (WHATWG URL): ends stripped of controls and spaces, tabs and newlines
    dropped, a backslash taken for a slash."""
    loose = location.strip("".join(chr(c) for c in range(0x21)))
    loose = re.sub(r"[\t\n\r]", "", loose).replace("\\", "/")
    parts = urlsplit(urljoin("http://admin.local/", loose))
    return parts.scheme, parts.netloc


# Pieces a hostile target is made of; hypothesis joins them in every order, mostly after a "/" (a
# target without one is refused whatever follows).
PIECES = ["/", "\\", "\t", "\n", "\r", " ", "%2F", "%5C", "%09", "%25", ":", "@", "\u3000", "\u200b", "x"]
JOINED = st.lists(st.sampled_from(PIECES), max_size=8).map("".join)


@settings(max_examples=500)
@given(JOINED.map("/".__add__) | JOINED | st.text())
def test_any_target_login_keeps_stays_on_this_server(target: str) -> None:
    kept = local_path(target)
    assert kept in ("/", target)
    # As sent, and as a proxy that decodes the path once or twice would pass it on.
    for form in (kept, unquote(kept), unquote(unquote(kept))):
        assert where_a_browser_goes(form) == ("http", "admin.local"), (target, form)


# ------------------------------------------------------------------------- break 8: wrong tokens


async def test_a_burst_of_wrong_bearer_tokens_gets_429_after_a_few_and_a_right_one_waits_too(
    admin: tuple[AdminServer, str], caplog: pytest.LogCaptureFixture
) -> None:
    _, base = admin
    caplog.set_level(logging.WARNING, logger=THROTTLE_LOG)
    async with client_of(base, token=None) as browser_client:
        # Logged in before the burst: a browser already in keeps working during the lockout.
        assert (await browser_client.post("/login", data={"token": TOKEN, "next": "/"})).status_code == 303
        async with client_of(base, token=WRONG) as guesser:
            answers = await asyncio.gather(*(guesser.get("/healthz") for _ in range(20)))
        statuses = sorted(answer.status_code for answer in answers)
        assert statuses == [401] * PER_CLIENT + [429] * (20 - PER_CLIENT)
        for answer in answers:
            if answer.status_code == 429:
                assert 1 <= int(answer.headers["Retry-After"]) <= WINDOW_S
                assert answer.json()["error"] == "too_many_wrong_tokens"
        # Locked out, even the right token waits: checking it would tell a guesser it was right.
        async with client_of(base) as owner:
            right = await owner.get("/healthz")
        assert right.status_code == 429
        assert int(right.headers["Retry-After"]) >= 1
        assert (await browser_client.get("/healthz")).status_code == 200
    lines = throttle_lines(caplog)
    assert len(lines) == 1, lines
    assert "5 wrong tokens from 127.0.0.1" in lines[0]
    assert TOKEN not in lines[0] and WRONG not in lines[0]


async def test_wrong_tokens_at_the_login_form_in_parallel_get_429_after_a_few(
    admin: tuple[AdminServer, str], caplog: pytest.LogCaptureFixture
) -> None:
    _, base = admin
    caplog.set_level(logging.WARNING, logger=THROTTLE_LOG)
    async with browser(base) as client:
        answers = await asyncio.gather(
            *(client.post("/login", data={"token": WRONG, "next": "/"}) for _ in range(20))
        )
        statuses = sorted(answer.status_code for answer in answers)
        assert statuses == [401] * PER_CLIENT + [429] * (20 - PER_CLIENT)
        limited = [answer for answer in answers if answer.status_code == 429]
        assert all(1 <= int(answer.headers["Retry-After"]) <= WINDOW_S for answer in limited)
        assert "Too many wrong tokens" in limited[0].text
        right = await client.post("/login", data={"token": TOKEN, "next": "/"})
        assert right.status_code == 429
        assert not client.cookies.get(COOKIE)
    assert len(throttle_lines(caplog)) == 1


async def test_bearer_and_form_failures_count_together(admin: tuple[AdminServer, str]) -> None:
    _, base = admin
    async with client_of(base, token=WRONG) as client:
        for _ in range(3):
            assert (await client.get("/healthz")).status_code == 401
        for _ in range(PER_CLIENT - 3):
            assert (await client.post("/login", data={"token": WRONG, "next": "/"})).status_code == 401
        assert (await client.get("/healthz")).status_code == 429


async def test_a_lockout_lasts_its_window_and_each_window_logs_one_line(
    admin: tuple[AdminServer, str], caplog: pytest.LogCaptureFixture
) -> None:
    server, base = admin
    now = [1000.0]
    server.auth.wrong = WrongTokens(clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger=THROTTLE_LOG)
    async with client_of(base, token=WRONG) as guesser, client_of(base) as owner:
        for window in range(2):
            statuses = [(await guesser.get("/healthz")).status_code for _ in range(PER_CLIENT + 3)]
            assert statuses == [401] * PER_CLIENT + [429] * 3
            now[0] += WINDOW_S - 1
            waiting = await owner.get("/healthz")
            assert (waiting.status_code, waiting.headers["Retry-After"]) == (429, "1")
            now[0] += 1
            assert (await owner.get("/healthz")).status_code == 200
            assert len(throttle_lines(caplog)) == window + 1


async def test_wrong_tokens_from_many_addresses_lock_every_address_out(
    admin: tuple[AdminServer, str], caplog: pytest.LogCaptureFixture
) -> None:
    _, base = admin
    caplog.set_level(logging.WARNING, logger=THROTTLE_LOG)
    guessers = IN_TOTAL // PER_CLIENT
    for n in range(guessers):
        async with browser(base, source=f"127.0.0.{n + 2}") as client:
            for _ in range(PER_CLIENT):
                answer = await client.get("/healthz", headers={"Authorization": f"Bearer {WRONG}"})
                assert answer.status_code == 401
    async with browser(base, source="127.0.0.200") as fresh:
        right = await fresh.get("/healthz", headers={"Authorization": f"Bearer {TOKEN}"})
        assert right.status_code == 429
        assert int(right.headers["Retry-After"]) >= 1
        form = await fresh.post("/login", data={"token": TOKEN, "next": "/"})
        assert form.status_code == 429
    lines = throttle_lines(caplog)
    assert sum("addresses" in line for line in lines) == 1
    assert len(lines) == guessers + 1, lines


def test_retry_after_counts_down_to_the_end_of_the_clients_window() -> None:
    now = [0.0]
    wrong = WrongTokens(per_client=2, in_total=100, window_s=60, clock=lambda: now[0])
    wrong.failed("a")
    assert wrong.wait_s("a") is None
    now[0] = 10.5
    wrong.failed("a")
    assert wrong.wait_s("a") == 50  # from the first failure at 0
    assert wrong.wait_s("b") is None  # another client is not held up
    now[0] = 59.2
    assert wrong.wait_s("a") == 1
    now[0] = 60.0
    assert wrong.wait_s("a") is None
