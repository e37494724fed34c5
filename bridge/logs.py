"""Logging setup: one stderr handler whose filter redacts every configured secret."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterable, Iterator

from pydantic import BaseModel, SecretStr

from bridge.config import Settings

REDACTED = "<redacted>"
# Shorter "secrets" would redact ordinary words in log lines.
MIN_SECRET_LEN = 6


def secret_values(model: BaseModel) -> Iterator[str]:
    """Every non-empty SecretStr in the settings, however deep."""
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, SecretStr) and len(value.get_secret_value()) >= MIN_SECRET_LEN:
            yield value.get_secret_value()
        elif isinstance(value, BaseModel):
            yield from secret_values(value)


class RedactSecrets(logging.Filter):
    """Replaces secrets in a record's message and traceback (an API URL can carry the bot token)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        # Longest first, so a secret that contains another is replaced whole.
        self.secrets = sorted(set(secrets), key=len, reverse=True)

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


def redactor(settings: Settings) -> Callable[[str], str]:
    """A function that blanks every configured secret in a text (run traces use it)."""
    return RedactSecrets(secret_values(settings))._clean


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
