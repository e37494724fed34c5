"""The base of every config section: unknown keys are errors that name the key."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    # A typo in a key is an error that names the key, not a silently ignored setting.
    model_config = ConfigDict(extra="forbid")


def url_setting(value: str | None, example: str, schemes: str = "https?") -> str | None:
    """A URL setting: unset stays None; otherwise it must have a scheme and a host."""
    if value is None or value == "":
        return None
    if not re.match(rf"^({schemes})://[^\s/]+", value):
        raise ValueError(f"must be a URL such as {example}")
    return value.rstrip("/")
