"""Ranked full-text search over what was said and what was saved: the store's side of search_history.

Both backends index the same text, user and assistant messages and saved memories (migration 16 says
why not tool results), and answer a query alike: the texts holding every one of its words, best first
(bm25 on SQLite's FTS5, ts_rank on PostgreSQL), the newest first among equals. The query is the
model's text, never trusted as query syntax: `search_terms` keeps its words (runs of letters, digits
and marks, in any script) and each dialect quotes them itself, so quotes, `*`, `NEAR(`, `-` or `OR`
are only characters. A word written with `*` at its end matches the words that start with it.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol

from bridge.store.engine import Conn, Database

# The words of a query that are searched for; the rest of a long query is ignored (a 10 KB query
# is a model pasting text, not asking).
MAX_TERMS = 16
# A longer word is cut to this and matched as a prefix (it still finds itself).
MAX_TERM_CHARS = 64
# A prefix query merges the lists of every word it matches (FTS5 and GIN alike): `con*` would be a
# good part of all English text. Shorter prefixes are searched as whole words.
MIN_PREFIX_CHARS = 4
# A query matching more messages than this ranks the newest this many of them. bm25 costs ~3 µs a
# row in FTS5, so ranking all 700,000 messages that hold a common word took 58 ms, and a two-word
# query of such words 90 ms. With the newest 5,000, whole-word queries took 9 ms at p99 at 1M
# messages, every chat searched (bench/memory_search.py, 2 cores); prefix queries make the tail.
RANKED_MATCHES = 5_000
# PostgreSQL's window is smaller: its matches are fetched from the messages heap (the tsvector lives
# there), and for a word in 1-2% of 1M messages it took 70-100 ms at p99 to rank the newest 5,000
# with every chat searched, 27 ms the newest 1,000 (2 cores; the planner also walks the primary key
# backwards more often under the smaller LIMIT).
TSVECTOR_RANKED_MATCHES = 1_000
# Token characters, as the FTS5 tokenizer's `categories` names them (migration 16).
_WORD_CATEGORIES = ("L", "N", "M", "Co")

Kind = Literal["message", "memory"]


@dataclass(frozen=True, slots=True)
class Term:
    """One word of a query; `prefix`: words starting with it match too."""

    word: str
    prefix: bool = False


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A text search_history found: a message said in a session, or a memory saved under a key."""

    kind: Kind
    id: int
    # The session key it was said in, or saved under.
    key: str
    content: str
    created_at: float
    # For a message: its session, and who said it (user, assistant, or agent for another session's).
    session_id: str | None = None
    role: str | None = None


def search_terms(query: str) -> list[Term]:
    """The words of `query` that are searched for, in order, each once; none for a query of only
    punctuation, symbols or spaces."""
    terms: dict[str, Term] = {}
    word: list[str] = []

    def end(prefix: bool) -> None:
        text = "".join(word)
        word.clear()
        if text and len(terms) < MAX_TERMS:
            cut = len(text) > MAX_TERM_CHARS
            text = text[:MAX_TERM_CHARS]
            terms.setdefault(text, Term(text, cut or (prefix and len(text) >= MIN_PREFIX_CHARS)))

    for char in query:
        category = unicodedata.category(char)
        if category[0] in _WORD_CATEGORIES or category in _WORD_CATEGORIES:
            word.append(char)
        else:
            end(prefix=char == "*")
        if len(terms) >= MAX_TERMS:
            break
    end(prefix=False)
    return list(terms.values())


class SearchDialect(Protocol):
    """One backend's full-text SQL; `terms` is never empty."""

    def messages(
        self, conn: Conn, terms: Sequence[Term], *, session_id: str | None, key: str | None, limit: int
    ) -> list[SearchHit]:
        """Messages of the session `session_id`, else of every session of `key`, else of all."""
        ...

    def memories(self, conn: Conn, terms: Sequence[Term], *, key: str | None, limit: int) -> list[SearchHit]:
        """Memories saved under `key`, else all."""
        ...


def _message(row: Any) -> SearchHit:
    message_id, session_id, key, kind, via_session, content, created_at = row
    return SearchHit(
        "message",
        int(message_id),
        key,
        content,
        float(created_at),
        session_id=session_id,
        role="agent" if via_session else kind,
    )


def _memory(row: Any) -> SearchHit:
    return SearchHit("memory", int(row[0]), row[1], row[2], float(row[3]))


_MESSAGE_HIT_COLS = "m.id, m.session_id, s.key, m.kind, m.via_session, m.content, m.created_at"


