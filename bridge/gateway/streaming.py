"""A run's answer shown as it streams, on a surface that can print text as it comes (bridge chat)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from bridge.events import Route

if TYPE_CHECKING:
    from bridge.gateway.activity import ActivityReporter


class StreamingSender(Protocol):
    """A sender with `supports_stream = True`: it prints a piece of the answer where the reply goes.

    The reply itself still arrives through send() once the run ends; the sender shows only what of it
    the stream has not (the stored answer and the streamed text are the same, notes aside).
    """

    async def stream(self, route: Route, delta: str) -> None: ...


class LiveReply:
    """The live display of one run: a segment per model request, each printed as its text comes."""

    def __init__(self, sender: StreamingSender, route: Route, activity: ActivityReporter) -> None:
        self.sender = sender
        self.route = route
        # The tool activity is printed by the courier; the stream waits for it, so a tool line never
        # lands inside the text of the answer that follows it.
        self.activity = activity

    def segment(self) -> LiveSegment:
        return LiveSegment(self)


class LiveSegment:
    """One model request's text, as the runner's TextSink."""

    def __init__(self, reply: LiveReply) -> None:
        self.reply = reply
        self._shown = False

    @property
    def shown(self) -> bool:
        return self._shown

    async def begin(self) -> None:
        # Nothing is shown until text arrives, and a request is only tried again if none was.
        return None

    async def text(self, delta: str) -> None:
        if not delta:
            return
        if not self._shown:
            await self.reply.activity.settled()
            self._shown = True
        await self.reply.sender.stream(self.reply.route, delta)
