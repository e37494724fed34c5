"""The hostile-member suite: the fake Telegram Bot API the real adapter talks to."""

from __future__ import annotations

from tests.adapters.conftest import tg

__all__ = ["tg"]
