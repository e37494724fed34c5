"""What the tests and the benchmarks share, and nothing a running bot uses.

- `postgres.py`: a private PostgreSQL server (initdb and pg_ctl in a temp folder, on a free port,
  unprivileged).
- `instant_model.py`: an OpenAI-compatible model that answers at once, in a process of its own.
- `ports.py`: a free port on 127.0.0.1.
- `fakes/`: the fake servers the real clients talk to (the model, the Telegram Bot API, an MCP server).
- `processes.py`: the real `bridge` command run as a subprocess, in a clean environment.

Its own package, beside `bench/` and `tests/` rather than in either: the benchmarks run with the
`bench` extra alone (no pytest, no psycopg), so they may not import `tests/`, and the tests do not
import the benchmarks. Nothing here imports pytest, and psycopg only when a database is made; a
missing PostgreSQL raises `PostgresUnavailable`, which the tests turn into a skip (tests/pg.py) and
the benchmarks into a one-line note.

It may import the standard library, Bridge's own dependencies (aiohttp, the `mcp` SDK) and psycopg;
never `tests` or `bench`, and no `bridge` module, so it sits outside Bridge's layers. Like `tests/`
and `bench/` it is not part of the installed package (see [tool.setuptools.packages.find] in
pyproject.toml): it is imported from a checkout.
"""
