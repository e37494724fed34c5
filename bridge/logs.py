"""Logging setup: one stderr handler whose filter redacts every configured secret."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterable, Iterator
from urllib.parse import unquote

from pydantic import BaseModel, SecretStr

from bridge.config import REDACTED, Settings, url_userinfo

# Shorter "secrets" would redact ordinary words in log lines.
MIN_SECRET_LEN = 6


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
        elif isinstance(value, dict):
            for item in value.values():
                if isinstance(item, BaseModel):
                    yield from secret_values(item)
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
    """Replaces secrets in a record's message and traceback (an API URL can carry the bot token)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        # Longest first, so a secret that contains another is replaced whole; "" would match everywhere.
        self.secrets = sorted({secret for secret in secrets if secret}, key=len, reverse=True)

    def _clean(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        return text

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
        return True


def redacting(secrets: Iterable[str]) -> Callable[[str], str]:
    """A function that blanks each of these secrets in a text."""
    return RedactSecrets(secrets)._clean


def redactor(settings: Settings) -> Callable[[str], str]:
    """A function that blanks every configured secret in a text (run traces use it)."""
    return redacting(secret_values(settings))


def setup_logging(settings: Settings) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactSecrets(secret_values(settings)))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(settings.log_level)
    # One INFO line per HTTP request (with the bot token in Telegram's URLs) would drown the log.
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
