"""The media store: bytes kept once by their SHA-256, read back, and never left half written."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from bridge.config import Settings
from bridge.media.blobs import MediaStore, media_root
from tests.media.samples import JPEG, PNG


def files_under(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*") if path.is_file())


@pytest.fixture
def blobs(tmp_path: Path) -> MediaStore:
    return MediaStore(tmp_path / "media")


async def test_bytes_are_kept_under_their_sha256_and_read_back(blobs: MediaStore) -> None:
    digest = await blobs.put(JPEG)

    assert digest == hashlib.sha256(JPEG).hexdigest()
    assert blobs.path(digest) == blobs.root / digest[:2] / digest
    assert blobs.path(digest).read_bytes() == JPEG
    assert await blobs.get(digest) == JPEG


async def test_the_same_bytes_sent_twice_are_kept_once(blobs: MediaStore) -> None:
    first = await blobs.put(PNG)
    second = await blobs.put(PNG)

    assert first == second
    assert files_under(blobs.root) == [blobs.path(first)]


async def test_different_bytes_are_kept_apart(blobs: MediaStore) -> None:
    a, b = await blobs.put(PNG), await blobs.put(JPEG)

    assert a != b
    assert (await blobs.get(a), await blobs.get(b)) == (PNG, JPEG)
    assert len(files_under(blobs.root)) == 2


async def test_empty_bytes_are_kept_too(blobs: MediaStore) -> None:
    digest = await blobs.put(b"")
    assert digest == hashlib.sha256(b"").hexdigest()
    assert await blobs.get(digest) == b""


async def test_a_hash_not_in_the_store_reads_as_none(blobs: MediaStore) -> None:
    assert await blobs.get("0" * 64) is None
    await blobs.put(PNG)  # the folder exists now; the hash still is not in it
    assert await blobs.get("f" * 64) is None


@pytest.mark.parametrize(
    "bad",
    ["", "abc", "g" * 64, "A" * 64, "a" * 63, "a" * 65, "../" + "a" * 61, "ab/" + "c" * 61],
)
async def test_a_string_that_is_not_a_sha256_is_refused(blobs: MediaStore, bad: str) -> None:
    with pytest.raises(ValueError, match="not a SHA-256"):
        blobs.path(bad)
    # Reading by it finds nothing rather than failing a run.
    assert await blobs.get(bad) is None


async def test_a_failed_write_leaves_no_partial_file(
    blobs: MediaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_rename(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", no_rename)

    with pytest.raises(OSError, match="No space left"):
        await blobs.put(PNG)

    assert files_under(blobs.root) == []
    assert await blobs.get(hashlib.sha256(PNG).hexdigest()) is None

    monkeypatch.undo()
    digest = await blobs.put(PNG)  # a later try succeeds
    assert files_under(blobs.root) == [blobs.path(digest)]


async def test_a_file_already_stored_is_not_rewritten(
    blobs: MediaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    digest = await blobs.put(PNG)
    renames: list[object] = []
    monkeypatch.setattr(os, "replace", lambda src, dst: renames.append(dst))

    assert await blobs.put(PNG) == digest
    assert renames == []


def test_the_media_folder_defaults_to_beside_the_database(tmp_path: Path) -> None:
    settings = Settings(storage={"path": tmp_path / "state" / "bridge.db"})
    assert media_root(settings) == tmp_path / "state" / "media"


def test_the_media_folder_is_media_path_when_set(tmp_path: Path) -> None:
    settings = Settings(storage={"path": tmp_path / "state" / "bridge.db"}, media={"path": tmp_path / "m"})
    assert media_root(settings) == tmp_path / "m"
