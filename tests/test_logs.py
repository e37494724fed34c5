"""Secrets never reach the log, whether in a message, its arguments or a traceback."""

from __future__ import annotations

import io
import logging

import pytest

from bridge.config import Settings
from bridge.logs import RedactSecrets, secret_values, setup_logging

TOKEN = "123456:AAE-secret-token-value"


def test_every_configured_secret_is_found() -> None:
    settings = Settings(
        llm={"api_key": "sk-live-abcdef"}, telegram={"token": TOKEN, "webhook_secret": "hush-hush"}
    )
    assert set(secret_values(settings)) == {"sk-live-abcdef", TOKEN, "hush-hush"}


def test_secrets_are_redacted_from_messages_arguments_and_tracebacks() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactSecrets([TOKEN]))
    logger = logging.getLogger("test.redaction")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("POST https://api.telegram.org/bot%s/getMe failed", TOKEN)
        try:
            raise RuntimeError(f"connect to /bot{TOKEN}/sendMessage refused")
        except RuntimeError:
            logger.exception("send failed")
    finally:
        logger.removeHandler(handler)
    output = stream.getvalue()
    assert TOKEN not in output
    assert output.count("<redacted>") >= 2
    assert "RuntimeError" in output


def test_setup_logging_installs_the_filter_on_the_root_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    try:
        setup_logging(Settings(telegram={"token": TOKEN}))
        logging.getLogger("some.library").error("token is %s", TOKEN)
    finally:
        root.handlers = saved_handlers
        root.setLevel(saved_level)
    assert "token is <redacted>" in stream.getvalue()
    assert TOKEN not in stream.getvalue()
