"""The soak's fake model: uses tools as each message's text asks, then answers naming what it answers."""

from __future__ import annotations

import asyncio
import itertools
import random
import re
from dataclasses import dataclass, field
from typing import Any

from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import Reply

# What a message asks the model to do before answering: one list of tool calls per model step.
# The plan travels in the message's own text ("m0042-g1-sessions"), so a run after a restart, which
# sees only the stored history, does what the interrupted one would have done.
Call = tuple[str, dict[str, Any]]
PLANS: dict[str, list[list[Call]]] = {
    "plain": [],
    "time": [[("get_current_time", {})]],
    "memory": [[("save_memory", {"content": "{text} was said"})]],
    "sessions": [[("load_tool_group", {"group_name": "sessions"})], [("sessions_list", {"limit": 5})]],
    # Two calls in one step, and two steps of one call each.
    "pair": [[("get_current_time", {}), ("save_memory", {"content": "pair {text}"})]],
    "twostep": [[("get_current_time", {})], [("save_memory", {"content": "step {text}"})]],
}
PLAN_WEIGHTS = {"plain": 35, "time": 20, "memory": 12, "sessions": 11, "pair": 11, "twostep": 11}
LONG = "long"
# Paragraphs of a long answer: about 9,000 characters, so Telegram gets it as three chunks.
LONG_PARAGRAPHS = 24
FILLER = "lorem ipsum dolor sit amet consectetur " * 9
ANSWER_PREFIX = "answer to: "
# A soak voice note is these bytes and then its words: the fake transcription reads them back.
VOICE_MAGIC = b"OggS-soak:"


def plan_of(text: str) -> list[list[Call]]:
    """The tool steps a message's text asks for: its tag after the chat label, e.g. m0007-dm-time
    (after the name of an attachment, e.g. "[image: photo-7.jpg]\nm0007-dm-time")."""
    found = re.search(r"m\d{4}-[a-z0-9]+-([a-z]+)", text)
    return PLANS.get(found.group(1), []) if found else []


def answer_for(asked: list[str]) -> str:
    """The answer naming every message it answers; a long one when the newest asks for it."""
    answer = ANSWER_PREFIX + ", ".join(asked)
    if asked and asked[-1].endswith("-" + LONG):
        paragraphs = [f"{asked[-1]} paragraph {i}: {FILLER.strip()}." for i in range(LONG_PARAGRAPHS)]
        answer += "\n\n" + "\n\n".join(paragraphs)
    return answer


@dataclass
class SoakModel:
    """A FakeOpenAI script. Each request waits a random moment, so a kill can land while it is open."""

    rng: random.Random
    min_delay_s: float = 0.02
    max_delay_s: float = 0.4
    open: int = 0
    # Transcriptions in progress (a kill may be aimed at one).
    transcribing: int = 0
    requests: int = 0
    # Requests that ended with the bot's own answer: a run re-answering what was answered.
    answered_last: list[str] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    async def __call__(self, body: dict[str, Any]) -> Reply:
        self.requests += 1
        self.open += 1
        try:
            await asyncio.sleep(self.rng.uniform(self.min_delay_s, self.max_delay_s))
            return self.reply(body.get("messages") or [])
        finally:
            self.open -= 1

    async def transcribe(self, audio: bytes) -> str:
        """The words a soak voice note carries, after a random moment (a kill may land meanwhile)."""
        self.transcribing += 1
        try:
            await asyncio.sleep(self.rng.uniform(self.min_delay_s, self.max_delay_s))
        finally:
            self.transcribing -= 1
        return audio.removeprefix(VOICE_MAGIC).decode()

    def reply(self, messages: list[dict[str, Any]]) -> Reply:
        last = messages[-1] if messages else {}
        if last.get("role") == "assistant" and not last.get("tool_calls"):
            self.answered_last.append(str(last.get("content"))[:120])
        # The messages this answer covers: the user's since the bot's last answer.
        asked: list[str] = []
        for message in messages:
            if message.get("role") == "assistant" and not message.get("tool_calls"):
                asked = []
            elif message.get("role") == "user":
                asked.append(str(message.get("content")))
        newest = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
        if newest < 0:
            return fake.text("answer to: (no message)")
        done = sum(1 for m in messages[newest + 1 :] if m.get("role") == "assistant" and m.get("tool_calls"))
        plan = plan_of(asked[-1] if asked else "")
        if done < len(plan):
            text = asked[-1]
            calls = [
                fake.tool_call(
                    name,
                    {k: v.format(text=text) if isinstance(v, str) else v for k, v in args.items()},
                    f"call_soak{next(self._ids)}",
                )
                for name, args in plan[done]
            ]
            return calls[0] if len(calls) == 1 else fake.tool_calls(*calls)
        return fake.text(answer_for(asked))
