"""`python -m bench.versus.nanobot_side`, run by nanobot's own Python: nanobot 0.3.5's side.

nanobot's SDK (`Nanobot.run`) with a config that points its OpenAI-compatible provider at the instant
model, one session per chat, its history in its own files as it keeps them. Its log is turned down to
INFO, as Bridge's is, and goes to a file: the default DEBUG lines to a terminal would only slow it.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from bench.versus.loop import arguments, closed_loop, report


async def main() -> None:
    args = arguments(__doc__ or "")
    folder = Path(args.folder)
    # nanobot keeps its state under the home folder; the run's own, so no user's config is read.
    os.environ["HOME"] = str(folder)
    config = {
        "agents": {
            "defaults": {"model": "instant", "provider": "custom", "workspace": str(folder / "workspace")}
        },
        "providers": {"custom": {"apiKey": "bench", "apiBase": args.model}},
    }
    (folder / "config.json").write_text(json.dumps(config))
    from loguru import logger
    from nanobot.nanobot import Nanobot

    logger.remove()
    logger.add(folder / "nanobot.log", level="INFO")
    bot = Nanobot.from_config(folder / "config.json")

    async def turn(chat: int, number: int) -> str:
        result = await bot.run(f"c{chat} t{number}", session_key=f"bench:c{chat}", chat_id=f"c{chat}")
        return str(result.content)

    await turn(-1, 0)  # lazy imports and the first connection, not counted
    report(await closed_loop("nanobot", turn, args.chats, args.warm, args.window))


if __name__ == "__main__":
    asyncio.run(main())
