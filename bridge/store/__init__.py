"""Durable storage, under everything but logs, config and the base modules: sessions, messages, runs,
the outbox, memories, pairing, tasks and webhook events, on SQLite or PostgreSQL.

`tables.DatabaseStore` is the store: one class made of one class per table (`sessions.py`,
`messages.py`, `runs.py`, `outbox.py`, …), each method written once for both backends, each a package
of its own (`sqlite/`, `postgres/`: its engine, its migrations) that knows nothing of the other.
`base.py` holds the rows it returns. May import config and the base modules only.
"""
