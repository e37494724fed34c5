"""The `files` tool group: read, write and list files confined to the bot's workspace folder (and
read and list the files of skills, under .skills/<name>/)."""

from __future__ import annotations

import asyncio
import codecs
import os
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from pydantic import Field

from bridge.errors import OutsideWorkspaceError
from bridge.skills import FILES_PREFIX
from bridge.tools.arguments import Arguments, NonNegative, PathText, Positive, typed_tool
from bridge.tools.base import ToolContext, ToolGroup, ToolResult
from bridge.tools.builtin.send_file import send_file
from bridge.tools.builtin.workspace import resolve_in_workspace, workspace_of
from bridge.tools.result import as_written

# A recursive listing of a big tree would flood the model's context; this is plenty to orient it.
MAX_LIST_ENTRIES = 500
# What the model is told a path is; read_file and write_file share it.
PATH_DESCRIPTION = "Path relative to the workspace, e.g. notes/todo.md"

A = TypeVar("A")
Handler = Callable[[A, ToolContext], Awaitable[ToolResult]]


def _display(root: Path, path: Path, prefix: str = "") -> str:
    """The workspace-relative form the model can pass back to another call (`prefix`: how the model
    names `root` when it is not the workspace, e.g. .skills/<name>)."""
    rel = path.relative_to(root).as_posix()
    if not prefix:
        return rel
    return prefix if rel == "." else f"{prefix}/{rel}"


def skill_path(user_path: str) -> tuple[str, str] | None:
    """(skill name, path inside its folder) for a path under .skills/, None for a workspace path.
    The name is "" for .skills itself."""
    parts = PurePosixPath(user_path).parts
    if not parts or parts[0] != FILES_PREFIX:
        return None
    return (parts[1] if len(parts) > 1 else "", "/".join(parts[2:]) or ".")


@dataclass(frozen=True, slots=True)
class _Place:
    """Where a path leads: the folder it is confined to, the real path inside it, and how the model
    names that folder ("" for the workspace)."""

    root: Path
    target: Path
    prefix: str = ""


def _place(ctx: ToolContext, user_path: str) -> _Place | ToolResult:
    """The workspace path, or the skill file, that `user_path` names; OutsideWorkspaceError if it
    escapes its folder, a not_found result for a skill that is not configured."""
    found = skill_path(user_path)
    if found is None:
        root = workspace_of(ctx)
        return _Place(root, resolve_in_workspace(root, user_path))
    name, inner = found
    if not name:
        return ToolResult.error(
            "is_directory", f"'{FILES_PREFIX}' holds the skills; use list_files to see them."
        )
    # The run's agent's skills: another agent's skill files are as absent as its skills.
    catalog = ctx.skill_catalog
    skill = catalog.get(name)
    if skill is None:
        available = ", ".join(catalog.names()) or "(none)"
        return ToolResult.error("not_found", f"There is no skill named '{name}'. Skills: {available}")
    try:
        # The skill's folder, not the workspace, is the root: links out of it are refused the same way.
        target = resolve_in_workspace(skill.folder, inner)
    except OutsideWorkspaceError:
        raise OutsideWorkspaceError(f"'{user_path}' is outside the folder of skill '{skill.name}'.") from None
    return _Place(skill.folder, target, f"{FILES_PREFIX}/{skill.name}")


def _guarded(handler: Handler[A]) -> Handler[A]:
    """Turn confinement and OS errors into ToolResult values at one boundary."""

    async def run(args: A, ctx: ToolContext) -> ToolResult:
        try:
            return await handler(args, ctx)
        except OutsideWorkspaceError as exc:
            return ToolResult.error("outside_workspace", str(exc))
        except FileNotFoundError:
            # exc.filename is the absolute path; the model only knows workspace-relative ones.
            return ToolResult.error("not_found", "No such file or folder.")
        except IsADirectoryError:
            return ToolResult.error("is_directory", "That path is a folder; use list_files to see inside it.")
        except NotADirectoryError:
            return ToolResult.error("not_a_directory", "A part of that path is a file, not a folder.")
        except PermissionError:
            return ToolResult.error("permission_denied", "Permission denied by the operating system.")
        except OSError as exc:
            return ToolResult.error("io_error", exc.strerror or str(exc))

    return run


