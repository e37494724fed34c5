"""The files tool group: round trips, and confinement to the workspace."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from bridge.errors import OutsideWorkspaceError
from bridge.tools.base import ToolContext, ToolResult
from bridge.tools.builtin.files import (
    MAX_LIST_ENTRIES,
    files_group,
    list_files,
    read_file,
    write_file,
)
from bridge.tools.builtin.workspace import resolve_in_workspace
from tests.tools.conftest import MakeContext


async def read(ctx: ToolContext, **args: Any) -> ToolResult:
    return await read_file(args, ctx)


async def write(ctx: ToolContext, **args: Any) -> ToolResult:
    return await write_file(args, ctx)


async def ls(ctx: ToolContext, **args: Any) -> ToolResult:
    return await list_files(args, ctx)


@pytest.fixture
def existing_workspace(workspace: Path) -> Path:
    """The workspace, created up front for tests that plant files in it."""
    workspace.mkdir(parents=True)
    return workspace


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder next to the workspace holding a secret the tools must never reach."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text("top secret\n", encoding="utf-8")
    return folder


def test_group_exposes_its_four_tools() -> None:
    group = files_group()
    assert group.name == "files"
    assert [tool.name for tool in group.tools] == ["read_file", "write_file", "list_files", "send_file"]
    for tool in group.tools:
        assert tool.schema()["function"]["parameters"]["type"] == "object"


async def test_write_read_list_round_trip(ctx: ToolContext, workspace: Path) -> None:
    assert not await asyncio.to_thread(workspace.exists)

    written = await write(ctx, path="notes/todo.md", content="one\ntwo\n")
    assert written.ok, written.content
    assert "8 bytes" in written.content
    assert (workspace / "notes" / "todo.md").read_text(encoding="utf-8") == "one\ntwo\n"

    appended = await write(ctx, path="notes/todo.md", content="three\n", append=True)
    assert appended.ok and "6 bytes" in appended.content

    result = await read(ctx, path="notes/todo.md")
    assert result.ok
    assert result.content == "one\ntwo\nthree\n"

    listing = json.loads((await ls(ctx, recursive=True)).content)
    assert listing["entries"] == [
        {"path": "notes", "type": "dir"},
        {"path": "notes/todo.md", "type": "file", "size": 14},
    ]
    assert "truncated" not in listing


async def test_write_replaces_unless_append(ctx: ToolContext) -> None:
    await write(ctx, path="a.txt", content="first")
    await write(ctx, path="a.txt", content="second")
    assert (await read(ctx, path="a.txt")).content == "second"


async def test_read_with_offset_and_limit_returns_those_lines(ctx: ToolContext) -> None:
    await write(ctx, path="n.txt", content="".join(f"line {i}\n" for i in range(10)))

    result = await read(ctx, path="n.txt", offset=3, limit=2)

    assert result.ok
    assert result.content.startswith("line 3\nline 4\n")
    assert "line 5" not in result.content
    assert "of 10" in result.content


async def test_read_is_capped_at_file_max_bytes(make_ctx: MakeContext, existing_workspace: Path) -> None:
    ctx = make_ctx(file_max_bytes=100)
    workspace = existing_workspace
    (workspace / "big.txt").write_text("x" * 1000, encoding="utf-8")

    result = await read(ctx, path="big.txt")

    assert result.ok
    assert "x" * 100 in result.content and "x" * 101 not in result.content
    assert "truncated" in result.content


async def test_cap_splitting_a_multibyte_character_is_not_a_decode_error(
    make_ctx: MakeContext, existing_workspace: Path
) -> None:
    ctx = make_ctx(file_max_bytes=5)
    workspace = existing_workspace
    (workspace / "u.txt").write_text("ééé", encoding="utf-8")  # 6 bytes; the cap cuts the third

    result = await read(ctx, path="u.txt")

    assert result.ok
    assert result.content.startswith("éé")


async def test_list_is_sorted_with_sizes(ctx: ToolContext, workspace: Path) -> None:
    await write(ctx, path="b.txt", content="bb")
    await write(ctx, path="a.txt", content="a")
    await write(ctx, path="sub/c.txt", content="ccc")

    listing = json.loads((await ls(ctx)).content)

    assert listing["path"] == "."
    assert listing["entries"] == [
        {"path": "a.txt", "type": "file", "size": 1},
        {"path": "b.txt", "type": "file", "size": 2},
        {"path": "sub", "type": "dir"},
    ]


async def test_list_is_capped_and_says_so(ctx: ToolContext, existing_workspace: Path) -> None:
    workspace = existing_workspace
    for i in range(MAX_LIST_ENTRIES + 5):
        (workspace / f"f{i:04}.txt").touch()

    listing = json.loads((await ls(ctx)).content)

    assert len(listing["entries"]) == MAX_LIST_ENTRIES
    assert listing["truncated"] is True
    assert "first" in listing["note"]


async def test_traversal_outside_workspace_is_refused(ctx: ToolContext, outside: Path) -> None:
    for result in (
        await read(ctx, path="../outside/secret.txt"),
        await read(ctx, path="sub/../../outside/secret.txt"),
        await write(ctx, path="../outside/new.txt", content="x"),
        await ls(ctx, path=".."),
    ):
        assert not result.ok
        assert result.code == "outside_workspace", result.content
    assert not (outside / "new.txt").exists()


async def test_absolute_path_outside_workspace_is_refused(ctx: ToolContext, outside: Path) -> None:
    result = await read(ctx, path=str(outside / "secret.txt"))
    assert result.code == "outside_workspace"
    assert "top secret" not in result.content

    result = await write(ctx, path=str(outside / "planted.txt"), content="x")
    assert result.code == "outside_workspace"
    assert not (outside / "planted.txt").exists()


async def test_symlinked_file_escaping_workspace_is_refused(
    ctx: ToolContext, existing_workspace: Path, outside: Path
) -> None:
    workspace = existing_workspace
    (workspace / "link.txt").symlink_to(outside / "secret.txt")

    read_result = await read(ctx, path="link.txt")
    write_result = await write(ctx, path="link.txt", content="overwritten")

    assert read_result.code == "outside_workspace"
    assert write_result.code == "outside_workspace"
    assert (outside / "secret.txt").read_text(encoding="utf-8") == "top secret\n"


async def test_dangling_symlink_pointing_outside_is_not_written_through(
    ctx: ToolContext, existing_workspace: Path, outside: Path
) -> None:
    workspace = existing_workspace
    (workspace / "trap.txt").symlink_to(outside / "not-yet.txt")

    result = await write(ctx, path="trap.txt", content="x")

    assert result.code == "outside_workspace"
    assert not (outside / "not-yet.txt").exists()


async def test_symlinked_directory_escaping_workspace_is_refused(
    ctx: ToolContext, existing_workspace: Path, outside: Path
) -> None:
    workspace = existing_workspace
    (workspace / "door").symlink_to(outside, target_is_directory=True)

    for result in (
        await read(ctx, path="door/secret.txt"),
        await write(ctx, path="door/planted.txt", content="x"),
        await write(ctx, path="door/deeper/planted.txt", content="x"),
        await ls(ctx, path="door"),
    ):
        assert result.code == "outside_workspace", result.content
    assert await asyncio.to_thread(os.listdir, outside) == ["secret.txt"]


async def test_listing_does_not_follow_symlinks(
    ctx: ToolContext, existing_workspace: Path, outside: Path
) -> None:
    workspace = existing_workspace
    (workspace / "door").symlink_to(outside, target_is_directory=True)

    listing = json.loads((await ls(ctx, recursive=True)).content)

    assert listing["entries"] == [{"path": "door", "type": "symlink"}]


async def test_symlink_staying_inside_workspace_is_allowed(ctx: ToolContext, workspace: Path) -> None:
    await write(ctx, path="real/data.txt", content="inside")
    (workspace / "alias.txt").symlink_to(workspace / "real" / "data.txt")
    (workspace / "alias_dir").symlink_to("real", target_is_directory=True)

    assert (await read(ctx, path="alias.txt")).content == "inside"
    assert (await read(ctx, path="alias_dir/data.txt")).content == "inside"
    assert (await write(ctx, path="alias_dir/more.txt", content="ok")).ok
    assert (workspace / "real" / "more.txt").read_text(encoding="utf-8") == "ok"


async def test_absolute_path_inside_workspace_is_allowed(ctx: ToolContext, workspace: Path) -> None:
    await write(ctx, path="a.txt", content="hi")
    real = await asyncio.to_thread(workspace.resolve)
    assert (await read(ctx, path=str(real / "a.txt"))).content == "hi"


async def test_binary_file_is_refused(ctx: ToolContext, existing_workspace: Path) -> None:
    workspace = existing_workspace
    (workspace / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (workspace / "latin1.txt").write_bytes("café".encode("latin-1"))

    binary = await read(ctx, path="img.png")
    not_utf8 = await read(ctx, path="latin1.txt")

    assert binary.code == "binary_file"
    assert not_utf8.code == "not_text"


async def test_missing_path_parameter_is_reported(ctx: ToolContext) -> None:
    read_result, write_result = await read(ctx), await write(ctx, content="x")
    assert (
        read_result.content
        == "Error [invalid_arguments]: Invalid arguments for read_file: 'path' is required."
    )
    assert (
        write_result.content
        == "Error [invalid_arguments]: Invalid arguments for write_file: 'path' is required."
    )
    assert "'content' is required" in (await write(ctx, path="a.txt")).content


async def test_bad_parameter_types_are_reported(ctx: ToolContext) -> None:
    assert (await read(ctx, path=3)).code == "invalid_arguments"
    assert (await read(ctx, path="a.txt", offset=-1)).code == "invalid_arguments"
    assert (await write(ctx, path="a.txt", content="x", append="maybe")).code == "invalid_arguments"
    assert (await read(ctx, path="a\x00b")).code == "invalid_arguments"


async def test_missing_file_is_not_found(ctx: ToolContext) -> None:
    assert (await read(ctx, path="nope.txt")).code == "not_found"
    assert (await ls(ctx, path="nope")).code == "not_found"


async def test_folders_and_files_are_not_confused(ctx: ToolContext) -> None:
    await write(ctx, path="sub/a.txt", content="x")
    assert (await read(ctx, path="sub")).code == "is_directory"
    assert (await write(ctx, path="sub", content="x")).code == "is_directory"
    assert (await ls(ctx, path="sub/a.txt")).code == "not_a_directory"


async def test_write_larger_than_file_max_bytes_is_refused(make_ctx: MakeContext, workspace: Path) -> None:
    ctx = make_ctx(file_max_bytes=10)
    result = await write(ctx, path="a.txt", content="x" * 11)
    assert result.code == "too_large"
    assert not (workspace / "a.txt").exists()


def test_resolve_in_workspace_confines_paths(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    os.symlink(tmp_path, root / "up")

    assert resolve_in_workspace(root, "a/b.txt") == root.resolve() / "a" / "b.txt"
    assert resolve_in_workspace(root, "a/../b.txt") == root.resolve() / "b.txt"
    assert resolve_in_workspace(root, ".") == root.resolve()
    for escaping in ("..", "../x", "/etc/passwd", "up/x", "up/root/../x"):
        with pytest.raises(OutsideWorkspaceError):
            resolve_in_workspace(root, escaping)
