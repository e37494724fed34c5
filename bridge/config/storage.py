"""Config of [storage]: the SQLite file, or the PostgreSQL server every worker shares."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from bridge.config.base import Section, mask_url


class StorageSettings(Section):
    # The embedded default: one SQLite file. Ignored when `url` is set.
    path: Path = Path("data/bridge.db")
    # A PostgreSQL server shared by every worker: "postgresql://user@host:port/db".
    url: str | None = None
    # Connections each worker keeps to the PostgreSQL server.
    pool_size: int = Field(10, ge=1, le=200)
    # How long another worker on the same PostgreSQL may go without saying it is alive (it does every
    # 5 s) before its connections are ended, so that its chats and platform connections pass to the
    # living: a frozen process, or a machine gone or cut off, whose connections the server would
    # otherwise hold for hours.
    silent_worker_timeout_s: float = Field(30.0, ge=10.0, le=3600.0)

    @field_validator("url")
    @classmethod
    def _postgres_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if not value.startswith(("postgresql://", "postgres://")):
            raise ValueError(
                "must be a PostgreSQL URL, postgresql://user@host:port/database "
                "(leave it out to use the SQLite file at [storage] path)"
            )
        return value

    @property
    def postgres(self) -> bool:
        return self.url is not None

    def describe(self) -> str:
        """Where the data is, for messages: the file, or the URL without its credentials."""
        return mask_url(self.url) if self.url else str(self.path)