class Fts5Search:
    """SQLite: FTS5 tables without content of their own. Each row's `place` column holds the tokens
    s<hex of its session id> and k<hex of its key>, so a scope is one more word in the MATCH: FTS5
    intersects the lists, and only the scope's matches are ranked."""

    def messages(
        self, conn: Conn, terms: Sequence[Term], *, session_id: str | None, key: str | None, limit: int
    ) -> list[SearchHit]:
        place = _place("s", session_id) if session_id is not None else _place("k", key)
        rows = conn.execute(
            f"SELECT {_MESSAGE_HIT_COLS} FROM ("
            "SELECT id, score FROM ("
            # bm25's weights: the words count, the place tokens not at all.
            "SELECT rowid AS id, bm25(messages_search, 1.0, 0.0) AS score FROM messages_search "
            "WHERE messages_search MATCH ? ORDER BY rowid DESC LIMIT ?"
            ") ORDER BY score, id DESC LIMIT ?"
            ") AS hit JOIN messages m ON m.id = hit.id JOIN sessions s ON s.id = m.session_id "
            "ORDER BY hit.score, hit.id DESC",
            (_fts5_query(terms, place), RANKED_MATCHES, limit),
        ).fetchall()
        return [_message(row) for row in rows]

    def memories(self, conn: Conn, terms: Sequence[Term], *, key: str | None, limit: int) -> list[SearchHit]:
        rows = conn.execute(
            "SELECT m.id, m.scope, m.content, m.created_at FROM ("
            "SELECT rowid AS id, bm25(memories_search, 1.0, 0.0) AS score FROM memories_search "
            "WHERE memories_search MATCH ? ORDER BY score, rowid DESC LIMIT ?"
            ") AS hit JOIN memories m ON m.id = hit.id ORDER BY hit.score, hit.id DESC",
            (_fts5_query(terms, _place("k", key)), limit),
        ).fetchall()
        return [_memory(row) for row in rows]


def _place(mark: str, value: str | None) -> str | None:
    """The token migration 16 writes for a session id (s) or a key (k): one word whatever the text."""
    return None if value is None else mark + value.encode().hex()


def _fts5_query(terms: Sequence[Term], place: str | None) -> str:
    # Each word quoted (it holds no quote: search_terms keeps letters, digits and marks only), so no
    # word is ever read as an operator; `*` after the quote is FTS5's prefix query.
    words = " ".join(f'"{term.word}"' + ("*" if term.prefix else "") for term in terms)
    query = f"content : ({words})"
    return query if place is None else f'{query} AND place : "{place}"'


class TsvectorSearch:
    """PostgreSQL: the stored tsvector column `search` on a GIN index (migration 16)."""

    def messages(
        self, conn: Conn, terms: Sequence[Term], *, session_id: str | None, key: str | None, limit: int
    ) -> list[SearchHit]:
        if session_id is not None:
            where, params = " AND session_id = :place", {"place": session_id}
        elif key is not None:
            where, params = " AND session_id IN (SELECT id FROM sessions WHERE key = :place)", {"place": key}
        else:
            where, params = "", {}
        rows = conn.execute(
            f"SELECT {_MESSAGE_HIT_COLS} FROM ("
            # Ranked above the LIMIT, so ts_rank runs on the newest TSVECTOR_RANKED_MATCHES rows only.
            "SELECT id, ts_rank(search, to_tsquery('simple', :query), 1) AS score FROM ("
            "SELECT id, search FROM messages WHERE search @@ to_tsquery('simple', :query)"
            f"{where} ORDER BY id DESC LIMIT :ranked"
            ") AS newest ORDER BY score DESC, id DESC LIMIT :limit"
            ") AS hit JOIN messages m ON m.id = hit.id JOIN sessions s ON s.id = m.session_id "
            "ORDER BY hit.score DESC, hit.id DESC",
            {"query": _tsquery(terms), "ranked": TSVECTOR_RANKED_MATCHES, "limit": limit, **params},
        ).fetchall()
        return [_message(row) for row in rows]

    def memories(self, conn: Conn, terms: Sequence[Term], *, key: str | None, limit: int) -> list[SearchHit]:
        where = " AND scope = :key" if key is not None else ""
        rows = conn.execute(
            "SELECT id, scope, content, created_at FROM memories "
            f"WHERE search @@ to_tsquery('simple', :query){where} "
            "ORDER BY ts_rank(search, to_tsquery('simple', :query), 1) DESC, id DESC LIMIT :limit",
            {"query": _tsquery(terms), "key": key, "limit": limit},
        ).fetchall()
        return [_memory(row) for row in rows]


def _tsquery(terms: Sequence[Term]) -> str:
    # Each word quoted as a tsquery lexeme (it holds no quote or backslash), all of them required;
    # `:*` is PostgreSQL's prefix match.
    return " & ".join(f"'{term.word}'" + (":*" if term.prefix else "") for term in terms)


class HistorySearch(Database):
    """search_history's read; each engine's store names its dialect (the sqlite and postgres packages)."""

    search_dialect: ClassVar[SearchDialect]

    async def search_history(
        self, query: str, *, limit: int, session_id: str | None = None, key: str | None = None
    ) -> list[SearchHit]:
        """The texts holding every word of `query`, best first, the newest first among equals; none
        when it has no words (`search_terms`).

        Messages of the session `session_id`, else of every session `key` has had (before /clear
        too), else of every chat; memories saved under `key` (the session's key when only
        `session_id` is given), else every chat's. Matching memories come first, at most half of
        `limit`: each is a fact someone asked to keep, but they must not crowd out what was said.
        """
        terms = search_terms(query)
        if not terms or limit < 1:
            return []
        dialect = self.search_dialect

        def read(conn: Conn) -> list[SearchHit]:
            scope = key
            if scope is None and session_id is not None:
                row = conn.execute("SELECT key FROM sessions WHERE id = ?", (session_id,)).fetchone()
                if row is None:
                    return []
                scope = str(row[0])
            memories = dialect.memories(conn, terms, key=scope, limit=(limit + 1) // 2)
            messages = dialect.messages(
                conn, terms, session_id=session_id, key=key, limit=limit - len(memories)
            )
            return [*memories, *messages]

        return await self._read(read)


FTS5: SearchDialect = Fts5Search()
TSVECTOR: SearchDialect = TsvectorSearch()
