"""`python -m devkit.instant_model PORT`: an OpenAI-compatible model that answers at once, in its own
process; `instant_model()` starts one for a block.

The HTTP and scale-out benchmarks' model: one tool call on a turn's first request, then a final reply,
and a short summary when asked to compact (a request without tools). Nothing is computed, so what the
benchmark measures is Bridge and the HTTP between them. A request with `"stream": true` gets the same
answer as server-sent events, in one chunk, the way agents that always stream (nanobot) read it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import sys
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from devkit.ports import free_port

_ids = itertools.count()


def answer(body: dict[str, Any]) -> dict[str, Any]:
    messages = body.get("messages") or []
    message: dict[str, Any]
    if not body.get("tools"):
        message = {"role": "assistant", "content": "Summary: the user asked for the time, and got it."}
    elif messages and messages[-1].get("role") == "user":
        function = {"name": "get_current_time", "arguments": "{}"}
        call = {"id": f"call_{next(_ids)}", "type": "function", "function": function}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
    else:
        turn = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), "")
        message = {"role": "assistant", "content": f"answer to {turn}"}
    return {
        "id": "instant",
        "object": "chat.completion",
        "model": body.get("model", "instant"),
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def chunks(done: dict[str, Any]) -> list[dict[str, Any]]:
    """A whole answer as the stream's chunks: its message as one delta, then the finish reason with usage."""
    message = dict(done["choices"][0]["message"])
    calls = message.pop("tool_calls", None)
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if calls:
        delta["tool_calls"] = [dict(call, index=i) for i, call in enumerate(calls)]
    head = {"id": done["id"], "object": "chat.completion.chunk", "model": done["model"]}
    finish = "tool_calls" if calls else "stop"
    return [
        {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": done["usage"]},
    ]


async def completions(request: web.Request) -> web.StreamResponse:
    body = json.loads(await request.read())
    done = answer(body)
    if not body.get("stream"):
        return web.json_response(done)
    events = b"".join(b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in chunks(done))
    return web.Response(body=events + b"data: [DONE]\n\n", content_type="text/event-stream")


def main() -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    # The parent reads this line to know the server is up.
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=lambda _: print("ready", flush=True))


@contextlib.asynccontextmanager
async def instant_model() -> AsyncIterator[str]:
    """The instant model in a process of its own, for the block; its base URL."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "devkit.instant_model", str(port), stdout=asyncio.subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        assert line.strip() == b"ready", line
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        await process.wait()


if __name__ == "__main__":
    main()
