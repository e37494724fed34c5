"""Session keys: stable strings such as ``telegram:group:-100123:topic:7`` that name one conversation.

A chat's ids are written as the platform has them; Matrix's hold a ':' (``matrix:dm:@ann:example.org``,
``matrix:group:!abc:example.org:topic:$ev``), which the grammar reads as one id (`MATRIX_ID_RE`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias, cast, get_args

from bridge.errors import SessionKeyError
from bridge.events import Route

Scope: TypeAlias = Literal["main", "dm", "group", "channel", "cron", "hook", "node", "agent"]
Kind: TypeAlias = Literal["main", "group", "cron", "hook", "node", "agent", "other"]

SCOPES: Final[frozenset[str]] = frozenset(get_args(Scope))
KINDS: Final[frozenset[str]] = frozenset(get_args(Kind))
# Words that look like session keys elsewhere (e.g. tool arguments) but never name a session.
RESERVED_KEYS: Final[frozenset[str]] = frozenset({"global", "unknown"})
MAIN: Final = "main"

_KIND_OF_SCOPE: Final[dict[str, Kind]] = {
    "main": "main",
    "dm": "other",
    "group": "group",
    "channel": "group",
    "cron": "cron",
    "hook": "hook",
    "node": "node",
    "agent": "agent",
}
_SURFACE_SCOPES: Final = frozenset({"dm", "group", "channel"})
_SURFACELESS_SCOPES: Final = frozenset({"cron", "hook", "node", "agent"})
_ID_NAMES: Final[dict[str, str]] = {
    "dm": "user id",
    "group": "chat id",
    "channel": "channel id",
    "cron": "job id",
    "hook": "hook id",
    "node": "node id",
    "agent": "parent session id",
}
_NODE_PREFIX: Final = "node-"
_Parts: TypeAlias = tuple[str, str | None, str | None, str | None]  # scope, surface, id, thread id
_TOPIC: Final = "topic"
# A sub-agent's number under its parent session: 1, 2, ... written without leading zeros, so each
# child has exactly one key.
_CHILD_RE: Final = re.compile(r"[1-9][0-9]*")
# Matrix ids (@user:server, !room:server, #alias:server, and $event:server in rooms of versions 1
# and 2) hold a ':' before their server name, which may carry a port (localhost:8008) or be an IPv6
# literal ([::1]:8448). Such an id stands in a chat's key whole: `matrix:dm:@ann:example.org`. A
# server named "topic" is left out, so that ':topic:' still ends a group's id, and each key string
# has one reading (parse(build(key)) == key).
MATRIX_ID_RE: Final = re.compile(
    r"[@!#$+][^:\s]+:(?!topic(?::|$))(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::[0-9]{1,5})?"
)
_SURFACE_RE: Final = re.compile(r"[a-z][a-z0-9_-]*")
# A surface named like a scope or a reserved key would make keys ambiguous or confusing.
_RESERVED_SURFACES: Final[frozenset[str]] = SCOPES | RESERVED_KEYS
_FORMS: Final = (
    "expected 'main', '<surface>:dm:<user_id>', '<surface>:group:<chat_id>[:topic:<thread_id>]', "
    "'<surface>:channel:<channel_id>', 'cron:<job_id>', 'hook:<hook_id>', 'agent:<parent session id>:<n>' "
    "or 'node-<node_id>'"
)


def _error(shown: str, problem: str) -> SessionKeyError:
    return SessionKeyError(f"invalid session key {shown}: {problem}")


@dataclass(frozen=True, slots=True)
class SessionKey:
    """The parts of a session key; always valid, so ``str(key)`` always parses back to an equal key.

    A sub-agent's key (``agent:<parent session id>:<n>``) keeps the parent session's id in ``id`` and
    the child's number in ``thread_id``: the second part under the first, as a topic is under its group.
    """

    scope: Scope
    surface: str | None = None
    id: str | None = None
    thread_id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.scope, str):
            raise TypeError(f"session key scope must be a str, got {type(self.scope).__name__}")
        for name in ("surface", "id", "thread_id"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"session key {name} must be a str or None, got {type(value).__name__}")
        _check(self)

    def __str__(self) -> str:
        return build(self)

    @property
    def kind(self) -> Kind:
        """``main``, ``group`` (groups, topics, channels), ``cron``, ``hook``, ``node``, ``agent``
        (sub-agents) or ``other`` (DMs)."""
        return _KIND_OF_SCOPE[self.scope]


def _surface_problem(surface: str) -> str | None:
    if not surface:
        return "surface is empty"
    if not _SURFACE_RE.fullmatch(surface):
        return f"surface {surface!r} must be lowercase [a-z][a-z0-9_-]*"
    if surface in _RESERVED_SURFACES:
        return f"surface {surface!r} is a reserved word"
    if surface.startswith(_NODE_PREFIX):
        return f"surface {surface!r} would read as a node key"
    return None


def id_problem(name: str, value: str, *, chat: bool = True) -> str | None:
    """What keeps `value` from being an id in a key (None: nothing). A chat's ids (`chat`: a user,
    chat, channel or thread id) may be Matrix ids, colon and all; no other id holds a ':'."""
    if not value:
        return f"{name} is empty"
    if ":" in value and not (chat and MATRIX_ID_RE.fullmatch(value)):
        return f"{name} {value!r} contains ':'"
    if any(char.isspace() for char in value):
        return f"{name} {value!r} contains whitespace"
    return None


def _problem(scope: str, surface: str | None, id_: str | None, thread_id: str | None) -> str | None:
    """What is wrong with these parts, or None when they make a valid key."""
    if scope not in SCOPES:
        return f"unknown scope {scope!r}"
    if scope == MAIN:
        if surface is not None or id_ is not None or thread_id is not None:
            return "'main' takes no surface, id or thread id"
        return None
    if scope == "agent":
        if thread_id is None:
            return "sub-agent number is missing"
        if not thread_id:
            return "sub-agent number is empty"
        if not _CHILD_RE.fullmatch(thread_id):
            return f"sub-agent number {thread_id!r} must be a whole number from 1, without leading zeros"
    elif thread_id is not None and scope != "group":
        return "only group keys take a thread id"
    id_name = _ID_NAMES[scope]
    chat = scope in _SURFACE_SCOPES
    if scope in _SURFACELESS_SCOPES:
        if surface is not None:
            return f"{scope} keys take no surface"
    elif surface is None:
        return "surface is missing"
    else:
        problem = _surface_problem(surface)
        if problem:
            return problem
    if id_ is None:
        return f"{id_name} is missing"
    problem = id_problem(id_name, id_, chat=chat)
    if problem:
        return problem
    if thread_id is not None and scope == "group":
        return id_problem("thread id", thread_id)
    return None


def _check(key: SessionKey) -> None:
    problem = _problem(key.scope, key.surface, key.id, key.thread_id)
    if problem:
        raise _error(repr(key), problem)


def build(key: SessionKey) -> str:
    """The stable string form of ``key``; ``parse(build(key)) == key``."""
    if not isinstance(key, SessionKey):
        raise TypeError(f"build() takes a SessionKey, got {type(key).__name__}")
    _check(key)
    if key.scope == MAIN:
        return MAIN
    if key.scope == "node":
        return f"{_NODE_PREFIX}{key.id}"
    if key.scope == "agent":
        return f"agent:{key.id}:{key.thread_id}"
    if key.scope in _SURFACELESS_SCOPES:
        return f"{key.scope}:{key.id}"
    text = f"{key.surface}:{key.scope}:{key.id}"
    if key.thread_id is not None:
        text += f":{_TOPIC}:{key.thread_id}"
    return text


def _extra(parts: list[str], after: str) -> str:
    if parts == [""]:
        return f"trailing ':' after the {after}"
    return f"unexpected extra part {':'.join(parts)!r} after the {after}"


def _split(text: str) -> _Parts | str:
    """The parts of a non-main, non-node key string, or a description of what is wrong with it."""
    parts = text.split(":")
    head, rest = parts[0], parts[1:]
    if head == MAIN:
        return "'main' takes no further parts"
    if head == "node":
        return "node keys are written 'node-<node_id>'"
    if head in ("cron", "hook"):
        if not rest:
            return f"{_ID_NAMES[head]} is missing"
        if len(rest) > 1:
            return _extra(rest[1:], _ID_NAMES[head])
        return head, None, rest[0], None
    if head == "agent":
        if not rest:
            return f"{_ID_NAMES[head]} is missing"
        if len(rest) == 1:
            return "sub-agent number is missing"
        if len(rest) > 2:
            return _extra(rest[2:], "sub-agent number")
        return head, None, rest[0], rest[1]
    if not rest:
        return _FORMS
    scope, tail = rest[0], rest[1:]
    if scope not in _SURFACE_SCOPES:
        return f"unknown scope {scope!r} (expected dm, group or channel after the surface)"
    id_name = _ID_NAMES[scope]
    if not tail:
        return f"{id_name} is missing"
    taken = _matrix_id(tail)
    id_, tail = ":".join(tail[:taken]), tail[taken:]
    if not tail:
        return scope, head, id_, None
    if tail[0] != _TOPIC:
        return _extra(tail, id_name)
    if scope != "group":
        return "':topic:' is only valid on group keys"
    if len(tail) == 1:
        return "thread id is missing"
    if len(tail) > 2 and not MATRIX_ID_RE.fullmatch(":".join(tail[1:])):
        return _extra(tail[2:], "thread id")
    return scope, head, id_, ":".join(tail[1:])


def _matrix_id(parts: list[str]) -> int:
    """How many of a key's parts after its scope make its id: more than one where they are a Matrix
    id followed by nothing or by ':topic:' (a server is never named "topic", so there is one way)."""
    for count in range(len(parts), 1, -1):
        rest = parts[count:]
        if (not rest or rest[0] == _TOPIC) and MATRIX_ID_RE.fullmatch(":".join(parts[:count])):
            return count
    return 1


def parse(text: str) -> SessionKey:
    """The parts of a session key string; raises SessionKeyError for anything ``build`` would not emit."""
    if not isinstance(text, str):
        raise TypeError(f"parse() takes a str, got {type(text).__name__}")
    return _parse(text)


# Every send is checked against the send policy, which parses the chat's key: the same few keys are
# parsed over and over, and SessionKey is immutable. Invalid keys raise and are never cached.
@functools.lru_cache(maxsize=4096)
def _parse(text: str) -> SessionKey:
    shown = repr(text)
    if not text:
        raise _error(shown, "it is empty")
    if any(char.isspace() for char in text):
        raise _error(shown, "it contains whitespace")
    if text in RESERVED_KEYS:
        raise _error(shown, f"{text!r} is reserved and never names a session")
    if text == MAIN:
        return SessionKey(MAIN)
    if text.startswith(_NODE_PREFIX):
        parts: _Parts | str = ("node", None, text.removeprefix(_NODE_PREFIX), None)
    else:
        parts = _split(text)
    if isinstance(parts, str):
        raise _error(shown, parts)
    problem = _problem(*parts)
    if problem:
        raise _error(shown, problem)
    scope, surface, id_, thread_id = parts
    return SessionKey(cast(Scope, scope), surface, id_, thread_id)


def kind(text_or_key: str | SessionKey) -> Kind:
    """The kind of a key or key string; raises SessionKeyError when the string is not a valid key."""
    if isinstance(text_or_key, SessionKey):
        return text_or_key.kind
    return parse(text_or_key).kind


def main_key() -> SessionKey:
    """The owners' direct chats on every surface."""
    return SessionKey(MAIN)


