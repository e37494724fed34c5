"""Sessions' history windows kept between turns: the next turn reads only the rows written since."""

from __future__ import annotations

import dataclasses
import json
from collections import OrderedDict
from dataclasses import dataclass

from bridge.store.base import MessageRow, SummaryRow

# Windows of this many recently active sessions are kept (each at most [agent] history_limit rows):
# enough for the sessions a busy bot answers at once, small next to the memory budget.
DEFAULT_SESSIONS = 1024


@dataclass(frozen=True, slots=True)
class Window:
    """A session's history window as its last run read it, and how far that read went."""

    rows: tuple[MessageRow, ...]
    # How far the reads of the session went (in or out of the window), by its Order's column: the
    # newest message id, or (PostgreSQL) the session's newest message sequence number.
    last: int
    loaded_groups: frozenset[str]
    summary_id: int | None
    limit: int
    loaded_skills: frozenset[str] = frozenset()


class Windows:
    """Windows by session id, least recently used dropped first.

    A top-up reads "every row written since", which needs a column in commit order (Order):
    - SQLite serializes writes, so its ids commit in order;
    - on PostgreSQL two transactions may commit their ids out of order, so a message takes a
      sequence number of its session's (`seq`) from a trigger that holds the session's row lock
      until it commits: within a session, those commit in order. The trigger takes a new one when
      a message is changed, so a change another worker made is read again too.
    Messages are never deleted, only added. A new summary (compaction) drops the rows it covers from
    the window's front (holds_after says when the window still holds the rest); another limit makes
    the next read a whole one. The one change to a message (its attachments read, see
    MessageTable.set_user_message) is made here too, by `replace`.
    """

    def __init__(self, size: int = DEFAULT_SESSIONS) -> None:
        self.size = size
        self._by_session: OrderedDict[str, Window] = OrderedDict()

    def get(self, session_id: str) -> Window | None:
        window = self._by_session.get(session_id)
        if window is not None:
            self._by_session.move_to_end(session_id)
        return window

    def replace(self, session_id: str, message_id: int, content: str, media: str | None) -> None:
        """A kept message's new text and attachments, where the session's window holds it."""
        window = self._by_session.get(session_id)
        if window is None:
            return
        rows = tuple(
            dataclasses.replace(row, content=content, media=media) if row.id == message_id else row
            for row in window.rows
        )
        self._by_session[session_id] = dataclasses.replace(window, rows=rows)

    def put(self, session_id: str, window: Window) -> None:
        self._by_session[session_id] = window
        self._by_session.move_to_end(session_id)
        while len(self._by_session) > self.size:
            self._by_session.popitem(last=False)


def in_turns_after(row: MessageRow, after: int) -> bool:
    """Whether the row belongs to a turn after user message `after` (the SQL of select_history)."""
    turn = row.anchor if row.kind != "user" and row.anchor is not None else row.id
    return row.id > after and turn > after


# The calls that load something for the rest of a session, and the argument naming what they load.
LOAD_TOOL_GROUP = "load_tool_group"
LOAD_SKILL = "load_skill"
LOADERS = {LOAD_TOOL_GROUP: "group_name", LOAD_SKILL: "name"}


def loaded_by(
    kind: str, tool_name: str | None, tool_status: str | None, tool_input: str | None
) -> str | None:
    """The group or skill a successful load_tool_group or load_skill call loaded, or None (any other
    row, a malformed input)."""
    argument = LOADERS.get(tool_name or "")
    if kind != "tool_call" or argument is None or tool_status != "success" or not tool_input:
        return None
    try:
        name = json.loads(tool_input).get(argument)
    except (ValueError, AttributeError):
        return None
    # Objects, arrays, numbers and empty names are not groups or skills.
    return name if isinstance(name, str) and name else None


def holds_after(window: Window, summary: SummaryRow | None) -> bool:
    """Whether `window`, topped up, is the session's window after `summary`, its newest: the summary
    it was read after, or a newer one (a compaction) it reaches back to.

    The window holds the newest `limit` rows in turns after its summary, by id. A newer summary only
    drops rows from the front: every row in a turn after it has a larger id than the summary's user
    message (a run's rows are written after the message it answers). So where the window's oldest
    row is that message or older, or the window holds every row after its summary (it is not full),
    the rows the newer summary keeps are all in it, or written since."""
    if window.summary_id == (summary.id if summary else None):
        return True
    if summary is None or (window.summary_id is not None and summary.id < window.summary_id):
        return False
    return len(window.rows) < window.limit or (bool(window.rows) and window.rows[0].id <= summary.upto)


def topped_up(window: Window, new: list[MessageRow], after: int, last: int, summary_id: int | None) -> Window:
    """The window with the rows written since added (in id order, a changed row in place of its old
    self), the oldest dropped past its limit and those in turns up to `after`, the user message its
    summary (`summary_id`) covers up to; `last` is how far this read went."""
    if not new and summary_id == window.summary_id:
        return dataclasses.replace(window, last=last) if last != window.last else window
    if new and window.rows and new[0].id <= window.rows[-1].id:
        # Read by sequence (PostgreSQL): a row committed late, or changed, may belong further up.
        merged = {row.id: row for row in window.rows} | {row.id: row for row in new}
        joined = sorted(merged.values(), key=lambda row: row.id)
    else:
        joined = [*window.rows, *new]
    rows = [row for row in joined if in_turns_after(row, after)][-window.limit :]
    loads = [
        (row.tool_name, name)
        for row in new
        if (name := loaded_by(row.kind, row.tool_name, row.tool_status, row.tool_input))
    ]
    return Window(
        tuple(rows),
        last,
        window.loaded_groups | {name for tool, name in loads if tool == LOAD_TOOL_GROUP},
        summary_id,
        window.limit,
        window.loaded_skills | {name for tool, name in loads if tool == LOAD_SKILL},
    )
