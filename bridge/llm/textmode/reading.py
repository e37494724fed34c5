"""Reading tool calls written as text: the strict text-mode protocol's fenced blocks, and the calls
a native-mode server left in its text (a bare call object, a name alone, `name(key: "value")`)."""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from bridge.jsonutil import loads
from bridge.llm.base import ToolCall

RESERVED_NAMES = frozenset({"tool.result", "tool_result"})
CALL_LABELS = frozenset({"json", "tool"})
# A fence opens at the start of a line (after optional indentation) and closes on a line of its own,
# so inline ``` in prose never starts a block. The body is matched lazily: the first closing fence ends it.
_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w.-]*)[ \t]*\r?\n(.*?)^[ \t]*```[ \t]*$", re.DOTALL | re.MULTILINE)
# The protocol's result marker (textprompt.render_result), as a reply's first thing.
_RESULT_MARK = re.compile(r"^\s*\[tool[._ ]result\b[^\]\n]*\]", re.IGNORECASE)
TOOL_FENCE = re.compile(r"^[ \t]*```[ \t]*tool[ \t]*\r?$", re.IGNORECASE | re.MULTILINE)
_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
_SIGNATURE = re.compile(r"\s*\([^()]*\)\s*$")
# A whole reply that is only a name: `name`, name(), ```name```, name. (fullmatch on the stripped text).
# Also a name written as a function call, name(key: "value"), which small models copy from the tool list.
_BARE_NAME = re.compile(
    r"(?:```(?:tool|json)?\s*|`)?([A-Za-z0-9_.:-]{1,128}?)\s*(?:\(([^()]*)\))?\s*(?:```|`)?\.?", re.IGNORECASE
)
# One key: value (or key=value) pair of such a call; strings in double quotes, or a bare word or number.
_PAIR = re.compile(r'\s*(\w+)\s*[:=]\s*("(?:[^"\\]|\\.)*"|[\w./:+-]+)\s*(?:,|$)')
# A lone value, name(sessions) or name("Europe/Berlin"): the argument of a tool that requires one.
_LONE_VALUE = re.compile(r'"(?:[^"\\]|\\.)*"|[\w./+-]+')

# Whether a name exists (a tool, or a group), loaded or not.
Known = Callable[[str], bool]


class Names(Protocol):
    """What the tool-mode wrappers ask of the tool catalogue (the ToolRegistry is one)."""

    def knows(self, name: str) -> bool: ...

    def is_group(self, name: str) -> bool: ...


def nothing(_name: str) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class Ignored:
    """A fenced block that looked like a call but is not one, and why (kept for traces and tests)."""

    name: str
    reason: Literal["reserved", "not_allowed", "echo", "extra_call"]


@dataclass(frozen=True, slots=True)
class ParsedReply:
    """A model reply split into the one call it makes (if any) and the text around it."""

    call: ToolCall | None
    text: str
    ignored: tuple[Ignored, ...] = ()
    # With a call: the text before its block, and what follows it. The protocol says to stop after the
    # block, so a tail is never the call's real result; small models write one they made up.
    preamble: str = ""
    tail: str = ""

    def without_tail(self) -> ParsedReply:
        """The reply cut at its call block: what follows it is neither shown nor kept."""
        return dataclasses.replace(self, text=self.preamble, tail="") if self.call else self


