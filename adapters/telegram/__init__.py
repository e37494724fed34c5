"""The Telegram surface on python-telegram-bot: DMs, groups and forum topics.

`adapter.py` is the adapter (the `bridge.adapters` entry point names `TelegramAdapter` here);
`updates.py` takes updates by long polling or the webhook, confirming each only once the core took
it; `format.py` renders Markdown as the HTML Telegram accepts; `media.py` brings photos, voice and
files in and sends files out; `retrying.py` decides what a failed Bot API call gets.
"""

import contextlib
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def _without_passport() -> Iterator[None]:
    """python-telegram-bot imports `cryptography`, where it is installed, for Telegram Passport's
    decryption, which Bridge never uses; it is installed with Bridge all the same (the MCP SDK's JWT
    support needs it). Hidden while PTB loads, it is not loaded into every worker: 8 MB of a `bridge
    run` worker's resident size (bench/idle_worker.py). PTB then says passport data can't be
    decrypted, should any reach it. Where it was loaded already, PTB takes it as it is."""
    if "telegram" in sys.modules or "cryptography" in sys.modules:
        yield
        return
    sys.modules["cryptography"] = None  # type: ignore[assignment]  # an import of it fails at once
    try:
        yield
    finally:
        del sys.modules["cryptography"]


with _without_passport():
    from adapters.telegram.adapter import TelegramAdapter, webhook_secret_of

__all__ = ["TelegramAdapter", "webhook_secret_of"]
