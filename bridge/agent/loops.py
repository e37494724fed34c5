"""Loop and storm detection: the rules that cut an unproductive run short, whatever the arguments."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from bridge.config import LoopSettings
from bridge.jsonutil import loads
from bridge.llm.base import ToolCall
from bridge.store.sqlite import dumps
from bridge.tools.base import ToolResult

# Which rule ended a run; recorded as `stop_rule` in its trace. max_iterations is the step cap.
StopRule = Literal["repeated_call", "failure_streak", "unavailable_tools", "max_iterations"]
# Result codes of calls the model could not make at all: no such tool, or its group is not loaded.
UNAVAILABLE_CODES = frozenset({"unknown_tool", "not_loaded"})


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

    def repeat(self, calls: tuple[ToolCall, ...]) -> Stop | None:
        """A Stop when one of these calls repeats a call that already succeeded in this run."""
        if not self.settings.stop_on_repeat:
            return None
        repeated = next((c for c in calls if signature(c) in self.succeeded), None)
        if repeated is None:
            return None
        return Stop(
            "repeated_call",
            f"⚠️ I stopped: the model kept calling `{repeated.name}` with the same arguments instead of "
            "answering. Ask again, perhaps in other words.",
        )

    def record(self, call: ToolCall, result: ToolResult) -> Stop | None:
        """Record a call that ran; a Stop when it trips the failure or the unavailable-tools rule."""
        if result.ok:
            self.succeeded.add(signature(call))
            self.failures.clear()
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