def parse_reply(text: str, allowed: Collection[str], *, echoes: Collection[str] = ()) -> ParsedReply:
    """The tool call a reply makes under the strict protocol, if any.

    Only a fenced ```json or ```tool block holding one JSON object {"tool_name": ..., "arguments": {...}}
    (or {"name": ..., "arguments": ...}) whose name is in `allowed` is a call. Blocks that repeat a
    tool result seen earlier (`echoes`) are not calls. The first call wins; later call blocks are
    dropped from the text so the transcript never shows a call that did not run. Never raises.
    """
    call: ToolCall | None = None
    start = end = 0  # the span of the call's block
    inside = ""  # what follows the call object inside its block
    ignored: list[Ignored] = []
    drop: list[tuple[int, int]] = []
    for match in _FENCE.finditer(text):
        if match.group(1).lower() not in CALL_LABELS:
            continue
        body = match.group(2).strip()
        found = _as_call(body)
        if found is None:
            continue
        name, arguments = found
        if name in RESERVED_NAMES:
            ignored.append(Ignored(name, "reserved"))
        elif name not in allowed:
            ignored.append(Ignored(name, "not_allowed"))
        elif any(body in echo for echo in echoes):
            ignored.append(Ignored(name, "echo"))
        elif call is not None:
            ignored.append(Ignored(name, "extra_call"))
            drop.append(match.span())
        else:
            call = ToolCall(id=f"call_{uuid.uuid4().hex[:12]}", name=name, arguments=arguments)
            start, end = match.span()
            drop.append((start, end))
            # Anything after the call object inside its own block is a result it made up.
            inside = (_first_value(body) or (None, ""))[1]
    if call is None:
        return ParsedReply(None, text, tuple(ignored))
    tail = "\n".join(part for part in (inside, text[end:].strip()) if part)
    return ParsedReply(call, _without(text, drop), tuple(ignored), preamble=_tidy(text[:start]), tail=tail)


def parse_leaked(text: str, allowed: Collection[str], *, echoes: Collection[str] = ()) -> ParsedReply:
    """For native mode: a call the server did not turn into `tool_calls` and left in the text.

    Either the strict fenced forms, or a reply that is nothing but one bare JSON call object naming a
    tool in `allowed` (what a small model writes when the server's template parser misses it). JSON
    inside prose is never a call. Text after a fenced call is dropped: it can only be a made-up result.
    """
    parsed = parse_reply(text, allowed, echoes=echoes)
    if parsed.call is not None:
        return parsed.without_tail()
    bare = bare_call(text, allowed, echoes)
    return ParsedReply(bare, "") if bare is not None else parsed


def bare_call(text: str, allowed: Collection[str], echoes: Collection[str]) -> ToolCall | None:
    """The call when the whole text is one unfenced call object naming an allowed tool; else None."""
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")) or any(body in echo for echo in echoes):
        return None
    found = _as_call(body)
    if found is None or found[0] in RESERVED_NAMES or found[0] not in allowed:
        return None
    return ToolCall(id=f"call_{uuid.uuid4().hex[:12]}", name=found[0], arguments=found[1])


def _first_value(body: str) -> tuple[Any, str] | None:
    """The first JSON value of a block body and the text after it; None when it starts with none.

    Small models write a call and then, in the same block, results they made up for it.
    """
    try:
        return loads(body), ""
    except ValueError:
        pass
    try:
        value, end = json.JSONDecoder().raw_decode(body)
    except (ValueError, RecursionError):
        return None
    return value, body[end:].strip()


def _as_call(body: str) -> tuple[str, str] | None:
    """(name, arguments JSON) when a block body has the shape of a call; None otherwise."""
    found = _first_value(body)
    if found is None:
        return None
    value = found[0]
    if isinstance(value, list):
        # A list of calls in one block: the first is the call, like the first of several blocks.
        value = value[0] if value else None
    if not isinstance(value, dict):
        return None
    name = value.get("tool_name")
    if name is None:
        name = value.get("name")
        # {"name": ...} alone is ordinary JSON (a person, a file); only with arguments is it a call.
        if not any(key in value for key in ("arguments", "parameters")):
            return None
    if isinstance(name, str):
        # A name copied with its signature from the tool list: "get_current_time(timezone: string)".
        name = _SIGNATURE.sub("", name)
    if not isinstance(name, str) or not _NAME.match(name):
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):
        # Some models encode the arguments twice, as JSON text inside the JSON.
        try:
            arguments = loads(arguments) if arguments.strip() else {}
        except ValueError:
            return None
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return None
    return name, json.dumps(arguments, ensure_ascii=False)


