"""The Discord surface on discord.py: DMs, guild channels and threads.

`adapter.py` is the adapter (the `bridge.adapters` entry point names `DiscordAdapter` here);
`media.py` brings attachments in and sends files out.
"""

from adapters.discord.adapter import DiscordAdapter

__all__ = ["DiscordAdapter"]
