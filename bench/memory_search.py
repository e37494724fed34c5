"""Memory search: search_history's latency at 1M messages, per scope (a session, a chat, every chat).

`python -m bench memory-search [--messages N] [--sessions N] [--postgres]`. A store is filled straight
through the database (one transaction, executemany; the search index is kept by the migration's
triggers on SQLite, by the generated column on PostgreSQL) with synthetic chat text: made-up words
drawn from a Zipf-like law, as words in a language are, so some are in most messages and most in few.
Then ~200 varied queries (one to three words: common, middling and rare; some with a `*` prefix) go
through `store.search_history` for each scope, timed one at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import sqlite3
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import percentile, table, write_results
from bridge.store.sqlite import SQLiteStore
from bridge.store.tables import DatabaseStore
from devkit.postgres import postgres_server, unavailable

MESSAGES = 1_000_000
SESSIONS = 2_000
QUERIES = 200
SMOKE_MESSAGES, SMOKE_SESSIONS, SMOKE_QUERIES = 3_000, 20, 30
TARGET_P99_MS = 50.0
SCOPES = ("session", "chat", "all")
VOCABULARY = 50_000
# Zipf's exponent for the words' frequencies: the commonest word is in about half the messages.
ZIPF = 1.07
SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "shi", "po", "an", "el", "or", "ux", "be", "di", "fa")
BATCH = 50_000


@dataclass(frozen=True, slots=True)
class Corpus:
    """What was written: the words by rank (commonest first), and the sessions with their keys."""

    words: list[str]
    sessions: list[tuple[str, str]]

    @property
    def keys(self) -> list[str]:
        return sorted({key for _, key in self.sessions})


def vocabulary(rng: random.Random) -> list[str]:
    words: dict[str, None] = {}
    while len(words) < VOCABULARY:
        words["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 5)))] = None
    return list(words)


def sessions_of(count: int) -> list[tuple[str, str]]:
    """(session id, key): every chat had one /clear, so each key has two sessions."""
    keys = [
        "main",
        *(f"telegram:group:-{100 + i}" if i % 2 else f"telegram:dm:{i}" for i in range(count // 2)),
    ]
    return [(f"{n:016x}", keys[n // 2]) for n in range(count)]


def messages(corpus: Corpus, count: int, rng: random.Random) -> Iterator[tuple[str, str, str, float]]:
    """(session id, kind, content, created_at): 9 in 10 said (user, assistant), 1 in 10 a tool result."""
    weights = list(itertools.accumulate(1 / (rank + 1) ** ZIPF for rank in range(len(corpus.words))))
    started = time.time() - count
    drawn: list[str] = []
    at = 0
    for n in range(count):
        length = rng.randint(3, 25)
        if at + length > len(drawn):
            drawn, at = rng.choices(corpus.words, cum_weights=weights, k=200_000), 0
        text, at = " ".join(drawn[at : at + length]), at + length
        kind = "tool_result" if n % 10 == 9 else "assistant" if n % 2 else "user"
        session_id, _ = corpus.sessions[rng.randrange(len(corpus.sessions))]
        yield session_id, kind, text, started + n


def memories(corpus: Corpus, rng: random.Random) -> list[tuple[str, str, float]]:
    """Five saved facts per chat, of middling words."""
    return [
        (key, " ".join(rng.choices(corpus.words[100:5_000], k=8)), time.time())
        for key in corpus.keys
        for _ in range(5)
    ]


def queries(corpus: Corpus, count: int, rng: random.Random) -> list[str]:
    """One to three words each: a tenth common (among the 100 commonest), most middling, a third rare;
    one in ten ends its last word with * (a prefix)."""
    words = corpus.words

    def word() -> str:
        band = rng.random()
        if band < 0.1:
            return words[rng.randrange(100)]
        if band < 0.7:
            return words[rng.randrange(100, 5_000)]
        return words[rng.randrange(5_000, len(words))]

    made = []
    for _ in range(count):
        chosen = [word() for _ in range(rng.choice((1, 1, 2, 2, 3)))]
        if rng.random() < 0.1:
            chosen[-1] = chosen[-1][:4] + "*"
        made.append(" ".join(chosen))
    return made


def fill_sqlite(path: Path, corpus: Corpus, count: int, seed: int) -> None:
    """Sessions, messages and memories in one transaction; the migration's triggers index them."""
    rng = random.Random(seed)
    now = time.time()
    with sqlite3.connect(path, isolation_level=None) as db:
        db.execute("BEGIN")
        db.executemany(
            "INSERT INTO sessions (id, key, created_at, updated_at, ended_at) VALUES (?, ?, ?, ?, ?)",
            [(sid, key, now, now, None if n % 2 else now) for n, (sid, key) in enumerate(corpus.sessions)],
        )
        rows = messages(corpus, count, rng)
        while batch := list(itertools.islice(rows, BATCH)):
            db.executemany(
                "INSERT INTO messages (session_id, kind, content, created_at) VALUES (?, ?, ?, ?)", batch
            )
        db.executemany(
            "INSERT INTO memories (scope, content, created_at) VALUES (?, ?, ?)", memories(corpus, rng)
        )
        db.execute("COMMIT")
        # As a long-lived database would be after FTS5's automatic merges: one b-tree per index.
        db.execute("INSERT INTO messages_search (messages_search) VALUES ('optimize')")
    db.close()


