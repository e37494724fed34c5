"""Time to the first visible word and to the whole reply, streamed and not, on a real model server."""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench.common import table
from bridge.config.llm import LLMSettings
from bridge.llm.base import ChatMessage
from bridge.llm.openai import OpenAIProvider

PROMPTS = (
    "Describe the sea in four sentences.",
    "Give me three tips for a first trip to Japan, one line each.",
    "Explain what a database index is, in one paragraph.",
)


class _FirstText:
    """A TextSink that notes when the first piece of text arrived."""

    def __init__(self) -> None:
        self.first: float | None = None

    @property
    def shown(self) -> bool:
        return self.first is not None

    async def begin(self) -> None:
        return None

    async def text(self, delta: str) -> None:
        if self.first is None and delta.strip():
            self.first = time.perf_counter()


async def measure(base_url: str, model: str, *, repeat: int = 1, max_tokens: int = 160) -> dict[str, Any]:
    """Each prompt asked streamed and not, `repeat` times; the medians of both times, in seconds.

    Without a stream the first word shows when the whole reply does. Asked through Bridge's own
    provider, as a chat does (no tools: the time is the model's, not a tool's).
    """
    settings = LLMSettings(
        base_url=base_url, model=model, temperature=0, max_tokens=max_tokens, timeout_s=300, max_retries=0
    )
    provider = OpenAIProvider(settings)
    rows: dict[str, list[tuple[float, float]]] = {"streamed": [], "whole": []}
    try:
        for _ in range(repeat):
            for prompt in PROMPTS:
                messages = [ChatMessage("user", prompt)]
                started = time.perf_counter()
                sink = _FirstText()
                await provider.complete(messages, [], sink)
                done = time.perf_counter()
                rows["streamed"].append(((sink.first or done) - started, done - started))
                started = time.perf_counter()
                await provider.complete(messages, [])
                done = time.perf_counter()
                rows["whole"].append((done - started, done - started))
    finally:
        await provider.aclose()
    result = {
        kind: {
            "first_visible_s": round(statistics.median(t[0] for t in times), 2),
            "full_reply_s": round(statistics.median(t[1] for t in times), 2),
            "samples": len(times),
        }
        for kind, times in rows.items()
    }
    cells = [[kind, r["first_visible_s"], r["full_reply_s"], r["samples"]] for kind, r in result.items()]
    print(table(f"Streaming on {model}: medians", ["reply", "first word s", "whole reply s", "n"], cells))
    return result
