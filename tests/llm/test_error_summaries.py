"""A model server's error: a short, masked summary for the chat; the whole of it for the trace."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bridge.config.llm import LLMSettings
from bridge.errors import ProviderError
from bridge.llm.base import ChatMessage
from bridge.llm.openai import OpenAIProvider
from bridge.localmodel import process_start
from devkit.fakes.loopback import closed_port
from devkit.fakes.openai_server import FakeOpenAI, Reply, http_error
from tests.llm.conftest import RecordingSleep
from tests.test_cli import assert_no_traceback, bridge, write_config

API_KEY = "sk-summary-test-secret-998877"
PASSWORD = "pw-summary-NEVER-5521"
HELLO = [ChatMessage(role="user", content="hello")]
# A server's error as some gateways write it: several lines, internal URLs, our key echoed, a stack.
NOISY = (
    f"upstream failed: POST https://10.1.2.3:9000/internal/v2/generate?token=abc returned 500\n"
    f"  auth was Bearer {API_KEY} for http://admin:{PASSWORD}@10.1.2.3:9000\n"
    + "\n".join(f'  File "/srv/gateway/handler_{i}.py", line {i}, in handle' for i in range(40))
    + "\nEND-OF-BODY"
)


async def failure(fake: FakeOpenAI, *replies: Reply, **llm: object) -> ProviderError:
    fake.push(*replies)
    settings = LLMSettings(
        base_url=str(llm.pop("base_url", fake.base_url)), api_key=API_KEY, timeout_s=5, **llm
    )
    provider = OpenAIProvider(settings, sleep=RecordingSleep())
    try:
        with pytest.raises(ProviderError) as caught:
            await provider.complete(HELLO, [])
    finally:
        await provider.aclose()
    return caught.value


def assert_short_and_masked(message: str) -> None:
    assert "\n" not in message
    assert API_KEY not in message and PASSWORD not in message
    assert "10.1.2.3" not in message and "https://" not in message
    assert "<url>" in message
    assert "END-OF-BODY" not in message


@pytest.mark.parametrize("status", [400, 422])
async def test_a_refused_request_shows_only_a_one_line_masked_summary(status: int) -> None:
    async with FakeOpenAI() as fake:
        error = await failure(fake, http_error(status, NOISY))
    assert error.message.startswith(f"The model server refused the request (HTTP {status}): upstream failed:")
    assert_short_and_masked(error.message)
    summary = error.message.split(": ", 1)[1]
    assert len(summary) <= 200


async def test_a_failing_server_shows_a_summary_and_keeps_the_whole_body_for_the_trace() -> None:
    async with FakeOpenAI() as fake:
        error = await failure(fake, *[http_error(503, NOISY)] * 2, max_retries=1)
    assert error.message.startswith("The model server kept failing (HTTP 503) after 2 attempts: ")
    assert_short_and_masked(error.message)
    # The detail is all of the server's answer, the secrets masked but nothing cut.
    assert "END-OF-BODY" in error.detail and "handler_39.py" in error.detail
    assert API_KEY not in error.detail and PASSWORD not in error.detail
    assert "10.1.2.3" in error.detail


async def test_an_html_error_page_is_summarised_on_one_line() -> None:
    page = b"<html>\n<head><title>502 Bad Gateway</title></head>\n<body>" + b"x" * 5000 + b"</body></html>"
    async with FakeOpenAI() as fake:
        error = await failure(fake, Reply(status=502, body=page), max_retries=0)
    assert "\n" not in error.message
    assert len(error.message) < 300
    assert error.detail.endswith("</body></html>")


async def test_an_unreachable_server_says_to_check_that_it_runs_and_the_base_url() -> None:
    base_url = f"http://127.0.0.1:{closed_port()}/v1"
    async with FakeOpenAI() as fake:
        error = await failure(fake, base_url=base_url, max_retries=0)
    assert error.message == (
        f"Can't reach the model server at {base_url}: connection refused (1 attempt). "
        "Check that it is running and that [llm] base_url is right."
    )
    assert "refused" in error.detail.lower()


async def test_the_local_model_when_not_running_says_to_start_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = closed_port()
    monkeypatch.setenv("BRIDGE_LOCAL_MODEL_DIR", str(tmp_path))
    # The port `bridge local-model start` recorded; the server has since gone away.
    (tmp_path / "server.json").write_text(json.dumps({"pid": 1, "port": port, "mode": "native"}))
    async with FakeOpenAI() as fake:
        error = await failure(fake, base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)
    assert error.message.endswith("Start it with `bridge local-model start`.")


async def test_chat_shows_a_plain_sentence_and_bridge_trace_shows_the_whole_redacted_body(
    tmp_path: Path,
) -> None:
    async with FakeOpenAI() as fake:
        fake.push(http_error(400, NOISY))
        config = write_config(tmp_path, fake.base_url, max_retries=0)
        done = await bridge(
            "chat", "--config", str(config), cwd=tmp_path, lines=("hello",), BRIDGE_LLM__API_KEY=API_KEY
        )
    assert done.code == 0, done.output
    [answer] = [line for line in done.stdout.splitlines() if line.startswith("bridge ›")]
    # What failed, as a sentence; the server's words are for the log and the trace, not the chat.
    assert "refused the request (HTTP 400). Your message is saved" in answer
    assert "upstream failed" not in answer and "<url>" not in answer
    assert "10.1.2.3" not in done.output and API_KEY not in done.output

    listed = await bridge("runs", "--config", str(config), cwd=tmp_path)
    run_id = listed.stdout.splitlines()[1].split()[0]
    shown = await bridge("trace", run_id, "--config", str(config), cwd=tmp_path, BRIDGE_LLM__API_KEY=API_KEY)
    assert shown.code == 0, shown.output
    assert_no_traceback(shown)
    # The body as the server sent it (here OpenAI-style JSON), internal URLs and all.
    assert 'detail: {"error": {"message": "upstream failed: POST https://10.1.2.3:9000' in shown.stdout
    assert "END-OF-BODY" in shown.stdout
    assert API_KEY not in shown.stdout and PASSWORD not in shown.stdout
    raw = await bridge("trace", run_id, "--json", "--config", str(config), cwd=tmp_path)
    [step] = json.loads(raw.stdout)["steps"]
    assert "handler_39.py" in step["error_detail"] and API_KEY not in step["error_detail"]


async def test_chat_on_the_stopped_local_model_says_to_start_it(tmp_path: Path) -> None:
    cache = tmp_path / "local-model"
    cache.mkdir()
    port = closed_port()
    # `bridge chat` finds the local model (this test process stands in for it), which then fails to answer.
    state = {"pid": os.getpid(), "port": port, "mode": "native", "started": process_start(os.getpid())}
    (cache / "server.json").write_text(json.dumps(state))
    config = write_config(tmp_path, None, max_retries=0)
    done = await bridge(
        "chat", "--config", str(config), cwd=tmp_path, lines=("hello",), BRIDGE_LOCAL_MODEL_DIR=str(cache)
    )
    assert done.code == 0, done.output
    [answer] = [line for line in done.stdout.splitlines() if line.startswith("bridge ›")]
    assert f"Can't reach the model server at http://127.0.0.1:{port}/v1: connection refused" in answer
    assert "Start it with `bridge local-model start`." in answer
