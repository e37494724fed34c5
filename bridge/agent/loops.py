"""Runs cut short: the loop and storm rules (whatever the arguments), and how the last answer is asked."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from bridge.agent.history import truncate
from bridge.config.agent import LastRequest, LoopSettings
from bridge.jsonutil import loads
from bridge.llm.base import ChatMessage, ToolCall
from bridge.llm.textmode import without_calls
from bridge.store.messages import dumps
from bridge.tools.base import ToolResult
from bridge.tools.builtin.core import LOAD_TOOL_GROUP

# Which rule ended a run; recorded as `stop_rule` in its trace. max_iterations is the step cap.
StopRule = Literal["repeated_call", "failure_streak", "unavailable_tools", "max_iterations"]
# Result codes of calls the model could not make at all: no such tool, or its group is not loaded.
UNAVAILABLE_CODES = frozenset({"unknown_tool", "not_loaded"})
# The last request of a run cut short: no tools, an answer.
FINAL_REQUEST = (
    "[Bridge: no more tool calls are possible for this request.] Using only the tool results above, "
    "give your final answer to my last message now, in plain text."
)
# The same, after the question and the results in one message ([agent.loops] last_request = "question").
FINAL_QUESTION = (
    "[Bridge: no more tool calls are possible.] Using only these tool results, answer my question "
    "above now, in plain words."
)
# Tool results of the turn repeated in the last request, newest last.
FINAL_RESULTS = 3
# Lines of a result rendered generically in a reply the model did not write.
GENERIC_LINES = 20
# The echo rule: a call whose arguments are this many or more fields of an earlier result.
ECHO_MIN_FIELDS = 2


@dataclass(frozen=True, slots=True)
class Stop:
    """Why a run stops: the rule, and the reply when the last request for an answer gives none."""

    rule: StopRule
    message: str


def signature(call: ToolCall) -> tuple[str, str]:
    """A call's identity: its name and its arguments with key order, nulls and outer spaces normalised."""
    try:
        return call.name, dumps(_normalised(loads(call.arguments or "{}")))
    except ValueError:
        return call.name, call.arguments.strip()


def _normalised(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _normalised(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_normalised(item) for item in value]
    return value.strip() if isinstance(value, str) else value


@dataclass(slots=True)
class LoopGuard:
    """The state of one run's calls, checked against the [agent.loops] rules.

    - A call identical to **any** call that succeeded earlier in the run is not run again: whatever
      lies between (A-B-A-B), it can only return what the model already has.
    - Failing calls in a row, of any tools with any arguments: a storm of errors (RFC-044's 61 failing
      calls) ends after a few.
    - Calls of tools that do not exist or are not loaded, counted over the run: a model that invents
      tool names with a new id each time never gets closer to an answer.
    """

    settings: LoopSettings
    succeeded: set[tuple[str, str]] = field(default_factory=set)
    failures: list[ToolCall] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)
    # The JSON-object results of the run's successful calls, for the echo rule.
    results: list[dict[str, Any]] = field(default_factory=list)

    def repeat(self, calls: tuple[ToolCall, ...]) -> Stop | None:
        """A Stop when one of these calls repeats a call that already succeeded in this run, or
        echoes a result of one: its arguments are fields of that result, which the model already has
        (the 0.5B model passed get_current_time's result back as its next call's arguments)."""
        if not self.settings.stop_on_repeat:
            return None
        repeated = next((c for c in calls if signature(c) in self.succeeded), None)
        if repeated is not None:
            return Stop(
                "repeated_call",
                f"⚠️ I stopped: the model kept calling `{repeated.name}` with the same arguments "
                "instead of answering. Ask again, perhaps in other words.",
            )
        echoed = next((c for c in calls if self._echoes(c)), None)
        if echoed is not None:
            return Stop(
                "repeated_call",
                f"⚠️ I stopped: the model called `{echoed.name}` with a result it already had instead "
                "of answering. Ask again, perhaps in other words.",
            )
        return None

    def _echoes(self, call: ToolCall) -> bool:
        """Whether the call's arguments, two or more of them, are all fields of an earlier result,
        with the same values. One alone is too common a coincidence (`timezone: UTC`)."""
        try:
            args = loads(call.arguments or "{}")
        except ValueError:
            return False
        if not isinstance(args, dict) or len(args) < ECHO_MIN_FIELDS:
            return False
        return any(all(k in r and r[k] == v for k, v in args.items()) for r in self.results)

    def record(self, call: ToolCall, result: ToolResult) -> Stop | None:
        """Record a call that ran; a Stop when it trips the failure or the unavailable-tools rule."""
        if result.ok:
            self.succeeded.add(signature(call))
            self.failures.clear()
            try:
                data = loads(result.content)
            except ValueError:
                data = None
            if isinstance(data, dict):
                self.results.append(data)
            return None
        self.failures.append(call)
        if result.code in UNAVAILABLE_CODES:
            self.unavailable.append(call.name)
        limit = self.settings.max_unavailable_calls
        if limit and len(self.unavailable) >= limit:
            names = ", ".join(f"`{name}`" for name in dict.fromkeys(self.unavailable))
            return Stop(
                "unavailable_tools",
                f"⚠️ I stopped: the model asked {len(self.unavailable)} times for tools that are not "
                f"available here ({names}). Ask again, perhaps in other words.",
            )
        limit = self.settings.max_failures_in_a_row
        if limit and len(self.failures) >= limit:
            names = ", ".join(f"`{name}`" for name in dict.fromkeys(c.name for c in self.failures))
            return Stop(
                "failure_streak",
                f"⚠️ I stopped: tool calls failed {len(self.failures)} times in a row ({names}). "
                f"Last error: {result.content}",
            )
        return None