# --- read_file ---------------------------------------------------------------------------------


def _read(
    root: Path, target: Path, offset: int, limit: int | None, max_bytes: int, prefix: str = ""
) -> ToolResult:
    rel = _display(root, target, prefix)
    if not target.exists():
        return ToolResult.error("not_found", f"No such file: '{rel}'.")
    if target.is_dir():
        return ToolResult.error("is_directory", f"'{rel}' is a folder; use list_files to see inside it.")
    with target.open("rb") as fh:
        # One byte past the cap tells us whether there was more without reading it all.
        data = fh.read(max_bytes + 1)
    truncated = len(data) > max_bytes
    data = data[:max_bytes]
    if b"\x00" in data:
        return ToolResult.error("binary_file", f"'{rel}' looks like a binary file; only text can be read.")
    try:
        # Not final when truncated: the cap may split a multi-byte character, which is not an error.
        text = codecs.getincrementaldecoder("utf-8")().decode(data, final=not truncated)
    except UnicodeDecodeError:
        return ToolResult.error("not_text", f"'{rel}' is not UTF-8 text; only text files can be read.")

    lines = text.splitlines(keepends=True)
    notes: list[str] = []
    if truncated:
        notes.append(f"[truncated: the file is larger than {max_bytes} bytes; only the start was read]")
    if offset or limit is not None:
        if offset >= len(lines) and lines:
            return ToolResult.success(f"[offset {offset} is past the end: '{rel}' has {len(lines)} lines]")
        end = len(lines) if limit is None else min(len(lines), offset + limit)
        text = "".join(lines[offset:end])
        if offset or end < len(lines):
            notes.append(f"[lines {offset}-{end - 1} (0-based) of {len(lines)}]")
    if notes:
        text = text + ("" if text.endswith("\n") or not text else "\n") + "\n".join(notes)
    return ToolResult.success(text)


class ReadFileArgs(Arguments):
    path: PathText = Field(description=PATH_DESCRIPTION)
    # Refused, not clamped, when out of range: a wrong line number would read the wrong lines.
    offset: NonNegative = Field(0, description="First line to return, 0-based.")
    limit: Positive | None = Field(None, description="How many lines to return.")


@_guarded
async def _read_file(args: ReadFileArgs, ctx: ToolContext) -> ToolResult:
    place = _place(ctx, args.path)
    if isinstance(place, ToolResult):
        return place
    max_bytes = ctx.settings.tools.file_max_bytes
    return await asyncio.to_thread(
        _read, place.root, place.target, args.offset, args.limit, max_bytes, place.prefix
    )


read_file = typed_tool(
    "read_file",
    "Read a UTF-8 text file from the workspace folder. Use offset and limit (in lines) to read "
    "part of a long file. Binary files are refused.",
    ReadFileArgs,
    _read_file,
)


# --- write_file --------------------------------------------------------------------------------