def dm(surface: str, user_id: str) -> SessionKey:
    """Direct chat with someone other than an owner."""
    return SessionKey("dm", surface, user_id)


def group(surface: str, chat_id: str, thread_id: str | None = None) -> SessionKey:
    """A group chat, or one forum topic of it when ``thread_id`` is given."""
    return SessionKey("group", surface, chat_id, thread_id)


def channel(surface: str, channel_id: str) -> SessionKey:
    """A guild channel; a thread is keyed by its own channel id."""
    return SessionKey("channel", surface, channel_id)


def cron(job_id: str) -> SessionKey:
    """Runs of one scheduled job."""
    return SessionKey("cron", id=job_id)


def hook(hook_id: str) -> SessionKey:
    """Runs of one webhook."""
    return SessionKey("hook", id=hook_id)


def node(node_id: str) -> SessionKey:
    """A node bridge session."""
    return SessionKey("node", id=node_id)


def agent(parent_session_id: str, n: int) -> SessionKey:
    """The `n`th sub-agent (from 1) that a run in the session `parent_session_id` started."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"a sub-agent number must be an int, got {type(n).__name__}")
    return SessionKey("agent", id=parent_session_id, thread_id=str(n))


def route_of_key(key: str) -> Route | None:
    """A chat's address from its session key alone, where the key says all of it: groups, topics and
    channels, and Telegram DMs (a private chat's id is the user's). None for main, other DMs, and
    anything that is not a valid key."""
    try:
        parsed = parse(key)
    except SessionKeyError:
        return None
    if parsed.surface is None or parsed.id is None:
        return None
    if parsed.scope == "group":
        return Route(parsed.surface, parsed.id, parsed.thread_id)
    if parsed.scope == "channel" or (parsed.scope == "dm" and parsed.surface == "telegram"):
        return Route(parsed.surface, parsed.id)
    return None
