"""DM pairing: strangers get a code that expires, owners approve it, and the approved may talk until revoked.

The codes and approvals live in the database (bridge/store/pairing.py), so `bridge pair` in another
process, other workers and the dashboard all see one truth. This process keeps the approved people
in memory for AccessPolicy.check, which is synchronous. That copy is kept exact where it matters:
before the access check of any DM whose verdict hangs on pairing (someone neither an owner nor in
allowed_users), the dispatcher re-reads that one person's row (`sync`, a primary-key read). So an
approval or a revoke made anywhere, by any process, takes effect on that person's next message, and
owners, allowlisted people and groups never pay for the read.
"""

from __future__ import annotations

import logging
import math
import re
import secrets
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from bridge.errors import PairingLimited
from bridge.events import Inbound, Outbound, Route
from bridge.sessions.keys import dm
from bridge.store.pairing import PairedUser, PairingTable, PendingCode

if TYPE_CHECKING:
    from bridge.gateway.delivery import Delivery

log = logging.getLogger(__name__)

# Crockford's base32 without the look-alikes 0, O, 1 and I: 32 symbols, so 8 of them carry 40 bits.
# With at most MAX_PENDING live codes, one guess hits one of them with odds of 1 in a billion, and
# only owners may guess at all (with MAX_WRONG tries per WRONG_WINDOW_S).
ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8
# A stranger who writes again while their code is live gets it again at most this often, and
# silence otherwise: nobody can make the bot send a flood, and one person holds one code at a time.
RESEND_AFTER_S = 600.0
# Live codes at most, whoever asked: a crowd of new accounts cannot grow the table without bound.
# Past it, strangers get silence (and the log says so) until codes expire or are approved.
MAX_PENDING = 1000
# Wrong approvals one approver may make in a window; past it, approving is refused for a while.
MAX_WRONG = 5
WRONG_WINDOW_S = 900.0
_SEPARATORS = re.compile(r"[\s_-]+")
_CODE = re.compile(f"[{ALPHABET}]{{{CODE_LENGTH}}}")

APPROVED_TEXT = "You're approved: you can talk to this bot now."


def new_code() -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))


def normalize(text: str) -> str | None:
    """A code as typed ("abcd-efgh", "ABCD EFGH") in its stored form; None when it cannot be one."""
    code = _SEPARATORS.sub("", text).upper()
    return code if _CODE.fullmatch(code) else None


def minutes_left(expires_at: float, now: float) -> int:
    return max(1, math.ceil((expires_at - now) / 60))


def code_text(code: PendingCode, now: float) -> str:
    """What a stranger is sent: the code, and nothing about the bot."""
    return (
        f"To talk to this bot, ask its owner to approve the code {code.code} "
        f"(it expires in {minutes_left(code.expires_at, now)} min)."
    )


def who(surface: str, user_id: str, name: str | None) -> str:
    """`telegram user 777 (Ann)`, for owners' messages and the CLI."""
    return f"{surface} user {user_id}" + (f" ({name})" if name else "")


