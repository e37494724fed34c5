"""The core tool load_skill: a configured skill's instructions, and the files beside them."""

from __future__ import annotations

from pydantic import Field

from bridge.skills import FILES_PREFIX, Skill
from bridge.tools.arguments import Arguments, Text, typed_tool
from bridge.tools.base import ToolContext, ToolResult

LOAD_SKILL = "load_skill"
READ_FILE = "read_file"


class LoadSkillArgs(Arguments):
    name: Text = Field(description="Name of the skill to load")


async def _load_skill(args: LoadSkillArgs, ctx: ToolContext) -> ToolResult:
    # The run's agent's skills ([agents.NAME] skills): one it may not use is not found.
    catalog = ctx.skill_catalog
    skill = catalog.get(args.name)
    if skill is None:
        available = ", ".join(catalog.names()) or "(none)"
        return ToolResult.error("not_found", f"Skill '{args.name}' not found. Available skills: {available}")
    # The run's system prompt reads this set: from the next request on it carries the instructions,
    # and later turns restore it from this call in history.
    ctx.loaded_skills.add(skill.name)
    body = skill.body or "(This skill has no instructions beyond its description.)"
    files = _files_line(skill) if ctx.registry.get(READ_FILE) is not None else ""
    return ToolResult.success(body + (f"\n\n{files}" if files else ""))


def _files_line(skill: Skill) -> str:
    if not skill.files:
        return ""
    paths = ", ".join(f"{FILES_PREFIX}/{skill.name}/{path}" for path in skill.files)
    more = (
        f" (and {skill.more_files} more: list_files path='{FILES_PREFIX}/{skill.name}')"
        if skill.more_files
        else ""
    )
    return f"Files of this skill, for read_file (tool group 'files'): {paths}{more}"


load_skill = typed_tool(
    LOAD_SKILL,
    "Load a skill listed under 'Available Skills': returns its instructions, which then stay in "
    "effect for the rest of this conversation.",
    LoadSkillArgs,
    _load_skill,
)


__all__ = ["LOAD_SKILL", "load_skill"]
