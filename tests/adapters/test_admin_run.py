"""The admin server in a real `bridge run`: `bridge health` and `bridge admin` find it, /readyz follows
the Telegram connection, and /metrics and the API show a turn taken over the fake Bot API."""

from __future__ import annotations

from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from devkit.fakes.telegram_api import FakeTelegram
from devkit.processes import bridge_running, telegram_run_config
from tests.adapters.conftest import OWNER
from tests.pg import free_port
from tests.test_cli import bridge


def metric(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    raise AssertionError(f"no sample {name} {labels}")


async def test_bridge_run_serves_health_readiness_metrics_and_the_api(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    port = free_port()
    async with FakeOpenAI() as llm:
        llm.push(fake.tool_call("get_current_time", {}), fake.text("It is noon."))
        extra = f"[admin]\nenabled = true\nport = {port}\n"
        config = telegram_run_config(tmp_path, OWNER, tg.token, tg.api_base, llm.base_url, extra)
        async with bridge_running(tmp_path, config):
            await tg.wait_for(lambda: tg.open_polls > 0, timeout=30)
            # `bridge health`, as the image's HEALTHCHECK runs it: it finds the token the start made.
            health = await bridge("health", "--config", str(config), cwd=tmp_path)
            assert health.code == 0, health.output
            shown = await bridge("admin", "--config", str(config), cwd=tmp_path)
            assert shown.code == 0, shown.output
            assert f"http://127.0.0.1:{port}/" in shown.stdout
            token = (tmp_path / "admin.token").read_text().strip()
            assert token in shown.stdout

            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}",
                headers={"Authorization": f"Bearer {token}"},
                trust_env=False,
                timeout=10,
            ) as client:
                ready = await client.get("/readyz")
                assert ready.status_code == 200, ready.text
                assert ready.json()["platforms"] == {"telegram": "running"}

                tg.dm(OWNER, "what time is it?")
                await tg.wait_for(lambda: any("noon" in m["text"] for m in tg.messages_in(OWNER)), timeout=30)
                scraped = (await client.get("/metrics")).text
                assert metric(scraped, "bridge_runs_total", status="ok") == 1
                assert (
                    metric(scraped, "bridge_tool_calls_total", tool="get_current_time", status="success") == 1
                )
                assert metric(scraped, "bridge_outbox_rows", state="sent") >= 1

                sessions = (await client.get("/api/sessions")).json()["sessions"]
                assert [s["key"] for s in sessions] == ["main"]
                one = (await client.get("/api/sessions/main")).json()
                kinds = [m["kind"] for m in one["history"]]
                assert kinds == ["user", "tool_call", "tool_result", "assistant"]
                run_id = one["runs"][0]["id"]
                trace = (await client.get(f"/api/runs/{run_id}")).json()["trace"]
                assert [step["type"] for step in trace["steps"]] == ["model", "tool", "model"]
        # Stopped: nothing answers, and the health check says so.
        gone = await bridge("health", "--config", str(config), cwd=tmp_path)
        assert gone.code == 1
        assert "unhealthy" in gone.stdout
