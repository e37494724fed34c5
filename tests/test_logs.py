"""Secrets never reach the log, whether in a message, its arguments, a traceback or an extra field;
the log is text or JSON lines; Bridge's loggers and the libraries' have their own levels."""

from __future__ import annotations

import io
import json
import logging
import os
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bridge.config import Settings
from bridge.config.io import load_settings
from bridge.errors import ConfigError
from bridge.logs import LIBRARY_LOGGERS, OWN_LOGGERS, RedactSecrets, secret_values, setup_logging

TOKEN = "123456:AAE-secret-token-value"


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """setup_logging changes process-wide loggers; other tests must not see its handler or levels."""
    root = logging.getLogger()
    names = (*OWN_LOGGERS, *LIBRARY_LOGGERS)
    saved_handlers, saved_root = root.handlers[:], root.level
    saved_levels = {name: logging.getLogger(name).level for name in names}
    yield
    root.handlers = saved_handlers
    root.setLevel(saved_root)
    for name, level in saved_levels.items():
        logging.getLogger(name).setLevel(level)


def capture(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> io.StringIO:
    """Run setup_logging with stderr captured."""
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    setup_logging(settings)
    return stream


def json_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    lines = stream.getvalue().splitlines()
    return [json.loads(line) for line in lines]


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
    stream = capture(monkeypatch, Settings(telegram={"token": TOKEN}))
    logging.getLogger("some.library").error("token is %s", TOKEN)
    assert "token is <redacted>" in stream.getvalue()
    assert TOKEN not in stream.getvalue()


def test_string_extra_fields_are_redacted_in_text_format_too() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s url=%(url)s"))
    handler.addFilter(RedactSecrets([TOKEN]))
    logger = logging.getLogger("test.redaction.extra")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("request failed", extra={"url": f"https://api.telegram.org/bot{TOKEN}/getMe"})
    finally:
        logger.removeHandler(handler)
    assert stream.getvalue() == "request failed url=https://api.telegram.org/bot<redacted>/getMe\n"


# -- JSON lines -------------------------------------------------------------------------------


def test_json_format_writes_one_object_a_line_with_timestamp_level_logger_and_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream = capture(monkeypatch, Settings(log_format="json"))
    logging.getLogger("bridge.test").info("first\nstill the first")
    logging.getLogger("bridge.test").warning("second")
    first, second = json_lines(stream)
    assert first["message"] == "first\nstill the first"
    assert (first["level"], first["logger"]) == ("INFO", "bridge.test")
    assert (second["level"], second["message"]) == ("WARNING", "second")
    assert "exc" not in first
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["ts"])
    assert abs((datetime.now(UTC) - datetime.fromisoformat(first["ts"])).total_seconds()) < 60


def test_json_lines_carry_the_callers_extra_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = capture(monkeypatch, Settings(log_format="json"))
    extra = {"run_id": 7, "session_key": "telegram:42", "status": "ok", "steps": 3, "tokens": 812, "ms": 1.5}
    logging.getLogger("bridge.runs").info("run finished", extra=extra)
    (line,) = json_lines(stream)
    assert {key: line[key] for key in extra} == extra
    # The standard LogRecord attributes are not repeated.
    assert not {"msg", "args", "levelno", "pathname", "lineno", "created"} & set(line)


def test_json_lines_leave_out_extra_fields_that_are_not_json(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = capture(monkeypatch, Settings(log_format="json"))
    logging.getLogger("bridge.test").info("x", extra={"path": Path("a"), "ratio": float("nan"), "n": 1})
    (line,) = json_lines(stream)
    assert line["n"] == 1
    assert "path" not in line and "ratio" not in line


def test_json_lines_redact_secrets_in_message_extra_fields_and_tracebacks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream = capture(monkeypatch, Settings(log_format="json", telegram={"token": TOKEN}))
    logger = logging.getLogger("bridge.test")
    logger.warning("POST /bot%s/getMe failed", TOKEN, extra={"url": f"/bot{TOKEN}/getMe", "urls": [TOKEN]})
    try:
        raise RuntimeError(f"connect to /bot{TOKEN}/sendMessage refused")
    except RuntimeError:
        logger.exception("send failed")
    assert TOKEN not in stream.getvalue()
    warning, error = json_lines(stream)
    assert warning["message"] == "POST /bot<redacted>/getMe failed"
    assert warning["url"] == "/bot<redacted>/getMe"
    assert warning["urls"] == ["<redacted>"]
    assert error["message"] == "send failed"
    assert "RuntimeError: connect to /bot<redacted>/sendMessage refused" in error["exc"]
    assert error["exc"].startswith("Traceback")


# -- levels -----------------------------------------------------------------------------------


def test_debug_logging_shows_bridges_debug_lines_but_not_the_libraries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream = capture(monkeypatch, Settings(log_level="DEBUG"))
    logging.getLogger("bridge.gateway").debug("bridge detail")
    logging.getLogger("adapters.telegram").debug("adapter detail")
    for name in ("httpx", "telegram.ext", "asyncio", "psycopg.pool", "some.other.library"):
        logging.getLogger(name).debug("%s chatter", name)
        logging.getLogger(name).info("%s info", name)
    logging.getLogger("httpcore").warning("httpcore warning")
    output = stream.getvalue()
    assert "bridge detail" in output and "adapter detail" in output
    assert "chatter" not in output and " info" not in output
    assert "httpcore warning" in output


def test_library_debug_lines_come_through_when_log_level_libraries_is_debug(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream = capture(monkeypatch, Settings(log_level="WARNING", log_level_libraries="DEBUG"))
    logging.getLogger("httpx").debug("httpx chatter")
    logging.getLogger("discord.gateway").debug("discord chatter")
    logging.getLogger("bridge.gateway").info("bridge info")
    output = stream.getvalue()
    assert "httpx chatter" in output and "discord chatter" in output
    assert "bridge info" not in output


def test_httpx_request_lines_follow_log_level_libraries_with_the_token_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream = capture(monkeypatch, Settings(log_level_libraries="INFO", telegram={"token": TOKEN}))
    logging.getLogger("httpx").info('HTTP Request: POST https://api.telegram.org/bot%s/getMe "200 OK"', TOKEN)
    assert "bot<redacted>/getMe" in stream.getvalue()
    assert TOKEN not in stream.getvalue()


# -- settings ---------------------------------------------------------------------------------


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No BRIDGE_* variable of the outer environment and no ./config.toml of the repo leaks in."""
    for name in list(os.environ):
        if name.upper().startswith("BRIDGE_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_log_format_and_library_level_accept_any_case(isolated: Path) -> None:
    config = isolated / "config.toml"
    config.write_text('log_format = "JSON"\nlog_level_libraries = "debug"\n', encoding="utf-8")
    settings = load_settings(config)
    assert (settings.log_format, settings.log_level_libraries) == ("json", "DEBUG")


def test_defaults_are_text_lines_and_warning_for_libraries() -> None:
    settings = Settings()
    assert (settings.log_format, settings.log_level_libraries) == ("text", "WARNING")


def test_bad_log_format_is_a_config_error_naming_the_key(isolated: Path) -> None:
    config = isolated / "config.toml"
    config.write_text('log_format = "xml"\nlog_level_libraries = "LOUD"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_settings(config)
    message = str(info.value)
    assert "log_format" in message and "'text' or 'json'" in message
    assert "log_level_libraries" in message
