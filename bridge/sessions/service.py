"""The session service: which key an inbound message belongs to, and its one active session."""

from __future__ import annotations

from collections.abc import Iterable

from bridge.events import Inbound
from bridge.sessions import keys
from bridge.store.base import SessionMeta, SessionRow, Store


class SessionService:
    """Maps chats to session keys and keeps one active session per key."""

    def __init__(self, store: Store, owners: Iterable[str]) -> None:
        self.store = store
        self.owners = frozenset(owners)

    def is_owner(self, inbound: Inbound) -> bool:
        return inbound.sender in self.owners

    def key_for(self, inbound: Inbound) -> str:
        if inbound.chat_type == "dm":
            # Owners share one personal thread across surfaces; anyone else is never folded into it.
            if self.is_owner(inbound):
                return keys.MAIN
            return str(keys.dm(inbound.surface, inbound.sender_id))
        if inbound.chat_type == "group":
            return str(keys.group(inbound.surface, inbound.chat_id, inbound.thread_id))
        return str(keys.channel(inbound.surface, inbound.chat_id))

    async def active(self, inbound: Inbound) -> SessionRow:
        meta = SessionMeta(
            surface=inbound.surface,
            chat_type=inbound.chat_type,
            display_name=inbound.chat_title or inbound.sender_name,
            last_route=inbound.route.to_json(),
            parent_id=inbound.parent_id,
        )
        return await self.store.ensure_active_session(self.key_for(inbound), meta)

    async def active_for_key(self, key: str) -> SessionRow:
        return await self.store.ensure_active_session(key)

    async def start_new(self, key: str) -> SessionRow:
        """End the key's active session and start an empty one; the old one stays in the store."""
        return await self.store.start_new_session(key)
