"""DM pairing's tables on both backends: one live code per stranger, resends, expiry, the cap, approving
once, revoking."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from bridge.store.pairing import IssuedCode
from bridge.store.tables import DatabaseStore

NOW = 1_000_000.0
TTL = 3600.0
RESEND = 600.0


def codes(*drawn: str) -> Callable[[], str]:
    """A code generator that hands out these codes in turn (then fails the test)."""
    it: Iterator[str] = iter(drawn)
    return lambda: next(it)


async def issue(
    store: DatabaseStore,
    user: str,
    *,
    new_code: Callable[[], str],
    at: float = NOW,
    cap: int = 1000,
    name: str | None = None,
) -> IssuedCode | None:
    return await store.issue_pairing_code(
        "telegram",
        user,
        chat_id=f"chat-{user}",
        display_name=name,
        now=at,
        ttl_s=TTL,
        resend_after_s=RESEND,
        max_pending=cap,
        new_code=new_code,
    )


async def test_a_stranger_holds_one_live_code_resent_at_most_once_per_interval(store: DatabaseStore) -> None:
    first = await issue(store, "777", new_code=codes("ABCDEFGH"))
    assert first is not None and first.send
    assert first.code.code == "ABCD-EFGH" and first.code.chat_id == "chat-777"
    assert first.code.expires_at == NOW + TTL

    again = await issue(store, "777", at=NOW + 10, new_code=codes())
    assert again is not None and not again.send and again.code.code == "ABCD-EFGH"
    later = await issue(store, "777", at=NOW + RESEND, new_code=codes())
    assert later is not None and later.send and later.code.code == "ABCD-EFGH"
    assert later.code.sent_at == NOW + RESEND
    # The resend restarts the interval; the code's life does not grow.
    quiet = await issue(store, "777", at=NOW + RESEND + 1, new_code=codes())
    assert quiet is not None and not quiet.send
    [pending] = await store.pending_codes(NOW + RESEND + 1)
    assert pending.expires_at == NOW + TTL


async def test_an_expired_code_is_replaced_by_a_new_one_and_no_longer_listed(store: DatabaseStore) -> None:
    await issue(store, "777", new_code=codes("ABCDEFGH"))
    assert await store.pending_codes(NOW + TTL) == []
    renewed = await issue(store, "777", at=NOW + TTL, new_code=codes("JKLMNPQR"))
    assert renewed is not None and renewed.send and renewed.code.code == "JKLM-NPQR"
    assert [c.code for c in await store.pending_codes(NOW + TTL)] == ["JKLM-NPQR"]


async def test_a_code_already_taken_is_drawn_again(store: DatabaseStore) -> None:
    await issue(store, "777", new_code=codes("ABCDEFGH"))
    other = await issue(store, "888", new_code=codes("ABCDEFGH", "STUVWXYZ"))
    assert other is not None and other.code.code == "STUV-WXYZ"


async def test_past_the_cap_strangers_get_no_code_until_one_expires(store: DatabaseStore) -> None:
    assert await issue(store, "1", cap=2, new_code=codes("AAAAAAAA"))
    assert await issue(store, "2", at=NOW + 100, cap=2, new_code=codes("BBBBBBBB"))
    assert await issue(store, "3", at=NOW + 200, cap=2, new_code=codes("CCCCCCCC")) is None
    # The first expires: its place is free (and the table holds live codes only).
    assert await issue(store, "3", at=NOW + TTL, cap=2, new_code=codes("CCCCCCCC"))
    assert await store._scalar("SELECT COUNT(*) FROM pairing_codes") == 2


async def test_taking_a_code_pairs_its_stranger_once(store: DatabaseStore) -> None:
    await issue(store, "777", name="Ann", new_code=codes("ABCDEFGH"))
    taken = await store.take_pairing_code("ABCDEFGH", by="telegram:42", now=NOW + 60)
    assert taken is not None
    user, chat_id = taken
    assert (user.surface, user.user_id, user.display_name) == ("telegram", "777", "Ann")
    assert (user.approved_at, user.approved_by, chat_id) == (NOW + 60, "telegram:42", "chat-777")
    assert await store.paired_user("telegram", "777") == user
    assert await store.paired_users() == [user]
    assert await store.pending_codes(NOW + 60) == []
    assert await store.take_pairing_code("ABCDEFGH", by="telegram:42", now=NOW + 61) is None


async def test_a_wrong_or_expired_code_pairs_nobody(store: DatabaseStore) -> None:
    await issue(store, "777", new_code=codes("ABCDEFGH"))
    assert await store.take_pairing_code("ABCDEFGJ", by="cli", now=NOW) is None
    assert await store.take_pairing_code("ABCDEFGH", by="cli", now=NOW + TTL) is None
    assert await store.paired_users() == []


async def test_unpair_takes_the_approval_back(store: DatabaseStore) -> None:
    await issue(store, "777", new_code=codes("ABCDEFGH"))
    assert await store.take_pairing_code("ABCDEFGH", by="cli", now=NOW)
    assert await store.unpair("telegram", "777")
    assert await store.paired_user("telegram", "777") is None
    assert not await store.unpair("telegram", "777")
    assert await store.paired_users() == []


async def test_approving_someone_again_updates_their_row(store: DatabaseStore) -> None:
    await issue(store, "777", name="Ann", new_code=codes("ABCDEFGH"))
    assert await store.take_pairing_code("ABCDEFGH", by="cli", now=NOW)
    # Their code was used up, so they got a new one (e.g. after a revoke made elsewhere was undone).
    await issue(store, "777", name="Ann B.", at=NOW + 1, new_code=codes("JKLMNPQR"))
    again = await store.take_pairing_code("JKLMNPQR", by="dashboard", now=NOW + 2)
    assert again is not None
    [user] = await store.paired_users()
    assert (user.display_name, user.approved_by, user.approved_at) == ("Ann B.", "dashboard", NOW + 2)
