"""Damage a SQLite file the way a failing disk would, for tests of the integrity check."""

from __future__ import annotations

from pathlib import Path

PAGE = 4096


def damage(path: Path) -> bytes:
    """Scribble over the b-tree headers of pages in the middle, keeping the file header intact.

    Returns the damaged bytes, so a test can check that nobody wrote to the file afterwards.
    """
    data = bytearray(path.read_bytes())
    assert len(data) > PAGE * 12, "the database is too small to damage its middle pages"
    for number in range(4, 10):
        data[PAGE * number : PAGE * number + 12] = b"\x0d" + b"\xff" * 11
    path.write_bytes(bytes(data))
    return bytes(data)
