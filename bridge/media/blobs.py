"""The media store: attachments kept once each, by the SHA-256 of their bytes, under the data folder."""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
from pathlib import Path

from bridge.config import Settings


class MediaStore:
    """Content-addressed files: `<root>/<first two hex digits>/<sha256>`.

    The same photo sent twice is kept once. A file is written to a temporary name and renamed into
    place, so a crash never leaves a partial file under a hash (a reader never sees one).
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, sha256: str) -> Path:
        if (
            not isinstance(sha256, str)
            or len(sha256) != 64
            or any(c not in "0123456789abcdef" for c in sha256)
        ):
            raise ValueError(f"not a SHA-256 hex digest: {sha256!r}")
        return self.root / sha256[:2] / sha256

    async def put(self, data: bytes) -> str:
        """Keep the bytes; their hash, by which they are read back."""
        return await asyncio.to_thread(self._put, data)

    async def get(self, sha256: str) -> bytes | None:
        """The bytes kept under that hash; None when they are gone (a pruned or moved folder)."""
        return await asyncio.to_thread(self._get, sha256)

    def _put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        target = self.path(digest)
        if target.exists():
            return digest
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=".part-")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(temp, target)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
        return digest

    def _get(self, sha256: str) -> bytes | None:
        try:
            return self.path(sha256).read_bytes()
        except (FileNotFoundError, ValueError):
            return None


def media_root(settings: Settings) -> Path:
    """The media folder: [media] path, or `media` beside the SQLite database."""
    return settings.media.path or Path(settings.storage.path).parent / "media"
