"""Skills: finding and parsing SKILL.md files, load_skill, the prompt's listing, and .skills/ paths."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
from pydantic import ValidationError

from bridge.agent.prompt import build_system_prompt
from bridge.app.registry import build_registry
from bridge.config import Settings
from bridge.sessions.authority import Authorities, Authority
from bridge.skills import DESCRIPTION_MAX, MAX_LISTED_FILES, SkillCatalog, SkillError
from bridge.store.base import SessionRow
from bridge.tools.base import ToolContext, ToolResult
from bridge.tools.builtin.files import list_files, read_file, write_file
from bridge.tools.builtin.skills import load_skill
from bridge.tools.registry import ToolRegistry


def write_skill(
    folder: Path, name: str, description: str = "Use it for tests.", body: str = "Do it well.\n"
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: {description}\n---\n{body}", encoding="utf-8"
    )
    return folder


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    """A folder of two skills (pdf-forms with files beside it, writing) and a folder that is none."""
    root = tmp_path / "skills"
    pdf = write_skill(root / "pdf-forms", "pdf-forms", "Fill in PDF forms.", "# PDF forms\nSee forms.md.\n")
    (pdf / "forms.md").write_text("Field names are case sensitive.\n", encoding="utf-8")
    (pdf / "scripts").mkdir()
    (pdf / "scripts" / "fill.py").write_text("print('fill')\n", encoding="utf-8")
    (pdf / ".hidden").write_text("not listed\n", encoding="utf-8")
    write_skill(root / "writing", "writing", "House style for\n  long texts.", "Short sentences.\n")
    (root / "assets").mkdir()  # no SKILL.md: not a skill
    (root / "assets" / "logo.txt").write_text("logo\n", encoding="utf-8")
    return root


def settings_with(*paths: Path, **sections: Any) -> Settings:
    return Settings(skills={"paths": [str(p) for p in paths]}, **sections)


def context(settings: Settings) -> ToolContext:
    return ToolContext(
        settings=settings,
        store=None,  # type: ignore[arg-type]  # neither load_skill nor the files tools touch it
        registry=build_registry(settings),
        session=None,  # type: ignore[arg-type]
        run_id="r",
        authority=Authority("owner", "main"),
        authorities=Authorities(()),
    )


@pytest.fixture
def ctx(skills: Path, tmp_path: Path) -> ToolContext:
    return context(settings_with(skills, tools={"workspace": str(tmp_path / "workspace")}))


async def call(tool: Any, ctx: ToolContext, **args: Any) -> ToolResult:
    result: ToolResult = await tool(args, ctx)
    return result


# -- finding and parsing ------------------------------------------------------------------------


def test_a_folder_of_skills_yields_each_subfolder_with_a_skill_md(skills: Path) -> None:
    catalog = SkillCatalog.load([skills])
    assert catalog.names() == ["pdf-forms", "writing"]
    pdf = catalog.get("pdf-forms")
    assert pdf is not None
    assert pdf.description == "Fill in PDF forms."
    assert pdf.body == "# PDF forms\nSee forms.md."
    assert pdf.folder == (skills / "pdf-forms").resolve()
    assert pdf.files == ("forms.md", "scripts/fill.py")
    writing = catalog.get("writing")
    assert writing is not None and writing.description == "House style for long texts."


def test_a_path_that_is_itself_a_skill_is_one_skill(tmp_path: Path) -> None:
    folder = write_skill(tmp_path / "solo", "solo")
    assert SkillCatalog.load([folder]).names() == ["solo"]


def test_other_front_matter_keys_a_bom_and_crlf_line_ends_are_accepted(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    folder.mkdir()
    text = "---\r\nname: s\r\ndescription: >\r\n  Folded text.\r\nlicense: MIT\r\n---\r\nBody.\r\n"
    (folder / "SKILL.md").write_bytes(b"\xef\xbb\xbf" + text.encode())
    skill = SkillCatalog.load([folder]).get("S ")
    assert skill is not None
    assert (skill.name, skill.description, skill.body) == ("s", "Folded text.", "Body.")


def test_past_the_cap_load_skill_says_how_many_files_more(tmp_path: Path) -> None:
    folder = write_skill(tmp_path / "many", "many")
    for n in range(MAX_LISTED_FILES + 3):
        (folder / f"f{n:03}.txt").write_text("x", encoding="utf-8")
    skill = SkillCatalog.load([folder]).get("many")
    assert skill is not None
    assert (len(skill.files), skill.more_files) == (MAX_LISTED_FILES, 3)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("Just text, no front matter.\n", "no front matter"),
        ("---\nname: x\ndescription: y\n", "not closed by a '---' line"),
        ("---\nname: [x\ndescription: y\n---\n", "not valid YAML"),
        ("---\n- name\n- description\n---\n", "must be YAML keys"),
        ("---\ndescription: y\n---\n", "has no name"),
        ("---\nname: Not A Name\ndescription: y\n---\n", "'Not A Name' is not a skill name"),
        ("---\nname: x\n---\n", "has no description"),
        ("---\nname: x\ndescription: '  '\n---\n", "has no description"),
        (f"---\nname: x\ndescription: {'d' * (DESCRIPTION_MAX + 1)}\n---\n", "at most 1024"),
    ],
)
def test_malformed_front_matter_is_refused_naming_the_file_and_why(
    tmp_path: Path, text: str, reason: str
) -> None:
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "SKILL.md").write_text(text, encoding="utf-8")
    with pytest.raises(SkillError) as caught:
        SkillCatalog.load([folder])
    assert str(caught.value).startswith(f"{folder / 'SKILL.md'}: ")
    assert reason in str(caught.value)


def test_every_problem_is_reported_at_once_under_skills_paths(skills: Path, tmp_path: Path) -> None:
    write_skill(tmp_path / "again" / "writing", "writing")
    (tmp_path / "a-file").write_text("x", encoding="utf-8")
    with pytest.raises(ValidationError) as caught:
        settings_with(skills, tmp_path / "again", tmp_path / "missing", tmp_path / "a-file")
    errors = caught.value.errors()
    assert {e["loc"] for e in errors} == {("skills", "paths")}
    messages = [str(e["msg"]) for e in errors]
    assert any("'writing' is taken by" in m and str(skills / "writing") in m for m in messages)
    assert any(m.endswith(f"{tmp_path / 'missing'}: no such folder") for m in messages)
    assert any(f"{tmp_path / 'a-file'}: not a folder" in m for m in messages)


# -- load_skill ---------------------------------------------------------------------------------


def test_load_skill_is_a_core_tool_only_where_skills_are_configured(skills: Path) -> None:
    assert build_registry(Settings()).get("load_skill") is None
    registry = build_registry(settings_with(skills))
    assert "load_skill" in [t.name for t in registry.core_tools()]
    disabled = build_registry(settings_with(skills, tools={"disabled": ["load_skill"]}))
    assert disabled.get("load_skill") is None


async def test_load_skill_returns_the_body_and_the_files_beside_it(ctx: ToolContext) -> None:
    result = await call(load_skill, ctx, name="pdf-forms")
    assert result.ok, result.content
    assert result.content.startswith("# PDF forms\nSee forms.md.\n\n")
    assert ".skills/pdf-forms/forms.md, .skills/pdf-forms/scripts/fill.py" in result.content
    assert ".hidden" not in result.content
    assert ctx.loaded_skills == {"pdf-forms"}


async def test_a_skill_name_is_found_whatever_its_case_and_spaces(ctx: ToolContext) -> None:
    result = await call(load_skill, ctx, name=" Writing ")
    assert result.ok
    assert result.content == "Short sentences."
    assert ctx.loaded_skills == {"writing"}


async def test_an_unknown_skill_is_not_found_and_the_available_ones_are_named(ctx: ToolContext) -> None:
    result = await call(load_skill, ctx, name="cooking")
    assert result.code == "not_found"
    assert "Available skills: pdf-forms, writing" in result.content
    assert ctx.loaded_skills == set()


async def test_without_the_files_group_no_files_are_offered(skills: Path) -> None:
    ctx = context(settings_with(skills, tools={"disabled": ["files"]}))
    result = await call(load_skill, ctx, name="pdf-forms")
    assert result.ok
    assert ".skills/" not in result.content


# -- the system prompt --------------------------------------------------------------------------


def prompt(settings: Settings, loaded: set[str]) -> str:
    session = SessionRow("s1", "main", 0.0, 0.0, None, "console", "dm", None)
    return build_system_prompt(settings, build_registry(settings), session, set(), [], None, loaded)


def test_the_prompt_lists_name_and_description_only_until_a_skill_is_loaded(skills: Path) -> None:
    text = prompt(settings_with(skills), set())
    assert "## Available Skills" in text
    assert "- pdf-forms: Fill in PDF forms." in text
    assert "- writing: House style for long texts." in text
    assert "Short sentences." not in text and "## Skill:" not in text


def test_a_loaded_skill_is_marked_and_its_body_is_in_the_prompt(skills: Path) -> None:
    text = prompt(settings_with(skills), {"writing", "gone-since"})
    assert "- writing (loaded): House style" in text
    assert "## Skill: writing\nShort sentences." in text
    # A skill loaded once but no longer configured is dropped without a word.
    assert "gone-since" not in text


def test_without_skills_or_with_load_skill_disabled_the_prompt_has_no_skill_section(skills: Path) -> None:
    assert "Skill" not in prompt(Settings(), {"writing"})
    off = settings_with(skills, tools={"disabled": ["load_skill"]})
    assert "Skill" not in prompt(off, {"writing"})


# -- the files of a skill -----------------------------------------------------------------------


async def test_read_file_reads_a_file_beside_a_skill_md(ctx: ToolContext) -> None:
    result = await call(read_file, ctx, path=".skills/pdf-forms/forms.md")
    assert result.ok
    assert result.content == "Field names are case sensitive.\n"
    nested = await call(read_file, ctx, path="./.skills/pdf-forms/scripts/fill.py")
    assert nested.content == "print('fill')\n"


async def test_paths_in_answers_about_skill_files_are_written_as_the_model_wrote_them(
    ctx: ToolContext,
) -> None:
    missing = await call(read_file, ctx, path=".skills/pdf-forms/nope.md")
    assert missing.code == "not_found" and "'.skills/pdf-forms/nope.md'" in missing.content
    folder = await call(read_file, ctx, path=".skills/pdf-forms/scripts")
    assert folder.code == "is_directory" and "'.skills/pdf-forms/scripts'" in folder.content


async def test_list_files_lists_the_skills_and_a_skills_folder(ctx: ToolContext) -> None:
    top = json.loads((await call(list_files, ctx, path=".skills")).content)
    assert [e["path"] for e in top["entries"]] == [".skills/pdf-forms", ".skills/writing"]
    one = json.loads((await call(list_files, ctx, path=".skills/pdf-forms", recursive=True)).content)
    assert one["path"] == ".skills/pdf-forms"
    assert [e["path"] for e in one["entries"]] == [
        ".skills/pdf-forms/.hidden",
        ".skills/pdf-forms/SKILL.md",
        ".skills/pdf-forms/forms.md",
        ".skills/pdf-forms/scripts",
        ".skills/pdf-forms/scripts/fill.py",
    ]


async def test_a_skill_that_is_not_configured_is_not_found(ctx: ToolContext) -> None:
    result = await call(read_file, ctx, path=".skills/cooking/SKILL.md")
    assert result.code == "not_found"
    assert "Skills: pdf-forms, writing" in result.content


async def test_paths_out_of_a_skills_folder_are_refused(
    ctx: ToolContext, skills: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret\n", encoding="utf-8")
    (skills / "pdf-forms" / "door").symlink_to(secret)
    for path in (
        ".skills/pdf-forms/../writing/SKILL.md",
        ".skills/pdf-forms/../../secret.txt",
        ".skills/pdf-forms/door",
    ):
        result = await call(read_file, ctx, path=path)
        assert result.code == "outside_workspace", (path, result.content)
        assert "outside the folder of skill 'pdf-forms'" in result.content
        assert "top secret" not in result.content
    listing = await call(list_files, ctx, path=".skills/pdf-forms/..")
    assert listing.code == "outside_workspace"


async def test_a_link_that_stays_inside_the_skills_folder_is_read(ctx: ToolContext, skills: Path) -> None:
    (skills / "pdf-forms" / "same.md").symlink_to(skills / "pdf-forms" / "forms.md")
    result = await call(read_file, ctx, path=".skills/pdf-forms/same.md")
    assert result.content == "Field names are case sensitive.\n"


async def test_write_file_refuses_skill_paths_and_changes_nothing(ctx: ToolContext, skills: Path) -> None:
    before = (skills / "pdf-forms" / "forms.md").read_text(encoding="utf-8")
    for path in (".skills/pdf-forms/forms.md", ".skills/new/x.md", ".skills"):
        result = await call(write_file, ctx, path=path, content="changed")
        assert result.code == "read_only", (path, result.content)
    assert (skills / "pdf-forms" / "forms.md").read_text(encoding="utf-8") == before
    assert not (ctx.settings.tools.workspace / ".skills").exists()


async def test_a_skill_called_like_a_tool_is_answered_with_how_to_load_it(ctx: ToolContext) -> None:
    from bridge.agent.toolcalls import ToolCaller
    from bridge.llm.base import ToolCall

    caller = ToolCaller(ctx.settings, ctx.store, cast(ToolRegistry, ctx.registry))
    result = await caller.execute(ctx, ToolCall("c", "pdf-forms", "{}"))
    assert result.code == "not_loaded"
    assert result.content == (
        "Error [not_loaded]: 'pdf-forms' is a skill, not a tool. Call load_skill with name='pdf-forms' "
        "to read its instructions."
    )