class Pairing:
    """The pairing service: codes for strangers, approvals, revokes and the lists the dashboard shows.

    `clock` is wall time (codes' expiry is stored and compared across processes); tests inject one.
    `delivery`, where given, tells an approved person so through the outbox.
    """

    def __init__(
        self,
        store: PairingTable,
        *,
        delivery: Delivery | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.delivery = delivery
        self._clock = clock
        self._approved: set[tuple[str, str]] = set()
        # Times of recent wrong approvals, by approver. A handful of approvers (owners, "cli",
        # "dashboard"), so this stays small.
        self._wrong: dict[str, deque[float]] = {}

    def now(self) -> float:
        """The service's clock (wall time), against which codes expire."""
        return self._clock()

    # -- what AccessPolicy asks, and keeping its answers exact ---------------------------------

    def is_paired(self, surface: str, user_id: str) -> bool:
        """From memory: synchronous, for the access check (see the module's docstring)."""
        return (surface, user_id) in self._approved

    async def load(self) -> None:
        """Everyone approved, into memory: at start."""
        self._approved = {(user.surface, user.user_id) for user in await self.store.paired_users()}

    async def sync(self, surface: str, user_id: str) -> bool:
        """Re-read whether this person is approved (another process may have approved or revoked
        them since), into memory; whether they are."""
        paired = await self.store.paired_user(surface, user_id) is not None
        if paired:
            self._approved.add((surface, user_id))
        else:
            self._approved.discard((surface, user_id))
        return paired

    # -- strangers ---------------------------------------------------------------------------

    async def admit(self, inbound: Inbound, *, ttl_s: float) -> str | None:
        """A stranger's DM: the text to send them (their code), or None to stay silent (their code
        was sent a moment ago, or too many codes are waiting). Their message is not kept."""
        now = self._clock()
        issued = await self.store.issue_pairing_code(
            inbound.surface,
            inbound.sender_id,
            chat_id=inbound.chat_id,
            display_name=inbound.sender_name,
            now=now,
            ttl_s=ttl_s,
            resend_after_s=RESEND_AFTER_S,
            max_pending=MAX_PENDING,
            new_code=new_code,
        )
        if issued is None:
            log.warning(
                "%d pairing codes are waiting, so %s got none; approve or let them expire (bridge pair list)",
                MAX_PENDING,
                inbound.sender,
            )
            return None
        if not issued.send:
            return None
        log.info(
            "pairing code for %s sent; it expires in %d s",
            inbound.sender,
            round(issued.code.expires_at - now),
        )
        return code_text(issued.code, now)

    # -- owners ------------------------------------------------------------------------------

    async def pending(self) -> list[PendingCode]:
        """Live codes, oldest first."""
        return await self.store.pending_codes(self._clock())

    async def approved(self) -> list[PairedUser]:
        """Everyone approved, in the order they were."""
        return await self.store.paired_users()

    async def approve(self, code: str, by: str) -> PairedUser | None:
        """Approve a live code (any case, spaces and dashes ignored); `by` names the approver
        ("telegram:42", "cli", "dashboard"). None for a wrong or expired code. Raises PairingLimited
        after MAX_WRONG wrong codes from `by` within WRONG_WINDOW_S, without looking at the code."""
        now = self._clock()
        wrong = self._wrong.setdefault(by, deque())
        while wrong and now - wrong[0] >= WRONG_WINDOW_S:
            wrong.popleft()
        if len(wrong) >= MAX_WRONG:
            raise PairingLimited(wrong[0] + WRONG_WINDOW_S - now)
        normalized = normalize(code)
        taken = await self.store.take_pairing_code(normalized, by=by, now=now) if normalized else None
        if taken is None:
            wrong.append(now)
            log.info("a wrong pairing code from %s", by)
            return None
        user, chat_id = taken
        self._approved.add((user.surface, user.user_id))
        log.info("%s approved by %s", who(user.surface, user.user_id, user.display_name), by)
        await self._tell(user, chat_id)
        return user

    async def revoke(self, surface: str, user_id: str) -> bool:
        """Take an approval back: their next message gets a code (or the refusal) again. False when
        they were not approved."""
        revoked = await self.store.unpair(surface, user_id)
        self._approved.discard((surface, user_id))
        if revoked:
            log.info("pairing of %s:%s revoked", surface, user_id)
        return revoked

    async def _tell(self, user: PairedUser, chat_id: str) -> None:
        """The approved person hears it, through the outbox (when this process can send there)."""
        if self.delivery is None or self.delivery.sender(user.surface) is None:
            return
        item = Outbound(
            Route(user.surface, chat_id),
            "notice",
            APPROVED_TEXT,
            session_key=str(dm(user.surface, user.user_id)),
            dedupe_key=f"paired:{user.surface}:{user.user_id}:{user.approved_at!r}",
        )
        # Queued, not awaited: the owner's answer does not wait for the platform.
        await self.delivery.enqueue(item)
