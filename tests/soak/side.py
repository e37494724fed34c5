"""The soak's platform seam: how a user's message reaches the bot, what the bot was seen to send, and
the config section that points `bridge run` at the platform. The driver and the checks ask only this."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

OWNER = 42
FRIEND = 43  # in allowed_users: a DM session of their own
STRANGER = 44  # in no list: may talk only in the allowed groups
GROUP_1 = -100101
GROUP_2 = -100102


@dataclass(frozen=True, slots=True)
class Chat:
    label: str
    chat_id: int  # the soak's name for the chat; Side.chat_key gives the platform's
    senders: tuple[int, ...]

    @property
    def group(self) -> bool:
        return self.chat_id < 0


CHATS = (
    Chat("owner", OWNER, (OWNER,)),
    Chat("friend", FRIEND, (FRIEND,)),
    Chat("g1", GROUP_1, (OWNER, FRIEND, STRANGER)),
    Chat("g2", GROUP_2, (FRIEND, STRANGER)),
)


class Side(Protocol):
    """One platform as the soak drives it."""

    # The surface name: a stored message's platform id is f"{surface}:{chat_key}:{message id}".
    surface: str
    # Whether a chunk a kill caught `sending` may arrive twice (Telegram has no idempotent send;
    # Matrix drops a repeated transaction id, so there every double is a bug).
    doubles_allowed: bool
    # Whether messages may come as voice notes and photos (and kills aim at a transcription).
    media: bool

    def config(self, tmp_path: Path, llm_url: str, extra: str) -> Path:
        """A config.toml for `bridge run` on this platform; `extra` is TOML for the other sections."""
        ...

    def chat_key(self, chat_id: int) -> str:
        """The platform's id of the soak's chat."""
        ...

    def push(self, chat: Chat, sender: int, words: str | None, **media: Any) -> str:
        """Hand one message to the bot (as soon as it polls); its platform message id."""
        ...

    def sends_in_flight(self) -> int:
        """Requests to send a message now open between the bot and the platform."""
        ...

    def requests_in_flight(self) -> int:
        """Requests that send or edit a message now open between the bot and the platform."""
        ...

    def unconfirmed(self) -> list[str]:
        """Messages handed over that the bot has not confirmed taking (empty where that is not known)."""
        ...

    def received(self) -> list[tuple[str, str]]:
        """(chat key, text as it reads now) of every message the bot sent, edits applied."""
        ...
