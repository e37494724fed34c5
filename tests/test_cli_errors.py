"""Bad input and unusable storage give one clear error from the `bridge` command, never a traceback."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from bridge.errors import StoreError
from bridge.store.sqlite import SQLiteStore
from devkit.fakes.loopback import closed_port
from devkit.fakes.openai_server import FakeOpenAI
from devkit.fakes.scripted_model import HistoryTrustingModel
from tests.test_cli import Finished, assert_no_traceback, bridge, write_config

# A byte that is not UTF-8, as the shell passes it: Python reads it as a lone surrogate.
NOT_UTF8 = b"\xff".decode("utf-8", "surrogateescape")


@pytest.fixture
async def config_with_runs(tmp_path: Path) -> Path:
    """A config whose database holds two runs."""
    async with FakeOpenAI(HistoryTrustingModel()) as fake:
        config = write_config(tmp_path, fake.base_url)
        done = await bridge("chat", "--config", str(config), cwd=tmp_path, lines=("hello", "what time is it"))
    assert done.code == 0, done.output
    return config


def clean_failure(done: Finished, code: int) -> None:
    assert done.code == code, done.output
    assert_no_traceback(done)


# -- bridge runs / trace / backup / policy explain ---------------------------------------------


async def test_runs_with_a_huge_limit_lists_them_all(tmp_path: Path, config_with_runs: Path) -> None:
    done = await bridge("runs", "--limit", str(10**30), "--config", str(config_with_runs), cwd=tmp_path)
    assert done.code == 0, done.output
    assert_no_traceback(done)
    assert len(done.stdout.splitlines()) == 3  # the header and both runs


@pytest.mark.parametrize("limit", ["0", "-5", "ten"])
async def test_runs_with_a_limit_below_one_or_not_a_number_is_refused(
    tmp_path: Path, config_with_runs: Path, limit: str
) -> None:
    done = await bridge("runs", "--limit", limit, "--config", str(config_with_runs), cwd=tmp_path)
    clean_failure(done, 2)
    assert "argument --limit" in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("trace", f"run{NOT_UTF8}"),
        ("runs", "--session", f"telegram:dm:{NOT_UTF8}"),
        ("policy", "explain", f"telegram:dm:{NOT_UTF8}"),
        ("policy", "explain", "main", "--surface", NOT_UTF8),
    ],
)
async def test_arguments_that_are_not_utf8_are_refused_cleanly(
    tmp_path: Path, config_with_runs: Path, args: tuple[str, ...]
) -> None:
    done = await bridge(*args, "--config", str(config_with_runs), cwd=tmp_path)
    clean_failure(done, 2)
    assert "is not valid UTF-8 text" in done.stderr


async def test_policy_explain_refuses_a_surface_no_adapter_has(tmp_path: Path) -> None:
    config = write_config(tmp_path, None)
    done = await bridge(
        "policy", "explain", "main", "--surface", "telgram", "--config", str(config), cwd=tmp_path
    )
    clean_failure(done, 2)
    known = "console, discord, matrix, slack, telegram"
    assert f"'telgram' is not a known surface; known surfaces: {known}" in done.stderr


async def test_backup_into_a_folder_that_is_a_file_fails_cleanly(
    tmp_path: Path, config_with_runs: Path
) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    target = tmp_path / "a-file" / "copy.db"
    done = await bridge("backup", str(target), "--config", str(config_with_runs), cwd=tmp_path)
    clean_failure(done, 1)
    assert f"bridge: backup failed: cannot write {target}" in done.stderr


async def test_backup_where_sqlite_cannot_write_fails_cleanly(tmp_path: Path, config_with_runs: Path) -> None:
    target = "/proc/bridge-backup.db"  # a folder that exists, where no file can be made (even by root)
    done = await bridge("backup", target, "--config", str(config_with_runs), cwd=tmp_path)
    clean_failure(done, 1)
    assert f"bridge: backup failed: cannot write {target}: unable to open database file" in done.stderr


# -- unusable storage ----------------------------------------------------------------------


def storage_config(tmp_path: Path, db: Path, *, telegram: bool = False) -> Path:
    config = tmp_path / "storage.toml"
    text = (
        f'[llm]\nbase_url = "http://127.0.0.1:{closed_port()}/v1"\n[storage]\npath = {json.dumps(str(db))}\n'
    )
    if telegram:
        text += (
            f'[telegram]\nenabled = true\ntoken = "123:abc"\napi_base = "http://127.0.0.1:{closed_port()}"\n'
        )
    config.write_text(text, encoding="utf-8")
    return config


def folder(tmp_path: Path) -> Path:
    path = tmp_path / "a-folder.db"
    path.mkdir()
    return path


def garbage(tmp_path: Path) -> Path:
    path = tmp_path / "garbage.db"
    path.write_bytes(bytes(range(256)) * 64)
    return path


def under_a_file(tmp_path: Path) -> Path:
    (tmp_path / "plain-file").write_text("x")
    return tmp_path / "plain-file" / "bridge.db"


@pytest.mark.parametrize("make_db", [folder, garbage, under_a_file])
@pytest.mark.parametrize("command", ["chat", "run", "runs"])
async def test_unusable_storage_gives_one_error_naming_the_path(
    tmp_path: Path, make_db: Callable[[Path], Path], command: str
) -> None:
    db = make_db(tmp_path)
    config = storage_config(tmp_path, db, telegram=command == "run")
    done = await bridge(command, "--config", str(config), cwd=tmp_path, lines=("hello",))
    assert done.code != 0, done.output
    assert_no_traceback(done)
    assert "Exception in thread" not in done.stderr
    assert str(db) in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize("make_db", [folder, under_a_file])
async def test_a_failed_open_leaves_no_sqlite_thread_behind(
    tmp_path: Path, make_db: Callable[[Path], Path]
) -> None:
    db = make_db(tmp_path)
    before = set(threading.enumerate())
    store = SQLiteStore(db)
    with pytest.raises(StoreError, match="cannot open database"):
        await store.open()
    # A worker thread still running when the event loop closes prints "Event loop is closed" tracebacks.
    stray = [t for t in set(threading.enumerate()) - before if "_connection_worker_thread" in t.name]
    assert stray == []
