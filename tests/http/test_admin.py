"""The admin server: every route behind the token, a login cookie that is CSRF-safe, health, readiness
and metrics that count what happened."""

from __future__ import annotations

import asyncio
import logging
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bridge.cli.admin import check_health, show_admin
from bridge.config import Settings
from bridge.config.io import load_settings
from bridge.errors import ConfigError
from bridge.http.auth import COOKIE, token_file
from bridge.http.server import AdminServer
from devkit.fakes.openai_server import FakeOpenAI, http_error, text, tool_call
from tests.harness import Harness, running_bridge
from tests.http.conftest import TOKEN, admin_bridge, client_of
from tests.pg import free_port


@dataclass
class Platform:
    """Stands in for a guarded adapter: its surface and lifecycle state are what /readyz reads."""

    surface: str
    state: str = "running"


@dataclass
class Admin:
    harness: Harness
    server: AdminServer
    platform: Platform
    base: str

    def client(self, *, token: str | None = None) -> httpx.AsyncClient:
        return client_of(self.base, token)

    def bearer(self, token: str = TOKEN) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}


@pytest.fixture
async def admin(tmp_path: Path) -> AsyncIterator[Admin]:
    platform = Platform("telegram")
    async with (
        FakeOpenAI() as llm,
        admin_bridge(tmp_path, llm, adapters=[platform]) as (harness, server, base),
    ):
        yield Admin(harness, server, platform, base)


async def logged_in(admin: Admin, client: httpx.AsyncClient) -> None:
    answer = await client.post("/login", data={"token": TOKEN, "next": "/"})
    assert answer.status_code == 303, answer.text
    assert client.cookies.get(COOKIE)


# ---------------------------------------------------------------------------------------------- auth


@pytest.mark.parametrize("path", ["/", "/healthz", "/readyz", "/metrics"])
async def test_every_route_refuses_a_request_without_the_token(admin: Admin, path: str) -> None:
    async with admin.client() as client:
        answer = await client.get(path)
        wrong = await client.get(path, headers=admin.bearer("not-the-token-at-all-000000"))
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"].startswith("Bearer")
    assert wrong.status_code == 401


async def test_the_token_as_a_bearer_header_opens_every_route(admin: Admin) -> None:
    async with admin.client(token=TOKEN) as client:
        for path in ("/", "/healthz", "/readyz", "/metrics"):
            assert (await client.get(path)).status_code == 200, path


async def test_a_browser_without_the_cookie_is_sent_to_the_login_form(admin: Admin) -> None:
    async with admin.client() as client:
        answer = await client.get("/", headers={"Accept": "text/html"})
        assert answer.status_code == 303
        assert answer.headers["Location"] == "/login?next=/"
        form = await client.get("/login")
    assert form.status_code == 200
    assert 'name="token"' in form.text and 'type="password"' in form.text


async def test_logging_in_sets_an_httponly_strict_cookie_that_is_not_the_token(admin: Admin) -> None:
    async with admin.client() as client:
        answer = await client.post("/login", data={"token": TOKEN, "next": "/metrics"})
        assert answer.status_code == 303
        assert answer.headers["Location"] == "/metrics"
        cookie = answer.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
        assert TOKEN not in cookie
        page = await client.get("/")
    assert page.status_code == 200
    assert "runs in progress" in page.text


async def test_a_wrong_token_at_the_login_form_sets_no_cookie_and_says_so(admin: Admin) -> None:
    async with admin.client() as client:
        answer = await client.post("/login", data={"token": "wrong-wrong-wrong-wrong", "next": "/"})
        assert answer.status_code == 401
        assert "not right" in answer.text
        assert not client.cookies.get(COOKIE)
        assert (await client.get("/healthz")).status_code == 401


async def test_login_sends_back_only_to_a_path_of_this_server(admin: Admin) -> None:
    async with admin.client() as client:
        answer = await client.post("/login", data={"token": TOKEN, "next": "//evil.example/x"})
    assert answer.headers["Location"] == "/"


