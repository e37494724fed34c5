"""The streamed text a chat may see before the answer is complete: never a tool call being written."""

from __future__ import annotations

import re

from bridge.llm.base import TextSink

# Where a call written in the text can begin: a fenced block (text mode's ```tool, a ```json call), or
# the tags some chat templates leak (<tool_call>). A bare JSON object at the very start is held too.
_MARKERS = ("```", "<tool_call")
_OPENERS = ("{", "[")
# An answer that is so far one word, or a word and an opening parenthesis: it may be a call written
# as name(key: "value") (the 0.5B model in text mode), or a tool's bare name. Held until a second word
# shows it is prose, or until the whole answer is read.
_CALL_START = re.compile(r"`?[A-Za-z_][\w.:-]*`?(?:\s*\(.*)?", re.DOTALL)


def shown_part(text: str) -> int:
    """How much of `text` (a streamed answer so far) may be shown: everything before the first place
    where a call may begin, including a marker only partly received ("``" at the end)."""
    stripped = text.lstrip()
    if stripped.startswith(_OPENERS) or _CALL_START.fullmatch(stripped):
        return 0
    end = len(text)
    for marker in _MARKERS:
        found = text.find(marker)
        if found >= 0:
            end = min(end, found)
        # A marker cut off at the end of what has arrived: wait for the rest before deciding.
        for size in range(len(marker) - 1, 0, -1):
            if text.endswith(marker[:size]):
                end = min(end, len(text) - size)
                break
    return end


class HoldBack:
    """Passes on a streamed answer's text up to where a written tool call may begin; from there on
    nothing, until the wrapper that parses the whole answer says what it was (finish())."""

    def __init__(self, outer: TextSink) -> None:
        self.outer = outer
        self._text = ""
        self._sent = 0
        self._held = False

    @property
    def shown(self) -> bool:
        return self.outer.shown

    async def begin(self) -> None:
        self._text, self._sent, self._held = "", 0, False
        await self.outer.begin()

    async def text(self, delta: str) -> None:
        self._text += delta
        if self._held:
            return
        end = shown_part(self._text)
        if end < len(self._text) and any(m in self._text[end:] for m in _MARKERS):
            # A marker is there in full: nothing after it is shown before the answer is complete.
            self._held = True
        if end > self._sent:
            await self.outer.text(self._text[self._sent : end])
            self._sent = end

    async def finish(self, answer: str) -> None:
        """The complete answer as the chat will get it ("" for a call): show what was held back, if
        the answer goes on from what was shown."""
        if not self._text:
            # Nothing streamed (the provider answered whole): there is nothing to finish showing.
            return
        shown = self._text[: self._sent]
        if answer.startswith(shown) and len(answer) > len(shown):
            await self.outer.text(answer[len(shown) :])
            self._sent = len(self._text)
