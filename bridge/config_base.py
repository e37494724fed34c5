"""The base of every config section: unknown keys are errors that name the key."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    # A typo in a key is an error that names the key, not a silently ignored setting.
    model_config = ConfigDict(extra="forbid")
