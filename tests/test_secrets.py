"""A user and password in a URL setting are redacted wherever the API key is."""

from __future__ import annotations

import io
import logging
import tomllib
from pathlib import Path

import pytest

from bridge.config import Settings
from bridge.config.base import mask_url
from bridge.logs import RedactSecrets, redactor, secret_values
from devkit.fakes.loopback import closed_port
from tests.test_cli import assert_no_traceback, bridge, write_config

USER = "bridgeuser"
PASSWORD = "pw-NEVER-SHOWN-4410"
CREDENTIALS = f"{USER}:{PASSWORD}"


def test_mask_url_hides_the_user_and_password_and_keeps_the_rest() -> None:
    assert mask_url(f"http://{CREDENTIALS}@10.0.0.5:8080/v1") == "http://<redacted>@10.0.0.5:8080/v1"
    # An "@" in an unencoded password still belongs to the credentials, not to the host.
    assert mask_url("https://u:p@ss@host/v1?x=1") == "https://<redacted>@host/v1?x=1"
    assert (
        mask_url("see http://host/a@b and mail me@example.com")
        == "see http://host/a@b and mail me@example.com"
    )
    assert mask_url("http://127.0.0.1:8080/v1") == "http://127.0.0.1:8080/v1"


def test_the_credentials_of_url_settings_are_secrets_as_written_and_decoded() -> None:
    settings = Settings(llm={"base_url": f"http://{USER}:pw%40NEVER-4410@10.0.0.5/v1"})
    assert {f"{USER}:pw%40NEVER-4410", "pw%40NEVER-4410", "pw@NEVER-4410"} <= set(secret_values(settings))


def test_url_credentials_are_redacted_from_log_lines_and_run_traces() -> None:
    settings = Settings(llm={"base_url": f"http://{CREDENTIALS}@10.0.0.5/v1"})
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactSecrets(secret_values(settings)))
    logger = logging.getLogger("test.url_secrets")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("POST http://%s@10.0.0.5/v1/chat/completions failed", CREDENTIALS)
        logger.warning("server said: bad password %s", PASSWORD)
    finally:
        logger.removeHandler(handler)
    assert PASSWORD not in stream.getvalue()
    assert USER not in stream.getvalue()
    trace = redactor(settings)(f'{{"error": "401 for {CREDENTIALS}", "echo": "{PASSWORD}"}}')
    assert PASSWORD not in trace and USER not in trace


async def test_check_config_masks_the_credentials_in_base_url(tmp_path: Path) -> None:
    config = write_config(tmp_path, f"http://{CREDENTIALS}@127.0.0.1:8080/v1")
    done = await bridge("check-config", "--config", str(config), cwd=tmp_path)
    assert done.code == 0, done.output
    assert PASSWORD not in done.output and USER not in done.output
    assert tomllib.loads(done.stdout)["llm"]["base_url"] == "http://<redacted>@127.0.0.1:8080/v1"


async def test_chat_shows_neither_user_nor_password_in_its_first_line_or_its_errors(tmp_path: Path) -> None:
    port = closed_port()
    config = write_config(tmp_path, f"http://{CREDENTIALS}@127.0.0.1:{port}/v1", max_retries=1)
    done = await bridge("chat", "--config", str(config), cwd=tmp_path, lines=("hello",))
    assert done.code == 0, done.output
    assert_no_traceback(done)
    first = done.stdout.splitlines()[0]
    assert first.startswith("Bridge chat: model ") and f"http://<redacted>@127.0.0.1:{port}/v1" in first
    assert f"Can't reach the model server at http://<redacted>@127.0.0.1:{port}/v1" in done.stdout
    # Nowhere: not in the chat, not in the retry warnings on stderr.
    assert PASSWORD not in done.output and USER not in done.output


async def test_a_platform_that_cannot_be_reached_is_named_without_its_credentials_or_token(
    tmp_path: Path,
) -> None:
    token = "123456:TOKEN-NEVER-SHOWN-77"
    api_base = f"http://{CREDENTIALS}@127.0.0.1:{closed_port()}"
    config = tmp_path / "config.toml"
    config.write_text(
        f'[storage]\npath = "{tmp_path / "bridge.db"}"\n'
        f'[telegram]\nenabled = true\ntoken = "{token}"\napi_base = "{api_base}"\n',
        encoding="utf-8",
    )
    done = await bridge("run", "--config", str(config), cwd=tmp_path)
    assert done.code == 1, done.output
    assert "Can't reach the Telegram Bot API" in done.stderr
    assert PASSWORD not in done.output and USER not in done.output and token not in done.output
    assert_no_traceback(done)


def test_the_brave_search_key_is_redacted_from_log_lines_and_traces(monkeypatch: pytest.MonkeyPatch) -> None:
    # Read from its variable with the settings, as a model profile's key is, so the redactors know it
    # before any search runs (an error body that echoes it, a library's debug line).
    monkeypatch.setenv("BRAVE_API_KEY", "BSA-never-shown-9931")
    settings = Settings(tools={"web_search": {"provider": "brave"}})
    assert "BSA-never-shown-9931" in set(secret_values(settings))
    trace = redactor(settings)('{"error": "key BSA-never-shown-9931 refused"}')
    assert "BSA-never-shown-9931" not in trace
