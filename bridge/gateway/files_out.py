"""Files the agent sends (send_file): copied into the media store, then queued like any reply."""

from __future__ import annotations

import asyncio
import mimetypes
from pathlib import Path

from bridge.events import Outbound, OutFile, Route, megabytes
from bridge.gateway.delivery import Delivery
from bridge.media.blobs import MediaStore
from bridge.media.parts import image_type
from bridge.store.base import SessionRow
from bridge.tools.base import ToolResult

# How long send_file waits to say "sent"; past it, the file stays queued and goes when the chat can.
CONFIRM_S = 30.0
# The largest file sent where the platform names no limit of its own (it is read whole, and kept).
DEFAULT_MAX_BYTES = 50 * 1024 * 1024


class FileOut:
    """The FileSender of runs: the file goes to the session's chat, through the outbox and the send
    policy, within what the platform takes; the model is told what became of it."""

    def __init__(self, delivery: Delivery, blobs: MediaStore) -> None:
        self.delivery = delivery
        self.blobs = blobs

    async def send_file(self, session: SessionRow, path: Path, caption: str) -> ToolResult:
        route = Route.from_json(session.last_route)
        sender = self.delivery.sender(route.surface) if route is not None else None
        if route is None or sender is None:
            return ToolResult.error("no_chat", "This session has no chat this bot can send a file to.")
        size = (await asyncio.to_thread(path.stat)).st_size
        limit = sender.max_upload_bytes if sender.max_upload_bytes is not None else DEFAULT_MAX_BYTES
        if size > limit:
            return ToolResult.error(
                "too_large",
                f"{path.name} is {megabytes(size)}; {route.surface} takes files up to {megabytes(limit)}. "
                "Send a smaller file (compress or split it).",
            )
        if not await self.delivery.may_speak(route, session.key):
            # Recorded as suppressed, like any reply in a chat where the bot keeps quiet: by name.
            named = f"📎 {path.name}" + (f"\n{caption}" if caption else "")
            await self.delivery.enqueue(Outbound(route, "reply", named, session_key=session.key))
            return ToolResult.error(
                "suppressed", "Not sent: the send policy keeps the bot silent in this chat."
            )
        data = await asyncio.to_thread(path.read_bytes)
        digest = await self.blobs.put(data)
        photo_limit = sender.max_photo_bytes
        photo = image_type(data) is not None and (photo_limit is None or size <= photo_limit)
        file = OutFile(
            path.name, str(self.blobs.path(digest)), size, mimetypes.guess_type(path.name)[0], photo=photo
        )
        sent = await self.delivery.enqueue(
            Outbound(route, "reply", caption, session_key=session.key, file=file)
        )
        try:
            message_id = await asyncio.wait_for(asyncio.shield(sent), CONFIRM_S)
        except TimeoutError:
            return ToolResult.success({"status": "queued", "file": path.name, "size": size})
        if message_id is None:
            return ToolResult.error(
                "send_failed",
                f"{path.name} was not sent: the platform refused it, or the chat's send policy changed.",
            )
        return ToolResult.success({"status": "sent", "file": path.name, "size": size})
