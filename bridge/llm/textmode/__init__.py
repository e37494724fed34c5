"""Tool calls written as text: `reading.py` finds them (the strict text-mode protocol's fenced blocks,
and calls a native-mode server left in its text); `providers.py` holds the providers that wrap a
model with it, and the corrections they send.
"""

from bridge.llm.textmode.providers import (
    FENCE_CORRECTION,
    NATIVE_NAME_CORRECTION,
    NOT_RUN,
    RESULT_CORRECTION,
    TEXT_NAME_CORRECTION,
    UNKNOWN_TOOL_CORRECTION,
    NativeModeProvider,
    TextModeProvider,
)
from bridge.llm.textmode.reading import Names, parse_leaked, parse_reply, without_calls

__all__ = [
    "FENCE_CORRECTION",
    "NATIVE_NAME_CORRECTION",
    "NOT_RUN",
    "RESULT_CORRECTION",
    "TEXT_NAME_CORRECTION",
    "UNKNOWN_TOOL_CORRECTION",
    "Names",
    "NativeModeProvider",
    "TextModeProvider",
    "parse_leaked",
    "parse_reply",
    "without_calls",
]
