"""Logging setup: one stderr handler whose filter redacts every configured secret."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from pydantic import BaseModel, SecretStr

from bridge.config import Settings
from bridge.config.base import REDACTED, url_userinfo

# Shorter "secrets" would redact ordinary words in log lines.
MIN_SECRET_LEN = 6

# Bridge's own loggers follow `log_level`; every other logger is a library's and follows
# `log_level_libraries` (the root logger's level), these named ones explicitly.
OWN_LOGGERS = ("bridge", "adapters")
LIBRARY_LOGGERS = (
    "httpx",
    "httpcore",
    "aiohttp",
    "telegram",
    "discord",
    "asyncio",
    "psycopg",
    "psycopg.pool",
    "websockets",
    "urllib3",
    "hpack",
    "charset_normalizer",
)
# Attributes every LogRecord has; any other attribute came from a caller's `extra=`.
_RECORD_ATTRS = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a caller passed with `extra=`."""
    return {key: value for key, value in vars(record).items() if key not in _RECORD_ATTRS}


def secret_values(model: BaseModel) -> Iterator[str]:
    """Every non-empty SecretStr in the settings, however deep (tables of sections and private
    attributes too: a model profile's key, read from the variable it names), and the credentials in
    URL settings."""
    values = [getattr(model, name) for name in type(model).model_fields]
    values += list((model.__pydantic_private__ or {}).values())
    for value in values:
        if isinstance(value, SecretStr):
            candidates = [value.get_secret_value()]
        elif isinstance(value, str):
            candidates = list(_url_credentials(value))
        elif isinstance(value, BaseModel):
            yield from secret_values(value)
            continue
        elif isinstance(value, dict | list):
            # Tables of sections ([llm.profiles.NAME]), arrays of them ([[hooks]]) and tables of
            # secrets (an MCP server's env and headers).
            for item in value.values() if isinstance(value, dict) else value:
                if isinstance(item, BaseModel):
                    yield from secret_values(item)
                elif isinstance(item, SecretStr) and len(item.get_secret_value()) >= MIN_SECRET_LEN:
                    yield item.get_secret_value()
            continue
        else:
            continue
        yield from (secret for secret in candidates if len(secret) >= MIN_SECRET_LEN)


def _url_credentials(value: str) -> Iterator[str]:
    """The whole "user:password" of each URL, and the password alone, as written and decoded."""
    for userinfo in url_userinfo(value):
        password = userinfo.partition(":")[2]
        if not password:
            # A user name alone ("postgresql://bridge@host/db") is no secret; hiding it would hide
            # every other use of the word in the logs too.
            continue
        # httpx and others log a URL's credentials as written or percent-decoded.
        for part in (userinfo, password):
            yield part
            yield unquote(part)


class RedactSecrets(logging.Filter):
    """Replaces secrets in a record's message, traceback and `extra=` fields (an API URL can carry the
    bot token)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        # Longest first, so a secret that contains another is replaced whole; "" would match everywhere.
        self.secrets = sorted({secret for secret in secrets if secret}, key=len, reverse=True)

    def _clean(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        return text

    def _clean_value(self, value: Any) -> Any:
        """A copy of an extra field with every string in it cleaned (the caller's object is untouched)."""
        if isinstance(value, str):
            return self._clean(value)
        if isinstance(value, list | tuple):
            return [self._clean_value(item) for item in value]
        if isinstance(value, dict):
            return {key: self._clean_value(item) for key, item in value.items()}
        return value

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        message = record.getMessage()
        cleaned = self._clean(message)
        if cleaned != message:
            record.msg, record.args = cleaned, ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self._clean(record.exc_text)
        if record.stack_info:
            record.stack_info = self._clean(record.stack_info)
        for key, value in extra_fields(record).items():
            setattr(record, key, self._clean_value(value))
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ts, level, logger, message, exc when there is a traceback, and every
    JSON-serialisable `extra=` field."""

    def format(self, record: logging.LogRecord) -> str:
        created = datetime.fromtimestamp(record.created, UTC)
        entry: dict[str, Any] = {
            "ts": created.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exc"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        for key, value in extra_fields(record).items():
            if key not in entry and _serialisable(value):
                entry[key] = value
        # ASCII only: a non-UTF-8 stderr would otherwise write escapes that are not JSON.
        return json.dumps(entry, allow_nan=False)


def _serialisable(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def redacting(secrets: Iterable[str]) -> Callable[[str], str]:
    """A function that blanks each of these secrets in a text."""
    return RedactSecrets(secrets)._clean


def redactor(settings: Settings) -> Callable[[str], str]:
    """A function that blanks every configured secret in a text (run traces use it)."""
    return redacting(secret_values(settings))


def setup_logging(settings: Settings) -> None:
    """One stderr handler, text or JSON lines, that redacts every secret; Bridge's loggers at
    `log_level`, libraries' at `log_level_libraries`."""
    handler = logging.StreamHandler(sys.stderr)
    if settings.log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactSecrets(secret_values(settings)))
    root = logging.getLogger()
    root.handlers = [handler]
    # The root's level is the one of loggers not set here: any other library's.
    root.setLevel(settings.log_level_libraries)
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(settings.log_level)
    # httpx and httpcore follow log_level_libraries like the rest: they used to be held at WARNING
    # because their INFO lines carry the bot token in Telegram's URLs, but the handler's filter
    # redacts it now, and their one line per request is what log_level_libraries = "INFO" asks for.
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(settings.log_level_libraries)
