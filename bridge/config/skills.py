"""Config of [skills]: folders of skills, read and checked when the config loads."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, PrivateAttr, ValidationError, model_validator
from pydantic_core import InitErrorDetails

from bridge.config.base import Section
from bridge.skills import SkillCatalog, SkillError


class SkillsSettings(Section):
    """[skills]: each path is a skill folder (it holds a SKILL.md) or a folder of skill folders."""

    paths: list[Path] = Field(default_factory=list)
    # Read here, once: a malformed SKILL.md is a config error (check-config, a start, a reload),
    # never something a run finds out.
    _catalog: SkillCatalog = PrivateAttr(default_factory=SkillCatalog)

    @model_validator(mode="after")
    def _read_skills(self) -> SkillsSettings:
        try:
            self._catalog = SkillCatalog.load(self.paths)
        except SkillError as exc:
            # Raised as the field's own error, so each problem is reported under skills.paths.
            raise ValidationError.from_exception_data(
                type(self).__name__,
                [
                    InitErrorDetails(
                        type="value_error",
                        loc=("paths",),
                        input=[str(p) for p in self.paths],
                        ctx={"error": ValueError(problem)},
                    )
                    for problem in exc.problems
                ],
            ) from None
        return self

    @property
    def catalog(self) -> SkillCatalog:
        """The skills found under `paths` when the config was loaded."""
        return self._catalog


__all__ = ["SkillsSettings"]
