"""Config of [agent] and [agent.loops]: the system prompt, the run's limits, history and loops."""

from __future__ import annotations

from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator, model_validator

from bridge.config.base import Section

DEFAULT_SYSTEM_PROMPT = (
    "You are Bridge, a helpful assistant reachable from chat apps. Answer concisely. "
    "Use tools when they help; after a tool result, answer the user instead of calling the same tool again."
)
# How a run cut short asks for its answer (LoopSettings.last_request).
LastRequest = Literal["history", "question"]


class LoopSettings(Section):
    """When a run is cut short for going in circles (one last request, without tools, gets the answer)."""

    # A call identical (name and normalised arguments) to one that already succeeded in the run is not
    # run again, and the run stops: it can only return what the model already has.
    stop_on_repeat: bool = True
    # Failing calls in a row, whatever the tools or arguments, that stop a run; 0 never stops.
    max_failures_in_a_row: int = Field(3, ge=0, le=100)
    # Calls of unknown tools, or of tools whose group is not loaded, that stop a run; 0 never stops.
    max_unavailable_calls: int = Field(2, ge=0, le=100)
    # The shape of that last request. "history": the turn as it went (the calls and their results),
    # then the instruction. "question": the turn's calls folded into one message, the question again
    # with what the tools returned, which small models answer where they would copy a call
    # (measured in docs/local-model.md; `bridge chat` on the local model uses it).
    last_request: LastRequest = "history"


class AgentSettings(Section):
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    max_iterations: int = Field(12, ge=1, le=200)
    loops: LoopSettings = Field(default_factory=LoopSettings)
    history_limit: int = Field(60, ge=2, le=10_000)
    # A character budget for the replayed history, so a long session never outgrows the model's
    # context (about 4 characters a token); the oldest turns are left out first.
    history_max_chars: int = Field(48_000, ge=1_000)
    # Past history_max_chars or history_limit, the oldest whole turns are summarised by the model
    # (after the reply is sent) and the summary replayed in their place; false only leaves them out.
    compaction: bool = True
    max_tool_result_chars: int = Field(8_000, ge=200)
    run_timeout_s: float = Field(300.0, gt=0)
    memory_limit: int = Field(20, ge=0, le=500)
    timezone: str = "UTC"
    # Sub-agents (spawn_agent) running at once for the chat where a chain began, however many runs
    # started them there; 0 turns spawn_agent off. Each takes a run slot ([runs] max_concurrent_runs).
    max_subagents: int = Field(3, ge=0, le=20)
    # How long spawn_agent(wait=true) waits for the sub-agent's answer; past it the sub-agent goes
    # on, and its answer is posted in the parent's chat when it is done.
    subagent_wait_s: float = Field(120.0, gt=0, le=600)

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        if isinstance(data, dict) and "max_concurrent_runs" in data:
            raise ValueError("max_concurrent_runs has moved to [runs] max_concurrent_runs")
        return data

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        # A folder of the zone database such as 'Europe' raises IsADirectoryError, an OSError.
        except (ZoneInfoNotFoundError, ValueError, OSError):
            raise ValueError(f"{value!r} is not an IANA time zone such as 'Europe/Berlin'") from None
        return value