def _write(root: Path, target: Path, data: bytes, append: bool) -> ToolResult:
    rel = _display(root, target)
    if target.is_dir():
        return ToolResult.error("is_directory", f"'{rel}' is a folder; give a file path to write.")
    # target is resolved and inside root, so every parent created here is inside root too.
    target.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    # O_NOFOLLOW closes the gap where a link appears at the target between the check and the open.
    flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(target, flags, 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    verb = "Appended" if append else "Wrote"
    return ToolResult.success(f"{verb} {len(data)} bytes to '{rel}'.")


class WriteFileArgs(Arguments):
    path: PathText = Field(description=PATH_DESCRIPTION)
    content: str = Field(description="The text to write.")
    append: bool = Field(False, description="Add to the end instead of replacing the file.")


@_guarded
async def _write_file(args: WriteFileArgs, ctx: ToolContext) -> ToolResult:
    data = args.content.encode("utf-8")
    max_bytes = ctx.settings.tools.file_max_bytes
    if len(data) > max_bytes:
        return ToolResult.error(
            "too_large", f"Content is {len(data)} bytes; the limit is {max_bytes} bytes (file_max_bytes)."
        )
    if skill_path(args.path) is not None:
        return ToolResult.error(
            "read_only",
            f"Files under {FILES_PREFIX}/ belong to skills and cannot be written; write in the workspace.",
        )
    root = workspace_of(ctx)
    target = resolve_in_workspace(root, args.path)
    return await asyncio.to_thread(_write, root, target, data, args.append)


write_file = typed_tool(
    "write_file",
    "Write a UTF-8 text file in the workspace folder, creating folders as needed. Replaces the "
    "file unless append is true. Returns the number of bytes written.",
    WriteFileArgs,
    _write_file,
    plain=as_written,
)


# --- list_files --------------------------------------------------------------------------------


def _entry(root: Path, entry: os.DirEntry[str], prefix: str = "") -> dict[str, Any]:
    rel = _display(root, Path(entry.path), prefix)
    # Links are reported, not followed: following them could leak the size of files outside the
    # workspace and loop forever on a link to an ancestor. read_file still works through a link
    # that stays inside.
    if entry.is_symlink():
        return {"path": rel, "type": "symlink"}
    if entry.is_dir(follow_symlinks=False):
        return {"path": rel, "type": "dir"}
    return {"path": rel, "type": "file", "size": entry.stat(follow_symlinks=False).st_size}


def _list(root: Path, folder: Path, recursive: bool, cap: int, prefix: str = "") -> ToolResult:
    rel = _display(root, folder, prefix)
    if not folder.exists():
        return ToolResult.error("not_found", f"No such folder: '{rel}'.")
    if not folder.is_dir():
        return ToolResult.error("not_a_directory", f"'{rel}' is a file; use read_file to read it.")

    entries: list[dict[str, Any]] = []
    truncated = False
    # Shallow entries are collected first, so when the cap bites the model still sees the top
    # levels; the final sort then puts each folder's contents right after the folder.
    pending: deque[Path] = deque([folder])
    while pending and not truncated:
        current = pending.popleft()
        with os.scandir(current) as it:
            children = sorted(it, key=lambda e: e.name)
        for child in children:
            if len(entries) >= cap:
                truncated = True
                break
            item = _entry(root, child, prefix)
            entries.append(item)
            if recursive and item["type"] == "dir":
                pending.append(Path(child.path))
    entries.sort(key=lambda e: e["path"])

    result: dict[str, Any] = {"path": rel, "entries": entries}
    if truncated:
        result["truncated"] = True
        result["note"] = f"Only the first {cap} entries are shown; list a subfolder to see more."
    return ToolResult.success(result)


class ListFilesArgs(Arguments):
    path: PathText = Field(".", description="Folder relative to the workspace; default '.'.")
    recursive: bool = Field(False, description="Include everything below, not just children.")


@_guarded
async def _list_files(args: ListFilesArgs, ctx: ToolContext) -> ToolResult:
    found = skill_path(args.path)
    if found is not None and not found[0]:
        # .skills itself: a folder of each configured skill.
        entries = [{"path": f"{FILES_PREFIX}/{name}", "type": "dir"} for name in ctx.skill_catalog.names()]
        return ToolResult.success({"path": FILES_PREFIX, "entries": entries})
    place = _place(ctx, args.path)
    if isinstance(place, ToolResult):
        return place
    return await asyncio.to_thread(
        _list, place.root, place.target, args.recursive, MAX_LIST_ENTRIES, place.prefix
    )


list_files = typed_tool(
    "list_files",
    "List a folder in the workspace: each entry's path (relative to the workspace), type "
    f"(dir, file or symlink) and size in bytes. At most {MAX_LIST_ENTRIES} entries.",
    ListFilesArgs,
    _list_files,
)


def files_group() -> ToolGroup:
    """The `files` group: read_file, write_file, list_files and send_file, all confined to the workspace."""
    return ToolGroup(
        name="files",
        description="Read, write, list and send files in the bot's workspace folder",
        tools=(read_file, write_file, list_files, send_file),
    )
