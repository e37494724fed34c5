"""The Telegram surface on python-telegram-bot: DMs, groups and forum topics.

`adapter.py` is the adapter (the `bridge.adapters` entry point names `TelegramAdapter` here);
`updates.py` takes updates by long polling or the webhook, confirming each only once the core took
it; `format.py` renders Markdown as the HTML Telegram accepts; `media.py` brings photos, voice and
files in and sends files out; `retrying.py` decides what a failed Bot API call gets.
"""

from adapters.telegram.adapter import TelegramAdapter, webhook_secret_of

__all__ = ["TelegramAdapter", "webhook_secret_of"]