async def test_a_cookie_post_needs_the_pages_csrf_value_and_this_origin(admin: Admin) -> None:
    async with admin.client() as client:
        await logged_in(admin, client)
        page = (await client.get("/")).text
        csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        # The cookie alone, as a forged cross-site form would send it: refused.
        assert (await client.post("/logout")).status_code == 403
        # The right value from another site's page: refused.
        foreign = await client.post("/logout", data={"csrf": csrf}, headers={"Origin": "http://evil.example"})
        assert foreign.status_code == 403
        # A wrong value: refused.
        assert (await client.post("/logout", data={"csrf": "0" * 64})).status_code == 403
        assert (await client.get("/healthz")).status_code == 200  # still logged in
        done = await client.post("/logout", data={"csrf": csrf}, headers={"Origin": admin.base})
        assert done.status_code == 303
        client.cookies.clear()
        assert (await client.get("/healthz")).status_code == 401


async def test_a_login_from_another_sites_form_is_refused(admin: Admin) -> None:
    async with admin.client() as client:
        answer = await client.post(
            "/login", data={"token": TOKEN, "next": "/"}, headers={"Origin": "http://evil.example"}
        )
    assert answer.status_code == 403
    assert COOKIE not in answer.headers.get("Set-Cookie", "")


async def test_a_bearer_post_needs_no_csrf_value(admin: Admin) -> None:
    async with admin.client(token=TOKEN) as client:
        assert (await client.post("/logout")).status_code == 303


# ---------------------------------------------------------------------------------------------- config


