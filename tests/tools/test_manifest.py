"""Tool groups from JSON manifests, and how build_registry wires them with [tools] settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bridge.app.registry import build_registry
from bridge.config import Settings
from bridge.errors import ConfigError, ManifestError
from bridge.tools.base import ToolContext, ToolResult
from bridge.tools.manifest import load_manifest, manifest_files
from tests.tools.conftest import MakeContext

HANDLER = "tests.tools.test_manifest:handler"


async def handler(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """A manifest handler returning a dict."""
    return {"echo": args.get("text"), "run": ctx.run_id}


async def text_handler(args: dict[str, Any], ctx: ToolContext) -> str:
    return f"hello {args.get('name', 'nobody')}"


async def result_handler(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    return ToolResult.error("upstream", "the service said no")


def sync_handler(args: dict[str, Any], ctx: ToolContext) -> str:
    return "not async"


NOT_CALLABLE = "just a string"


def entry(name: str, handler_spec: str = HANDLER, **extra: Any) -> dict[str, Any]:
    return {"name": name, "description": f"Does {name}", "handler": handler_spec, **extra}


def write(folder: Path, file_name: str, entries: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file_name
    path.write_text(json.dumps(entries), encoding="utf-8")
    return path


@pytest.fixture
def manifests(tmp_path: Path) -> Path:
    return tmp_path / "manifests"


# ------------------------------------------------------------------------------------------ loading


def test_meta_entry_gives_display_name_and_description_and_is_not_a_tool(manifests: Path) -> None:
    """TEST-040-10."""
    path = write(
        manifests,
        "google_gmail.json",
        [
            {"_meta": {"display_name": "Gmail", "description": "Email: search, read & send <fast>"}},
            entry("gmail_search"),
            entry("gmail_read"),
        ],
    )
    group = load_manifest(path)
    assert group.name == "google_gmail"
    assert group.display_name == "Gmail"
    assert group.title == "Gmail"
    assert group.description == "Email: search, read & send <fast>"
    assert [t.name for t in group.tools] == ["gmail_search", "gmail_read"]
    assert "_meta" not in {t.name for t in group.tools}


def test_without_meta_names_come_from_the_file_and_the_tools(manifests: Path) -> None:
    """TEST-040-11."""
    group = load_manifest(write(manifests, "google_drive.json", [entry("drive_list"), entry("drive_upload")]))
    assert group.name == "google_drive"
    assert group.display_name == "Google Drive"
    assert "drive_list" in group.description
    assert "drive_upload" in group.description


def test_auto_description_of_a_large_group_stays_short(manifests: Path) -> None:
    group = load_manifest(write(manifests, "big.json", [entry(f"big_{i}") for i in range(20)]))
    assert "big_0" in group.description
    assert "big_19" not in group.description
    assert "more" in group.description


def test_meta_only_manifest_is_an_empty_group(manifests: Path) -> None:
    group = load_manifest(write(manifests, "later.json", [{"_meta": {"description": "Coming soon"}}]))
    assert group.tools == ()
    assert group.description == "Coming soon"
    assert group.display_name == "Later"


def test_manifest_parameters_and_timeout_are_kept(manifests: Path) -> None:
    schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    group = load_manifest(write(manifests, "echo.json", [entry("echo", parameters=schema, timeout_s=5)]))
    [tool] = group.tools
    assert tool.parameters == schema
    assert tool.timeout_s == 5
    assert tool.schema()["function"]["name"] == "echo"


def test_parameters_default_to_an_empty_object(manifests: Path) -> None:
    [tool] = load_manifest(write(manifests, "echo.json", [entry("echo")])).tools
    assert tool.parameters == {"type": "object", "properties": {}}


@pytest.mark.parametrize(
    ("bad_entry", "reason"),
    [
        (entry("t", "tests.tools.no_such_module:handler"), "cannot be imported"),
        (entry("t", "tests.tools.test_manifest:no_such_function"), "cannot be imported"),
        (entry("t", "tests.tools.test_manifest"), "cannot be imported"),
        (entry("t", ":handler"), "cannot be imported"),
        (entry("t", "tests.tools.test_manifest:sync_handler"), "must be an async function"),
        (entry("t", "tests.tools.test_manifest:NOT_CALLABLE"), "must be an async function"),
        ({"description": "no name", "handler": HANDLER}, "'name' is required"),
        (entry(""), "'name' is required"),
        ({"name": "t", "handler": HANDLER}, "'description' is required"),
        ({"name": "t", "description": "no handler"}, "'handler' is required"),
        (entry("t", parameters=[]), "'parameters'"),
        (entry("t", parameters={"type": "string"}), "'parameters'"),
        (entry("t", timeout_s=0), "'timeout_s'"),
        (entry("t", timeout_s="fast"), "'timeout_s'"),
        (entry("t", timeout_s=True), "'timeout_s'"),
        (entry("gmail search"), "must match [a-zA-Z0-9_-]"),
        (entry("x" * 65), "at most 64"),
        ("not an object", "must be a JSON object"),
        ({"_meta": "Gmail"}, "_meta must be an object"),
    ],
)
def test_bad_entry_raises_manifest_error_naming_file_and_entry(
    manifests: Path, bad_entry: Any, reason: str
) -> None:
    path = write(manifests, "broken.json", [entry("fine"), bad_entry])
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    message = str(info.value)
    assert str(path) in message
    assert "entry 1" in message
    assert reason in message


def test_a_file_name_that_is_no_group_name_is_refused(manifests: Path) -> None:
    path = write(manifests, "My Tools.json", [entry("t")])
    with pytest.raises(ManifestError, match="'my tools' is not"):
        load_manifest(path)


@pytest.mark.parametrize("content", ['{"name": "t"}', '"tools"', "42", "null"])
def test_file_that_is_not_an_array_is_refused(manifests: Path, content: str) -> None:
    manifests.mkdir()
    path = manifests / "object.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ManifestError, match="JSON array") as info:
        load_manifest(path)
    assert str(path) in str(info.value)


def test_file_that_is_not_json_is_refused(manifests: Path) -> None:
    manifests.mkdir()
    path = manifests / "broken.json"
    path.write_text("[{", encoding="utf-8")
    with pytest.raises(ManifestError, match="not readable as JSON") as info:
        load_manifest(path)
    assert str(path) in str(info.value)


def test_manifest_files_reads_folders_sorted_and_refuses_missing_paths(
    manifests: Path, tmp_path: Path
) -> None:
    b = write(manifests, "b.json", [])
    a = write(manifests, "a.json", [])
    (manifests / "notes.txt").write_text("ignored", encoding="utf-8")
    single = write(tmp_path / "other", "single.json", [])
    assert manifest_files([manifests, single]) == [a, b, single]
    with pytest.raises(ManifestError, match="does not exist"):
        manifest_files([tmp_path / "missing"])


# ---------------------------------------------------------------------------------------- handlers


async def test_handler_returning_a_dict_becomes_a_json_success(
    manifests: Path, make_ctx: MakeContext
) -> None:
    [tool] = load_manifest(write(manifests, "echo.json", [entry("echo")])).tools
    result = await tool.run({"text": "hi"}, make_ctx())
    assert result.ok
    assert json.loads(result.content) == {"echo": "hi", "run": "t"}


async def test_handler_returning_a_string_becomes_a_text_success(
    manifests: Path, make_ctx: MakeContext
) -> None:
    [tool] = load_manifest(write(manifests, "greet.json", [entry("greet", f"{__name__}:text_handler")])).tools
    result = await tool.run({"name": "Ann"}, make_ctx())
    assert result == ToolResult.success("hello Ann")


async def test_handler_returning_a_tool_result_is_passed_through(
    manifests: Path, make_ctx: MakeContext
) -> None:
    [tool] = load_manifest(write(manifests, "no.json", [entry("no", f"{__name__}:result_handler")])).tools
    result = await tool.run({}, make_ctx())
    assert result == ToolResult.error("upstream", "the service said no")


# ------------------------------------------------------------------------------------ build_registry


def test_build_registry_registers_manifest_groups(manifests: Path) -> None:
    write(manifests, "google_gmail.json", [{"_meta": {"description": "Email"}}, entry("gmail_search")])
    write(manifests, "pdf.json", [entry("pdf_info"), entry("pdf_extract_text")])
    registry = build_registry(Settings(tools={"manifests": [manifests]}))
    assert [g.name for g in registry.groups()][-2:] == ["google_gmail", "pdf"]
    assert registry.group_of("pdf_info") == "pdf"
    assert "- google_gmail: Email" in registry.group_listing()
    assert "pdf_info" not in {t.name for t in registry.active_tools(())}
    assert "pdf_info" in {t.name for t in registry.active_tools({"pdf"})}


def test_manifest_tool_colliding_with_a_builtin_tool_is_a_config_error(manifests: Path) -> None:
    write(manifests, "clock.json", [entry("get_current_time")])
    with pytest.raises(ConfigError, match="get_current_time"):
        build_registry(Settings(tools={"manifests": [manifests]}))


def test_manifest_group_colliding_with_a_builtin_group_is_a_config_error(manifests: Path) -> None:
    write(manifests, "web.json", [entry("web_search")])
    with pytest.raises(ConfigError, match="'web'"):
        build_registry(Settings(tools={"manifests": [manifests]}))


def test_broken_manifest_is_a_config_error_naming_the_file(manifests: Path) -> None:
    path = write(manifests, "broken.json", [entry("t", "tests.tools.test_manifest:sync_handler")])
    with pytest.raises(ConfigError, match=r"tools\.manifests") as info:
        build_registry(Settings(tools={"manifests": [manifests]}))
    assert str(path) in str(info.value)


def test_disabled_group_is_removed() -> None:
    registry = build_registry(Settings(tools={"disabled": ["web"]}))
    assert registry.group("web") is None
    assert registry.get("webfetch") is None
    assert "web" not in {g.name for g in registry.groups()}


def test_disabled_tool_is_removed_from_its_group() -> None:
    registry = build_registry(Settings(tools={"disabled": ["write_file", "search_history"]}))
    files = registry.group("files")
    assert files is not None
    assert [t.name for t in files.tools] == ["read_file", "list_files", "send_file"]
    assert registry.get("write_file") is None
    assert "search_history" not in {t.name for t in registry.core_tools()}


def test_disabled_may_name_manifest_tools_and_groups(manifests: Path) -> None:
    write(manifests, "pdf.json", [entry("pdf_info"), entry("pdf_render_page")])
    write(manifests, "extra.json", [entry("extra_tool")])
    settings = Settings(tools={"manifests": [manifests], "disabled": ["pdf_render_page", "extra"]})
    registry = build_registry(settings)
    pdf = registry.group("pdf")
    assert pdf is not None
    assert [t.name for t in pdf.tools] == ["pdf_info"]
    assert registry.group("extra") is None


def test_unknown_name_in_disabled_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"unknown tool or group name.*no_such_tool"):
        build_registry(Settings(tools={"disabled": ["web", "no_such_tool"]}))


def test_load_tool_group_cannot_be_disabled() -> None:
    with pytest.raises(ConfigError, match="load_tool_group"):
        build_registry(Settings(tools={"disabled": ["load_tool_group"]}))
