"""The session service: which key an inbound message belongs to, and its one active session."""

from __future__ import annotations

from collections.abc import Iterable

from bridge.events import Inbound, Route
from bridge.sessions import keys
from bridge.sessions.authority import Authorities, Authority
from bridge.store.base import SessionMeta, SessionRow
from bridge.store.tables import DatabaseStore


class SessionService:
    """Maps chats to session keys and keeps one active session per key."""

    def __init__(self, store: DatabaseStore, owners: Iterable[str]) -> None:
        self.store = store
        self.owners = frozenset(owners)
        self.authorities = Authorities(self.owners)

    def is_owner(self, inbound: Inbound) -> bool:
        return self.authorities.is_owner(inbound.sender)

    def authority(self, key: str, sender: str | None) -> Authority:
        """Whom a command said in the chat `key` acts for (a run's is the runner's to work out)."""
        return self.authorities.for_chat(key, sender)

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
        # An owner's DM key (from the API, a config) is main's: never a second session beside it.
        return await self.store.ensure_active_session(self.authorities.canonical(key))

    async def start_new(self, key: str) -> SessionRow:
        """End the key's active session and start an empty one; the old one stays in the store."""
        return await self.store.start_new_session(key)


async def chat_route(store: DatabaseStore, key: str, fallback: str | None = None) -> Route | None:
    """Where a chat is: where it was last written in, else `fallback` (a stored route), else what its
    key says (a group, a channel, a Telegram DM). `key` is canonical (an owner's DM key is main)."""
    session = await store.active_session(key)
    stored = session.last_route if session and session.last_route else fallback
    return Route.from_json(stored) or keys.route_of_key(key)
