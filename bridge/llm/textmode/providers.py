"""The providers that read calls from text: TextModeProvider (the strict text protocol, for a model
without native tool calls) and NativeModeProvider (native calls, plus one a server left in its
text), each holding back what streams until it is known not to be a call."""

from __future__ import annotations

import dataclasses
import itertools
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from bridge.llm.base import ChatMessage, Completion, Provider, TextSink, ToolCall
from bridge.llm.holdback import HoldBack
from bridge.llm.textmode.reading import (
    TOOL_FENCE,
    Allowed,
    Known,
    ParsedReply,
    bare_call,
    bare_name,
    nothing,
    parse_leaked,
    parse_reply,
    without_calls,
    writes_result,
    written_arguments,
)
from bridge.llm.textprompt import ResultRole, render_call, to_text_messages

# Every correction starts with this, so a request can tell that its run already corrected the model.
NOT_RUN = "[Bridge: that was not run."
FENCE_CORRECTION = (
    f"{NOT_RUN} To call a tool, write the JSON inside a fenced block that starts with "
    "```json on its own line and ends with ``` on its own line.]"
)
RESULT_CORRECTION = (
    f"{NOT_RUN} Write the tool block and stop: its result comes back in the next message. "
    "Never write a result yourself.]"
)
# Filled in with the tool's name and, in text mode, the block that calls it.
TEXT_NAME_CORRECTION = (
    NOT_RUN + " A tool's name alone calls nothing. To call {name}, reply with only this block:\n"
    "{block}\nOr answer in plain words.]"
)
# A ```tool block naming a tool that exists nowhere (a small model makes up `remind` or `search`).
UNKNOWN_TOOL_CORRECTION = (
    NOT_RUN + " There is no tool named {name}. Call one of the tools listed, load a group from "
    "'Available Tool Groups' with load_tool_group, or answer in plain words.]"
)
NATIVE_NAME_CORRECTION = (
    NOT_RUN + " A tool's name alone calls nothing. To use {name}, make a tool call (a function call) "
    "to it, or answer in plain words.]"
)
# Output-only marker for tool results in the transcript: never a callable name, whatever the model echoes.


def _results(messages: list[ChatMessage]) -> list[str]:
    return [m.content for m in messages if m.role == "tool"]


def _corrected(messages: list[ChatMessage]) -> bool:
    """Whether the model was already corrected in this run.

    The runner corrects once per run (AgentRunner._loop) and keeps that exchange, the model's reply
    and then a user message starting with NOT_RUN, only in the run's own messages: history never
    holds one, so a pair in the request means this run.
    """
    return any(
        reply.role == "assistant" and note.role == "user" and note.content.startswith(NOT_RUN)
        for reply, note in itertools.pairwise(messages)
    )


def _with_text_call(completion: Completion, parsed: ParsedReply) -> Completion:
    """The completion with the call found in its text as its one tool call, and the rest as its text."""
    if parsed.call is None:
        return completion
    return dataclasses.replace(completion, content=parsed.text, tool_calls=(parsed.call,))


def _named(completion: Completion, name: str, allowed: Allowed, correction: str | None) -> Completion:
    """A reply that is only a tool's name (or name(args)): the correction when there is one, else
    what is safe.

    Without a correction (the run already had its one, or no tools were offered) the name must still
    never be the answer: the tool is called with the arguments written out, or with none when it
    needs none (one that is not offered is only refused by the runner with a hint to load its group).
    Arguments that cannot be read, or a tool that needs some and got none, are not guessed at: the
    text is dropped and the runner says the answer was empty.
    """
    if correction is not None:
        return dataclasses.replace(completion, correction=correction)
    arguments = _arguments_of(completion.content, name, allowed)
    if arguments is None or (arguments == "{}" and allowed.required(name)):
        return dataclasses.replace(completion, content="", tool_calls=())
    call = ToolCall(id=f"call_{uuid.uuid4().hex[:12]}", name=name, arguments=arguments)
    return dataclasses.replace(completion, content="", tool_calls=(call,))


def _arguments_of(text: str, name: str, allowed: Allowed) -> str | None:
    """The arguments a name(...) reply writes out, as JSON (written_arguments); a lone value is the
    tool's one required argument, if it has exactly one."""
    required = allowed.required(name)
    return written_arguments(text, required[0] if len(required) == 1 else None)


def _spelled_out(text: str, name: str, allowed: Allowed) -> bool:
    """Whether a name(...) reply gives arguments that can be read for sure, and not none."""
    return _arguments_of(text, name, allowed) not in (None, "{}")


def _text_name_correction(name: str, allowed: Allowed) -> str:
    # Required arguments are named as placeholders, so the block shows what the tool needs.
    arguments = json.dumps({key: f"<{key}>" for key in allowed.required(name)})
    block = render_call(ToolCall(id="", name=name, arguments=arguments))
    return TEXT_NAME_CORRECTION.format(name=name, block=block)


