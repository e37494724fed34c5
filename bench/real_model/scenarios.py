"""What the real-model bench asks: scripted chats, each turn with the facts its answer must hold."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo


@dataclass(frozen=True, slots=True)
class Fact:
    """Something a turn must get right: a regex (case-insensitive) on its answer, on a workspace file,
    or on the memories the chat saved."""

    label: str
    pattern: str
    file: str | None = None
    memory: bool = False


@dataclass(frozen=True, slots=True)
class Turn:
    """One user message, and the facts (computed when the turn ends: the time moves) it must deliver.

    `label` names the turn in the newcomer table; a message starting with "/" is a command, which
    starts no run and has no facts.
    """

    text: str
    facts: Callable[[], tuple[Fact, ...]] = lambda: ()
    label: str = ""

    @property
    def command(self) -> bool:
        return self.text.startswith("/")


def hour_pattern(zone: str, at: datetime | None = None) -> str:
    """A clock time in `zone` within an hour of now (a turn may straddle the hour), 24- or 12-hour form."""
    now = (at or datetime.now(UTC)).astimezone(ZoneInfo(zone))
    forms = []
    for hour in sorted({(now.hour + delta) % 24 for delta in (-1, 0, 1)}):
        half = "pm" if hour >= 12 else "am"
        # ':' and digits may not precede it: "T14:05:33" matches 14:05, never 05:33.
        forms.append(rf"(?<![\d:])0?{hour}:[0-5]\d(?!\s*[ap]\.?m)")
        forms.append(rf"(?<![\d:]){hour % 12 or 12}(?::[0-5]\d)?\s*{half[0]}\.?{half[1]}\b")
    return "|".join(forms)


def clock(label: str, zone: str) -> Callable[[], tuple[Fact, ...]]:
    return lambda: (Fact(label, hour_pattern(zone)),)


def clocks(*zones: tuple[str, str]) -> Callable[[], tuple[Fact, ...]]:
    return lambda: tuple(Fact(label, hour_pattern(zone)) for label, zone in zones)


def facts(*items: Fact) -> Callable[[], tuple[Fact, ...]]:
    return lambda: items


# Groups loaded in one turn and used in later ones; files written in one turn and read in the next;
# the time in two zones. Each scenario is one fresh chat (its own database and workspace).
CHATS: dict[str, list[Turn]] = {
    "groups": [
        Turn("Load the sessions tools and list my sessions.", facts(Fact("lists main", r"\bmain\b"))),
        Turn("How many chat sessions do I have?", facts(Fact("one session", r"\b(1|one)\b"))),
        Turn("List my sessions once more.", facts(Fact("lists main", r"\bmain\b"))),
    ],
    "files": [
        Turn(
            "Write a file notes.txt containing: the launch code is 4711",
            facts(Fact("notes.txt on disk", r"4711", file="notes.txt")),
        ),
        Turn("What does notes.txt say?", facts(Fact("reads 4711", r"4711"))),
    ],
    "time": [
        Turn(
            "What time is it in Tokyo and in New York?",
            clocks(("Tokyo time", "Asia/Tokyo"), ("New York time", "America/New_York")),
        ),
        Turn("And in London?", clock("London time", "Europe/London")),
    ],
    "mixed": [
        Turn(
            "Save a file todo.txt with the text: buy milk",
            facts(Fact("todo.txt on disk", r"buy milk", file="todo.txt")),
        ),
        Turn("What time is it in UTC?", clock("UTC time", "UTC")),
        Turn("Read todo.txt back to me.", facts(Fact("reads milk", r"milk"))),
    ],
}

# What a newcomer asks first (issue 35): the time somewhere, a fact kept across /clear, a file written
# and read back, and a question that needs no tool. Each is a fresh chat too.
NEWCOMER: dict[str, list[Turn]] = {
    "first-question": [
        Turn("What time is it in Tokyo right now?", clock("Tokyo time", "Asia/Tokyo"), "time in Tokyo"),
    ],
    "remember": [
        Turn(
            "Remember this: my locker number is 4711.",
            facts(Fact("saved to memory", r"4711", memory=True)),
            "fact saved",
        ),
        Turn("/clear"),
        Turn("What is my locker number?", facts(Fact("recalls 4711", r"4711")), "recalled after /clear"),
    ],
    "write-read": [
        Turn(
            "Write a file called shopping.txt containing: eggs, flour, sugar",
            facts(Fact("shopping.txt on disk", r"flour", file="shopping.txt")),
            "file written",
        ),
        Turn("Read shopping.txt back to me.", facts(Fact("reads flour", r"flour")), "file read back"),
    ],
    "no-tool": [
        Turn("What is the capital of France?", facts(Fact("Paris", r"\bparis\b")), "no tool needed"),
    ],
}

SCENARIOS: dict[str, list[Turn]] = {**CHATS, **NEWCOMER}
SETS: dict[str, list[str]] = {"chats": list(CHATS), "newcomer": list(NEWCOMER), "all": list(SCENARIOS)}
