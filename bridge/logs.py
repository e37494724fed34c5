"""Logging setup: one stderr handler whose filter redacts every configured secret, and beside it a
ring of the newest lines, redacted alike, that the dashboard's Logs page reads and tails."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
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
    "slack_sdk",
    "nio",
    "asyncio",
    "psycopg",
    "psycopg.pool",
    "websockets",
    "urllib3",
    "hpack",
    "charset_normalizer",
)
# The newest log lines kept in memory for the dashboard: at ~300 bytes a line, about 1.5 MB.
RING_SIZE = 5000
# New lines one slow viewer of the live tail may fall behind by before its oldest are dropped.
TAIL_QUEUE_SIZE = 1000
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


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


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
    """One stderr handler, text or JSON lines, and the ring of recent lines beside it, both behind the
    one filter that redacts every secret; Bridge's loggers at `log_level`, libraries' at
    `log_level_libraries`."""
    global _ring
    handler = logging.StreamHandler(sys.stderr)
    if settings.log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    redact = RedactSecrets(secret_values(settings))
    handler.addFilter(redact)
    # A handler like the stderr one, so it keeps exactly what the loggers' levels let through, and
    # behind the same filter, so nothing is held in memory that the file would not show.
    _ring = LogRing()
    kept = RingHandler(_ring)
    kept.setFormatter(handler.formatter)
    kept.addFilter(redact)
    root = logging.getLogger()
    root.handlers = [handler, kept]
    # The root's level is the one of loggers not set here: any other library's.
    root.setLevel(settings.log_level_libraries)
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(settings.log_level)
    # httpx and httpcore follow log_level_libraries like the rest: they used to be held at WARNING
    # because their INFO lines carry the bot token in Telegram's URLs, but the handler's filter
    # redacts it now, and their one line per request is what log_level_libraries = "INFO" asks for.
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(settings.log_level_libraries)


# ---------------------------------------------------------------------------- the recent lines


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One log record as the Logs page shows it, already redacted."""

    seq: int  # 1, 2, 3... in the order the lines were logged: a live tail resumes after one
    at: float  # Unix time
    level: str
    levelno: int
    logger: str
    message: str  # with the traceback, if any, on the lines after it
    line: str  # as the stderr handler writes it (text or JSON): what a download holds
    fields: dict[str, Any]  # the caller's JSON-serialisable `extra=` fields (run_id, session_key...)


class LogRing:
    """The newest RING_SIZE log entries, and live queues of new ones for the viewers of the tail.

    Records come from any thread (a library's, asyncio's default executor), so the ring is locked,
    and a viewer's queue is fed in its own event loop. Adding costs one append while nobody watches;
    a viewer who falls behind loses its oldest lines (as bridge.live), never holds up the logger."""

    def __init__(self, size: int = RING_SIZE) -> None:
        self._entries: deque[LogEntry] = deque(maxlen=size)
        # Reentrant: a line logged while a line is handed out (asyncio, in debug mode) must not hang.
        self._lock = threading.RLock()
        self._seq = 0
        self._viewers: dict[asyncio.Queue[LogEntry], asyncio.AbstractEventLoop] = {}

    @property
    def size(self) -> int:
        return self._entries.maxlen or 0

    def add(self, record: logging.LogRecord, line: str) -> None:
        """Keep a handled (so redacted and formatted) record."""
        message = record.getMessage()
        for extra in (record.exc_text, record.stack_info):
            if extra:
                message += "\n" + extra
        fields = {key: value for key, value in extra_fields(record).items() if _serialisable(value)}
        with self._lock:
            self._seq += 1
            entry = LogEntry(
                seq=self._seq,
                at=record.created,
                level=record.levelname,
                levelno=record.levelno,
                logger=record.name,
                message=message,
                line=line,
                fields=fields,
            )
            self._entries.append(entry)
            # Under the lock, so each viewer gets the lines in their order.
            for queue, loop in list(self._viewers.items()):
                _hand_over(queue, loop, entry)

    def entries(self) -> list[LogEntry]:
        """The kept entries, oldest first."""
        with self._lock:
            return list(self._entries)

    @contextlib.contextmanager
    def subscribe(self, after: int | None = None) -> Iterator[tuple[list[LogEntry], asyncio.Queue[LogEntry]]]:
        """A queue of the entries logged from now on, in the running event loop, and the kept entries
        after seq `after` (none when None): together, every line after it, none twice."""
        queue: asyncio.Queue[LogEntry] = asyncio.Queue(TAIL_QUEUE_SIZE)
        with self._lock:
            self._viewers[queue] = asyncio.get_running_loop()
            backlog = [entry for entry in self._entries if after is not None and entry.seq > after]
        try:
            yield backlog[-TAIL_QUEUE_SIZE:], queue
        finally:
            with self._lock:
                self._viewers.pop(queue, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def _hand_over(queue: asyncio.Queue[LogEntry], loop: asyncio.AbstractEventLoop, entry: LogEntry) -> None:
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        _offer(queue, entry)
        return
    # An asyncio queue is not thread-safe: another thread's line is put in by the viewer's own loop.
    with contextlib.suppress(RuntimeError):  # that loop has closed: its viewer is gone
        loop.call_soon_threadsafe(_offer, queue, entry)


def _offer(queue: asyncio.Queue[LogEntry], entry: LogEntry) -> None:
    if queue.full():
        queue.get_nowait()
    queue.put_nowait(entry)


class RingHandler(logging.Handler):
    """Keeps each record it handles in a LogRing, formatted as its formatter (the stderr one) would."""

    def __init__(self, ring: LogRing) -> None:
        super().__init__()
        self.ring = ring

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.ring.add(record, self.format(record))
        except Exception:
            self.handleError(record)


# Until setup_logging runs (tests, `bridge admin`), an empty ring that nothing feeds.
_ring = LogRing()


def recent_log() -> LogRing:
    """The ring of recent log lines that setup_logging installed (empty if it never ran)."""
    return _ring