def fill_postgres(url: str, corpus: Corpus, count: int, seed: int) -> None:
    """The same rows with COPY, in one transaction; the generated column and GIN index follow."""
    import psycopg

    rng = random.Random(seed)
    now = time.time()
    with psycopg.connect(url) as db:
        with db.cursor() as cursor:
            cursor.executemany(
                b"INSERT INTO sessions (id, key, created_at, updated_at, ended_at) "
                b"VALUES (%s, %s, %s, %s, %s)",
                [
                    (sid, key, now, now, None if n % 2 else now)
                    for n, (sid, key) in enumerate(corpus.sessions)
                ],
            )
            with cursor.copy(b"COPY messages (session_id, kind, content, created_at) FROM STDIN") as copy:
                for row in messages(corpus, count, rng):
                    copy.write_row(row)
            cursor.executemany(
                b"INSERT INTO memories (scope, content, created_at) VALUES (%s, %s, %s)",
                memories(corpus, rng),
            )
        db.commit()
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(b"VACUUM ANALYZE")


async def timed(
    store: DatabaseStore, corpus: Corpus, asked: Sequence[str], seed: int
) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    results = []
    for scope in SCOPES:
        timings, found = [], 0
        for query in asked:
            session_id, key = corpus.sessions[rng.randrange(len(corpus.sessions))]
            where: dict[str, Any] = (
                {"session_id": session_id, "key": key}
                if scope == "session"
                else {"key": key}
                if scope == "chat"
                else {}
            )
            start = time.perf_counter()
            hits = await store.search_history(query, limit=10, **where)
            timings.append((time.perf_counter() - start) * 1000)
            found += len(hits)
        # Prefix queries merge the lists of every word they match: they make the tail.
        words_only = [ms for ms, query in zip(timings, asked, strict=True) if "*" not in query]
        results.append(
            {
                "scope": scope,
                "p50_ms": round(percentile(timings, 50), 3),
                "p99_ms": round(percentile(timings, 99), 3),
                "max_ms": round(max(timings), 3),
                "words_only_p99_ms": round(percentile(words_only, 99), 3),
                "hits_per_query": round(found / len(asked), 1),
            }
        )
    return results


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    count, session_count, query_count = (
        (SMOKE_MESSAGES, SMOKE_SESSIONS, SMOKE_QUERIES)
        if args.smoke
        else (args.messages, args.sessions, args.queries)
    )
    rng = random.Random(args.seed)
    corpus = Corpus(vocabulary(rng), sessions_of(session_count))
    asked = queries(corpus, query_count, rng)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bridge-bench-search-") as tmp:
        path = Path(tmp) / "bench.db"
        store = SQLiteStore(path)
        await store.open()  # creates the schema, search tables and triggers included
        await store.close()
        began = time.perf_counter()
        await asyncio.to_thread(fill_sqlite, path, corpus, count, args.seed)
        filled = time.perf_counter() - began
        print(
            f"sqlite: {count:,} messages in {session_count:,} sessions written and indexed in {filled:.0f} s"
        )
        store = SQLiteStore(path)
        await store.open()
        try:
            results += [{"store": "sqlite", **r} for r in await timed(store, corpus, asked, args.seed)]
        finally:
            await store.close()
    if args.postgres:
        why = unavailable()
        if why is not None:
            print(f"PostgreSQL figures skipped: {why}")
        else:
            from bridge.store.postgres import PostgresStore

            with postgres_server() as server:
                url = server.database()
                pg = PostgresStore(url, pool_size=2)
                await pg.open()
                await pg.close()
                began = time.perf_counter()
                await asyncio.to_thread(fill_postgres, url, corpus, count, args.seed)
                print(f"postgresql: written and indexed in {time.perf_counter() - began:.0f} s")
                pg = PostgresStore(url, pool_size=2)
                await pg.open()
                try:
                    results += [
                        {"store": "postgresql", **r} for r in await timed(pg, corpus, asked, args.seed)
                    ]
                finally:
                    await pg.close()
    print(
        table(
            f"search_history at {count:,} messages, {session_count:,} sessions: {query_count} queries per "
            "scope, limit 10, through the store (ms)",
            ["store", "scope", "p50 ms", "p99 ms", "max ms", "p99 ms, no prefix", "hits/query"],
            [list(r.values()) for r in results],
        )
    )
    worst = {
        store: max(r["p99_ms"] for r in results if r["store"] == store)
        for store in {r["store"] for r in results}
    }
    data = {
        "messages": count,
        "sessions": session_count,
        "queries": query_count,
        "results": results,
        "targets": {
            f"{store}_p99_at_most_{TARGET_P99_MS:g}ms": p99 <= TARGET_P99_MS
            for store, p99 in sorted(worst.items())
        },
    }
    print(f"targets: {data['targets']}\n")
    write_results("memory_search", data, smoke=args.smoke)
    return data


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--messages", type=int, default=MESSAGES, help=f"messages written (default {MESSAGES:,})"
    )
    parser.add_argument("--sessions", type=int, default=SESSIONS, help=f"sessions (default {SESSIONS:,})")
    parser.add_argument("--queries", type=int, default=QUERIES, help=f"queries per scope (default {QUERIES})")
    parser.add_argument(
        "--postgres", action="store_true", help="PostgreSQL's figures too (a server started here)"
    )
    parser.add_argument(
        "--seed", type=int, default=7, help="the corpus and the queries are the same for a seed"
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: proves the benchmark still runs")


def main(args: argparse.Namespace) -> None:
    asyncio.run(measure(args))