class TextModeProvider:
    """Wraps any Provider so a model without native tool calling uses the strict text protocol."""

    def __init__(
        self,
        inner: Provider,
        *,
        known: Known = nothing,
        groups: Known = nothing,
        result_role: ResultRole = "tool",
    ) -> None:
        self.inner = inner
        # Tools that exist but are not loaded still count as calls, so the runner can answer
        # "load its group first" instead of the model's block being shown to the user as text; so do
        # groups written as a call, which the runner answers with how to load them.
        self._known, self._groups = known, groups
        self._result_role = result_role

    async def complete(
        self, messages: list[ChatMessage], tools: list[dict[str, Any]], sink: TextSink | None = None
    ) -> Completion:
        text_messages = to_text_messages(messages, tools, self._result_role)
        return await _held_back(
            lambda out: self.inner.complete(text_messages, [], *out),
            lambda completion: self._read(messages, tools, completion),
            sink,
        )

    def _read(
        self, messages: list[ChatMessage], tools: list[dict[str, Any]], completion: Completion
    ) -> Completion:
        allowed = Allowed(tools, self._known, self._groups)
        if completion.tool_calls:
            # A server that parsed calls natively anyway: still at most one, and only a permitted name.
            native = next((c for c in completion.tool_calls if c.name in allowed), None)
            return dataclasses.replace(completion, tool_calls=(native,) if native else ())
        echoes = _results(messages)
        # A malformed call is corrected once per run (see AgentRunner._loop). After that, and in a
        # request with no tools (a run's last, whose correction the runner ignores), it degrades to
        # what is safe: its call runs, and neither the call nor a made-up result is ever the answer.
        correct = bool(tools) and not _corrected(messages)
        parsed = parse_reply(completion.content, allowed, echoes=echoes)
        if parsed.call is not None:
            if parsed.tail and correct:
                return dataclasses.replace(completion, correction=RESULT_CORRECTION)
            return _with_text_call(completion, parsed.without_tail())
        if writes_result(completion.content):
            # A result made up, or its marker alone ("[tool.result]"): the model is told once that
            # results come from Bridge; after that it is no answer (the runner says the model gave none).
            if correct:
                return dataclasses.replace(completion, correction=RESULT_CORRECTION)
            return dataclasses.replace(completion, content="")
        bare = bare_call(completion.content, allowed, echoes)
        if bare is not None:
            # Only a fenced block is a call, but this is close enough that the model is told how to
            # write it; a second one in the run is plainly meant as a call, and runs.
            if correct:
                return dataclasses.replace(completion, correction=FENCE_CORRECTION)
            return _with_text_call(completion, ParsedReply(bare, ""))
        name = bare_name(completion.content, allowed)
        if name is not None:
            # Written out with its arguments (name(key: "value")), read for sure, the call is plainly
            # meant: it runs. Corrected first, the 0.5B model wrote the name alone next, and the
            # arguments were lost (the time in UTC for "the time in Tokyo").
            spelled = _spelled_out(completion.content, name, allowed)
            correction = _text_name_correction(name, allowed) if correct and not spelled else None
            return _named(completion, name, allowed, correction)
        made_up = next((i.name for i in parsed.ignored if i.reason == "not_allowed"), None)
        if made_up is not None and TOOL_FENCE.search(completion.content):
            # A ```tool block is the protocol's, never an answer: the model is told once that the
            # tool does not exist; after that the block is dropped, and what is left is the answer.
            if correct:
                return dataclasses.replace(
                    completion, correction=UNKNOWN_TOOL_CORRECTION.format(name=made_up)
                )
            return dataclasses.replace(completion, content=without_calls(completion.content))
        # Offered no tools (a run's last request): whatever is call-shaped is not the answer.
        return completion if tools else _answer_only(completion)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _answer_only(completion: Completion) -> Completion:
    """A last answer as the chat may see it: everything call-shaped taken out (without_calls)."""
    answer = without_calls(completion.content)
    return completion if answer == completion.content else dataclasses.replace(completion, content=answer)


class NativeModeProvider:
    """Native tool calls, plus the one call a server left in the text when its parser missed it."""

    def __init__(self, inner: Provider, *, known: Known = nothing, groups: Known = nothing) -> None:
        self.inner = inner
        self._known, self._groups = known, groups

    async def complete(
        self, messages: list[ChatMessage], tools: list[dict[str, Any]], sink: TextSink | None = None
    ) -> Completion:
        # A call leaked into the text is held back as it streams, as in text mode, in every answer:
        # offered no tools (a run's last request), a small model still writes one, and it must never
        # stream as the answer.
        return await _held_back(
            lambda out: self.inner.complete(messages, tools, *out),
            lambda completion: self._read(messages, tools, completion),
            sink,
        )

    def _read(
        self, messages: list[ChatMessage], tools: list[dict[str, Any]], completion: Completion
    ) -> Completion:
        if completion.tool_calls:
            return completion
        if not tools:
            # Offered no tools (a run's last request), a call in the text is never run and never the
            # answer: what streams, and what is stored, is the text without it.
            return _answer_only(completion)
        allowed = Allowed(tools, self._known, self._groups)
        parsed = parse_leaked(completion.content, allowed, echoes=_results(messages))
        if parsed.call is not None:
            return _with_text_call(completion, parsed)
        name = bare_name(completion.content, allowed)
        if name is not None:
            spelled = _spelled_out(completion.content, name, allowed)
            correct = not _corrected(messages) and not spelled
            correction = NATIVE_NAME_CORRECTION.format(name=name) if correct else None
            return _named(completion, name, allowed, correction)
        return completion

    async def aclose(self) -> None:
        await self.inner.aclose()


async def _held_back(
    ask: Callable[[tuple[TextSink, ...]], Awaitable[Completion]],
    read: Callable[[Completion], Completion],
    sink: TextSink | None,
) -> Completion:
    """Ask (streaming into `sink` through a HoldBack, if there is a sink), read the answer, then show
    what was held back when the answer is text rather than a call. The inner provider gets a sink
    argument only when there is one, as a provider written before streaming takes none."""
    held = HoldBack(sink) if sink is not None else None
    answer = read(await ask((held,) if held is not None else ()))
    if held is not None and not answer.tool_calls and answer.correction is None:
        await held.finish(answer.content)
    return answer
