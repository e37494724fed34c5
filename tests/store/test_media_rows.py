"""A user message keeps its attachments; reading them changes the message once, in the table and in
the history window a store keeps, so the next run sees what the last one read."""

from __future__ import annotations

from bridge.events import Attachment, dumps, loads
from bridge.store.base import SessionRow
from bridge.store.tables import DatabaseStore

PHOTO = Attachment("image", "photo.jpg", "file-1", "image/jpeg", 1234)


async def begin(store: DatabaseStore, session: SessionRow, run_id: str) -> list[object]:
    started = await store.begin_run(
        run_id, session.id, "telegram", memory_scope="", history_limit=20, memory_limit=0, force=True
    )
    return list(started.rows)


async def test_a_message_is_stored_with_its_attachments(store: DatabaseStore, session: SessionRow) -> None:
    await store.add_user_message(session.id, "look", media=dumps([PHOTO]), platform_msg_id="t:1:1")
    [row] = [r for r in await store.history(session.id, 5) if r.kind == "user"]
    assert row.content == "look" and loads(row.media) == (PHOTO,)


async def test_an_attachment_read_by_one_run_is_read_as_such_by_the_next(
    store: DatabaseStore, session: SessionRow
) -> None:
    message = await store.add_user_message(session.id, "", media=dumps([PHOTO]))
    assert message is not None
    rows = await begin(store, session, "r2")  # the window is kept from here on (SQLite)
    assert any(getattr(r, "media", None) for r in rows)
    read = Attachment(
        "audio", "voice.ogg", "file-2", "audio/ogg", 10, voice=True, sha256="a" * 64, transcribed=True
    )
    await store.set_user_message(session.id, message, "water the plants", dumps([read]))
    await store.finish_run("r2", "ok", reply=(session.id, "ok"))
    rows = await begin(store, session, "r3")
    [user] = [r for r in rows if getattr(r, "kind", "") == "user"]
    assert user.content == "water the plants" and loads(user.media) == (read,)  # type: ignore[attr-defined]
    [stored] = [r for r in await store.history(session.id, 10) if r.kind == "user"]
    assert stored.content == "water the plants"


async def test_a_damaged_media_column_reads_as_no_attachments(
    store: DatabaseStore, session: SessionRow
) -> None:
    await store.add_user_message(session.id, "hi", media='[{"kind": "hologram"}, 3, "x"]')
    [row] = [r for r in await store.history(session.id, 5) if r.kind == "user"]
    assert loads(row.media) == () and loads("not json") == ()