def writes_result(text: str) -> bool:
    """A reply that starts as a tool result does ([tool.result ...]): a small model making one up, or
    writing the marker alone. Never an answer."""
    return _RESULT_MARK.match(text) is not None


def without_calls(text: str) -> str:
    """The text with everything call-shaped taken out, whatever tool it names: fenced call blocks, and
    a text that is nothing but a call object. For a run's last answer, asked for with no tools, which
    a small model still writes as a call: a call is never an answer."""
    spans = [
        match.span()
        for match in _FENCE.finditer(text)
        # A ```tool block belongs to the tool protocol whatever it holds (a call, a made-up result).
        if match.group(1).lower() == "tool"
        or (match.group(1).lower() in CALL_LABELS and _as_call(match.group(2).strip()) is not None)
    ]
    rest = _without(text, spans)
    if writes_result(rest):
        return ""
    return "" if rest.startswith("{") and _as_call(rest) is not None else rest


def bare_name(text: str, allowed: Allowed) -> str | None:
    """The tool's name when the whole reply is nothing but the name of an allowed tool; else None.

    What small models write when they mean to call a tool without arguments. A name inside a
    sentence is never one.
    """
    match = _BARE_NAME.fullmatch(text.strip())
    if match is None:
        return None
    name = match.group(1)
    # Only a tool: a group's name alone ("files") is as likely an answer as a call.
    return name if name not in RESERVED_NAMES and allowed.is_tool(name) else None


def written_arguments(text: str, sole: str | None = None) -> str | None:
    """The arguments of a reply written as name(key: "value", ...), as JSON: "{}" when there are
    none, None when they cannot be read for sure (then nothing is guessed). `sole`: the one argument
    the tool requires, which a lone value such as name(sessions) or name("x") can only mean."""
    match = _BARE_NAME.fullmatch(text.strip())
    inner = (match.group(2) or "").strip() if match else ""
    if not inner:
        return "{}"
    if sole is not None and (value := _LONE_VALUE.fullmatch(inner)) is not None:
        raw = value.group(0)
        return json.dumps({sole: loads(raw) if raw.startswith('"') else raw}, ensure_ascii=False)
    pairs = list(_PAIR.finditer(inner))
    if "".join(p.group(0) for p in pairs).strip() != inner:
        return None
    arguments: dict[str, Any] = {}
    for pair in pairs:
        raw = pair.group(2)
        try:
            arguments[pair.group(1)] = loads(raw) if raw.startswith('"') or raw[0].isdigit() else raw
        except ValueError:
            arguments[pair.group(1)] = raw
    return json.dumps(arguments, ensure_ascii=False)


def _without(text: str, spans: list[tuple[int, int]]) -> str:
    parts, last = [], 0
    for start, end in spans:
        parts.append(text[last:start])
        last = end
    parts.append(text[last:])
    return _tidy("".join(parts))


def _tidy(text: str) -> str:
    return re.sub(r"\n{3,}", "\n\n", text).strip()


class Allowed:
    """The names a written call may name, as a membership test: the offered tools, those a group load
    would activate, and the groups themselves. `is_tool` leaves the groups out."""

    def __init__(self, tools: list[dict[str, Any]], known: Known, groups: Known = nothing) -> None:
        functions = [schema.get("function", schema) for schema in tools]
        self._required = {function.get("name"): _required(function) for function in functions}
        self.active = set(self._required)
        self.known = known
        self.groups = groups

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (self.is_tool(name) or self.groups(name))

    def is_tool(self, name: str) -> bool:
        return name in self.active or self.known(name)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.active)

    def __len__(self) -> int:
        return len(self.active)

    def required(self, name: str) -> list[str]:
        """The arguments an offered tool requires; none for a tool that is not offered."""
        return self._required.get(name, [])


def _required(function: dict[str, Any]) -> list[str]:
    parameters = function.get("parameters")
    required = parameters.get("required") if isinstance(parameters, dict) else None
    return [str(key) for key in required] if isinstance(required, list) else []
