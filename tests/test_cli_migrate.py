"""`bridge migrate`: a SQLite bot moved to PostgreSQL, counts checked, and the bot going on there."""

from __future__ import annotations

from pathlib import Path

from bridge.store.postgres import PostgresStore
from bridge.store.sqlite import SQLiteStore
from bridge.store.transfer import TABLES
from devkit.fakes.openai_server import FakeOpenAI
from devkit.fakes.scripted_model import HistoryTrustingModel
from tests.pg import PostgresServer
from tests.test_cli import bridge, write_config


def on_postgres(config: Path, url: str) -> Path:
    """The same config with [storage] url added: the bot's data now lives on the server."""
    moved = config.with_name("postgres.toml")
    text = config.read_text()
    moved.write_text(text.replace("[storage]\n", f'[storage]\nurl = "{url}"\n'))
    assert f'url = "{url}"' in moved.read_text()
    return moved


async def test_migrate_copies_everything_checks_the_counts_and_the_bot_goes_on_there(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    url = postgres.database()
    async with FakeOpenAI(HistoryTrustingModel()) as fake:
        config = write_config(tmp_path, fake.base_url)
        lines = ("what time is it", "hello", "remember that I like tea")
        done = await bridge("chat", "--config", str(config), cwd=tmp_path, lines=lines)
        assert done.code == 0, done.output
        db = tmp_path / "state" / "bridge.db"
        before = db.read_bytes()

        moved = await bridge("migrate", "--from", f"sqlite:{db}", "--to", url, cwd=tmp_path)
        assert moved.code == 0, moved.output
        counted = {
            line.split()[0]: line.split()[1:] for line in moved.stdout.splitlines()[1 : len(TABLES) + 1]
        }
        assert set(counted) == set(TABLES)
        assert all(source == target for source, target in counted.values()), moved.stdout
        assert int(counted["messages"][0]) > 0 and int(counted["runs"][0]) == 3
        assert db.read_bytes() == before  # the source is read from a copy, never written

        lite, pg = SQLiteStore(db), PostgresStore(url)
        await lite.open()
        await pg.open()
        try:
            session = await lite.active_session("main")
            assert session is not None and await pg.active_session("main") == session
            assert await pg.history(session.id, 100) == await lite.history(session.id, 100)
            assert await pg.loaded_groups(session.id) == await lite.loaded_groups(session.id)
            assert await pg.outbox() == await lite.outbox()
            assert await pg.list_runs(session_key="main", limit=10) == await lite.list_runs(
                session_key="main", limit=10
            )
        finally:
            await lite.close()
            await pg.close()

        # The bot carries on on PostgreSQL: its history is there, and new rows get new ids.
        config_pg = on_postgres(config, url)
        done = await bridge("chat", "--config", str(config_pg), cwd=tmp_path, lines=("and now?",))
        assert done.code == 0, done.output
        listed = await bridge("runs", "--config", str(config_pg), cwd=tmp_path)
        assert listed.code == 0 and len(listed.stdout.splitlines()) == 1 + 4, listed.output

        again = await bridge("migrate", "--from", f"sqlite:{db}", "--to", url, cwd=tmp_path)
    assert again.code == 1
    assert "already holds data" in again.stderr and "nothing was copied" in again.stderr


async def test_migrate_from_a_missing_file_says_which(tmp_path: Path, postgres: PostgresServer) -> None:
    done = await bridge(
        "migrate", "--from", f"sqlite:{tmp_path / 'nope.db'}", "--to", postgres.database(), cwd=tmp_path
    )
    assert done.code == 1
    assert f"no database at {tmp_path / 'nope.db'}" in done.stderr


async def test_migrate_refuses_a_target_that_is_not_postgresql(tmp_path: Path) -> None:
    done = await bridge("migrate", "--from", "sqlite:x.db", "--to", "mysql://h/db", cwd=tmp_path)
    assert done.code == 2
    assert "must be a PostgreSQL URL" in done.stderr