def test_a_non_loopback_address_without_a_token_is_refused_with_the_key(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[admin]\nenabled = true\nlisten = "0.0.0.0"\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    assert "admin" in str(caught.value) and "token is required" in str(caught.value)


def test_a_short_token_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[admin]\nenabled = true\ntoken = "short"\n')
    with pytest.raises(ConfigError, match="at least 16 characters"):
        load_settings(config)


def test_a_token_lets_the_server_listen_on_every_address() -> None:
    settings = Settings(admin={"enabled": True, "listen": "0.0.0.0", "token": TOKEN})
    assert settings.admin.listen == "0.0.0.0"


async def test_a_busy_port_is_a_clear_error(admin: Admin) -> None:
    settings = admin.harness.bridge.settings
    second = AdminServer(admin.harness.bridge, [], settings)
    with pytest.raises(ConfigError, match="address already in use") as caught:
        await second.start()
    assert "[admin] port" in (caught.value.remedy or "")


async def test_without_a_token_on_loopback_a_start_makes_one_only_its_owner_can_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    async with FakeOpenAI() as llm, running_bridge(tmp_path, llm, admin={"enabled": True, "port": port}) as h:
        server = AdminServer(h.bridge, [], h.bridge.settings)
        await server.start()
        try:
            path = token_file(h.bridge.settings)
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            made = path.read_text().strip()
            assert len(made) >= 32
            assert show_admin(h.bridge.settings) == 0
            printed = capsys.readouterr().out
            assert f"http://127.0.0.1:{port}/" in printed and made in printed
            # `bridge health`, as a container's HEALTHCHECK runs it, finds the token by itself.
            assert await asyncio.to_thread(check_health, h.bridge.settings) == 0
        finally:
            await server.stop()
        assert await asyncio.to_thread(check_health, h.bridge.settings) == 1  # nobody answers now


# ---------------------------------------------------------------------------------------------- health


async def test_readyz_is_ready_only_when_every_platform_can_deliver(admin: Admin) -> None:
    async with admin.client(token=TOKEN) as client:
        ready = await client.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["platforms"] == {"telegram": "running"}
        admin.platform.state = "starting"
        starting = await client.get("/readyz")
        admin.platform.state = "sending"  # connected for sending only, standing by to poll
        standing_by = await client.get("/readyz")
    assert starting.status_code == 503
    assert starting.json()["platforms"] == {"telegram": "starting"}
    assert standing_by.status_code == 200


async def test_healthz_says_unhealthy_when_the_store_does_not_answer(
    admin: Admin, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken() -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(admin.harness.bridge.store, "ping", broken)
    async with admin.client(token=TOKEN) as client:
        health = await client.get("/healthz")
        ready = await client.get("/readyz")
    assert health.status_code == 503 and "disk gone" in health.json()["store"]
    assert ready.status_code == 503


# ---------------------------------------------------------------------------------------------- metrics


def samples(text_format: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text_format):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def test_metrics_count_runs_model_requests_tool_calls_tokens_and_the_outbox(admin: Admin) -> None:
    llm = admin.harness.llm
    for n in range(3):
        llm.push(tool_call("get_current_time", {}), text(f"answer {n}", prompt_tokens=7, completion_tokens=3))
        await admin.harness.say(f"what time is it {n}")
    async with admin.client(token=TOKEN) as client:
        answer = await client.get("/metrics")
    assert answer.headers["Content-Type"].startswith("text/plain")
    found = samples(answer.text)
    assert found[("bridge_runs_total", (("status", "ok"),))] == 3
    assert found[("bridge_run_duration_seconds_count", ())] == 3
    assert found[("bridge_model_request_duration_seconds_count", (("provider", "openai"),))] == 6
    assert found[("bridge_tool_calls_total", (("status", "success"), ("tool", "get_current_time")))] == 3
    # Two requests a turn: the tool call's (10 + 5) and the answer's (7 + 3).
    assert found[("bridge_tokens_total", (("kind", "prompt"),))] == 3 * (10 + 7)
    assert found[("bridge_tokens_total", (("kind", "completion"),))] == 3 * (5 + 3)
    # One activity message and one reply a turn, each recorded in the outbox and sent.
    assert found[("bridge_outbox_rows", (("state", "sent"),))] == 6
    assert found[("bridge_outbox_rows", (("state", "failed"),))] == 0
    assert found[("bridge_queue_depth", ())] == 0
    assert found[("bridge_runs_in_progress", ())] == 0


async def test_a_failed_model_request_is_counted_as_an_error_of_its_provider(admin: Admin) -> None:
    admin.harness.llm.push(http_error(500, "the model server fell over"))
    await admin.harness.say("hello")
    async with admin.client(token=TOKEN) as client:
        found = samples((await client.get("/metrics")).text)
    assert found[("bridge_model_request_errors_total", (("provider", "openai"),))] == 1
    assert found[("bridge_runs_total", (("status", "error"),))] == 1


async def test_each_finished_run_logs_one_info_line_with_its_figures(
    admin: Admin, caplog: pytest.LogCaptureFixture
) -> None:
    admin.harness.llm.push(tool_call("get_current_time", {}), text("it is noon"))
    with caplog.at_level(logging.INFO, logger="bridge.runs"):
        await admin.harness.say("time?")
    lines = [r for r in caplog.records if r.name == "bridge.runs"]
    assert len(lines) == 1
    record = lines[0]
    assert record.levelno == logging.INFO
    assert record.status == "ok" and record.steps == 2  # type: ignore[attr-defined]
    assert record.session_key == "main" and record.tokens == 30  # type: ignore[attr-defined]
    assert record.run_id in record.getMessage() and record.ms >= 0  # type: ignore[attr-defined]


async def test_check_config_never_shows_the_admin_token(tmp_path: Path) -> None:
    from tests.test_cli import bridge as bridge_cli

    config = tmp_path / "config.toml"
    config.write_text(f'[admin]\nenabled = true\ntoken = "{TOKEN}"\n')
    done = await bridge_cli("check-config", "--config", str(config), cwd=tmp_path)
    assert done.code == 0, done.output
    assert TOKEN not in done.output
    assert "[admin]" in done.stdout