# Says a tool's successful result in plain words (Tool.plain); None where the tool has no words of
# its own, and the result is rendered generically.
Plain = Callable[[str, str], str | None]


# Where the reply of a run cut short came from; recorded as `answered_from` in its trace.
AnswerSource = Literal["model", "tool_result", "rule"]


def last_answer(
    content: str | None, stop: Stop, messages: list[ChatMessage], plain: Plain
) -> tuple[str, AnswerSource]:
    """The reply of a run cut short, and where it came from: the model's last answer, unless there is none.

    Offered no tools, a small model still writes a call (fenced or bare) more often than not, or
    repeats the question. Neither is an answer. The user then gets what the tools found, in plain
    words, which is often all they asked for (the time somewhere, a file's text); why the run stopped
    goes to its trace and /status. Only with nothing in hand is the reply the rule's own message.
    """
    answer = without_calls(content) if content is not None else ""
    if answer and not _echoes_question(answer, messages):
        return answer, "model"
    found = in_words(messages, plain)
    return (found, "tool_result") if found else (stop.message, "rule")


def in_words(messages: list[ChatMessage], plain: Plain) -> str:
    """The newest successful tool result of the turn, said in plain words, never as raw JSON; "" if
    the turn has none."""
    for message in reversed(messages):
        if _from_person(message):
            return ""
        if _useful(message):
            name = message.name or "the tool"
            return plain(name, message.content) or _generic(name, message.content)
    return ""


def _generic(name: str, content: str) -> str:
    """A result with no words of its own: its fields as lines, or its text, shortened."""
    try:
        data = loads(content)
    except ValueError:
        return f"Here is what {name} returned:\n{truncate(content, 1500)}"
    lines = list(_lines(data))
    shown = lines[:GENERIC_LINES] + (
        [f"… and {len(lines) - GENERIC_LINES} more"] if len(lines) > GENERIC_LINES else []
    )
    return f"Here is what {name} found:\n" + "\n".join(shown)


def _lines(data: Any, prefix: str = "") -> Iterator[str]:
    """`- key: value` lines of a JSON value, nested keys joined with dots, values kept short."""
    if isinstance(data, dict):
        if not data:
            yield f"- {prefix or 'result'}: (empty)"
        for key, value in data.items():
            yield from _lines(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(data, list):
        if not data:
            yield f"- {prefix or 'result'}: (none)"
        for index, value in enumerate(data, 1):
            yield from _lines(value, f"{prefix} {index}" if prefix else f"{index}")
    else:
        text = "" if data is None else str(data)
        yield f"- {prefix}: {truncate(' '.join(text.split()), 200)}" if prefix else f"- {text}"


def last_request(messages: list[ChatMessage], max_chars: int, shape: LastRequest) -> list[ChatMessage]:
    """The conversation of a run's last request (after its system prompt): no more tools, an answer.

    Small models lose the results behind their own repeated calls, so the newest few are said again
    right before the instruction. "history" keeps the turn as it went and adds them in a message of
    their own; "question" folds the turn's calls into the question's message, so the request ends
    with the question, what the tools returned and the instruction, and holds no call to copy.
    """
    asked = next((i for i in range(len(messages) - 1, -1, -1) if _from_person(messages[i])), None)
    results = [] if asked is None else [m for m in messages[asked + 1 :] if m.role == "tool"]
    if asked is None or not results:
        return [*messages, ChatMessage("user", FINAL_REQUEST)]
    # What answers the question, where there is any: a run stopped by three failed calls in a row
    # would otherwise repeat only the failures, and the model answers about them (measured on the
    # 1.5B: "You cannot send a message to yourself." for "list my sessions").
    useful = [m for m in results if _useful(m)] or results
    found = "".join(f"\n- {m.name}: {truncate(m.content, max_chars // 4)}" for m in useful[-FINAL_RESULTS:])
    # The instruction comes last: small models continue from the end, and echo a question put there.
    if shape == "question":
        question = messages[asked]
        folded = f"{question.content}\n\nWhat the tools returned:{found}\n\n{FINAL_QUESTION}"
        return [*messages[:asked], replace(question, content=folded)]
    return [*messages, ChatMessage("user", f"What the tools returned:{found}\n\n{FINAL_REQUEST}")]


def _echoes_question(answer: str, messages: list[ChatMessage]) -> bool:
    """The answer only repeats the user's last message, as small models do when they have nothing."""
    asked = next((m.content for m in reversed(messages) if _from_person(m)), None)
    return asked is not None and " ".join(answer.split()).casefold() == " ".join(asked.split()).casefold()


def _useful(message: ChatMessage) -> bool:
    """A tool result that may answer something: it succeeded, and is not a group loaded (a step
    towards an answer, never one)."""
    return (
        message.role == "tool"
        and message.name != LOAD_TOOL_GROUP
        and not message.content.startswith(("Error [", "Not run:"))
    )


def _from_person(message: ChatMessage) -> bool:
    # The runner's own corrections are user messages too; they start with "[Bridge:".
    return message.role == "user" and not message.content.startswith("[Bridge:")
