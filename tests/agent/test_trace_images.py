"""A run's trace keeps images out of the requests it records, and copies only requests that carry one."""

from __future__ import annotations

import base64
import json
from typing import Any

from bridge.agent.trace import RunTrace
from bridge.llm.base import ChatMessage, Completion, Image
from bridge.llm.openai import serialize_message
from tests.media.samples import PNG


def traced(messages: list[ChatMessage]) -> tuple[RunTrace, dict[str, Any]]:
    """A trace of one model request with these messages, the body as the OpenAI provider sent it."""
    body = {"model": "m", "messages": [serialize_message(m) for m in messages]}
    trace = RunTrace("run", "session", "main", "test", "hash")
    trace.model_call(RunTrace.clock(), messages, [], Completion("ok", request=body))
    return trace, body


def test_a_request_with_an_image_is_traced_with_its_size_in_place_of_its_bytes() -> None:
    photo = Image("p.png", "image/png", "a" * 64, data=PNG)
    trace, body = traced([ChatMessage("user", "what is this?", images=(photo,))])

    stored = trace.to_json("ok", {}, lambda text: text)

    encoded = base64.b64encode(PNG).decode()
    assert encoded in json.dumps(body)  # the request itself went whole
    assert encoded not in stored
    assert f"data:image/png;base64,<{len(encoded)} characters>" in stored


def test_a_request_without_images_is_traced_as_sent_without_a_copy() -> None:
    # An image known only by name (no bytes read for this request) is text, not an image part.
    named = Image("old.png", "image/png", "b" * 64)
    trace, body = traced([ChatMessage("system", "be brief"), ChatMessage("user", "hi", images=(named,))])

    assert trace.steps[0]["request"] is body
