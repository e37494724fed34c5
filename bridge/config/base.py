"""The base of every config section (unknown keys are errors that name the key), and the checks and
redaction of the URLs and addresses that sections hold."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

REDACTED = "<redacted>"
# scheme://userinfo@: the userinfo ends at the last "@" before the path, query or fragment.
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#\s]*)@")


# The folder of the config file being read (bridge.config.io sets it around one validation); None:
# no file, so relative paths stay relative to the working directory.
_CONFIG_FOLDER: ContextVar[Path | None] = ContextVar("bridge_config_folder", default=None)


@contextlib.contextmanager
def relative_to(config_file: Path | None) -> Iterator[None]:
    """While validating inside this block, relative paths are taken from CONFIG_FILE's folder."""
    folder = Path(os.path.abspath(config_file)).parent if config_file is not None else None
    token = _CONFIG_FOLDER.set(folder)
    try:
        yield
    finally:
        _CONFIG_FOLDER.reset(token)


def rebase(value: Any) -> Any:
    """A Path (or a list of them) from a config file: relative ones joined to the file's folder, so
    `data/bridge.db` means the same file whatever folder `bridge` is started from. An absolute path,
    and anything read with no config file, is unchanged."""
    folder = _CONFIG_FOLDER.get()
    if folder is None:
        return value
    if isinstance(value, Path):
        return value if value.is_absolute() else folder / value
    if isinstance(value, list) and any(isinstance(item, Path) for item in value):
        return [rebase(item) for item in value]
    return value


class Section(BaseModel):
    # A typo in a key is an error that names the key, not a silently ignored setting.
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="after")
    def _rebase_paths(self) -> Section:
        # The one place relative paths are resolved: every Path setting of every section, defaults
        # included (defaults are not validated, so a field validator would miss them), from the file
        # or from a BRIDGE_* variable alike. A base class's after-validators run before a subclass's,
        # so a section's own checks (e.g. [skills] reading its folders) already see the resolved paths.
        for name in type(self).model_fields:
            value = getattr(self, name)
            rebased = rebase(value)
            if rebased is not value:
                # Into __dict__: a default stays unset (model_fields_set), as [llm] profiles rely on.
                self.__dict__[name] = rebased
        return self


def url_setting(value: str | None, example: str, schemes: str = "https?") -> str | None:
    """A URL setting: unset stays None; otherwise it must have a scheme and a host."""
    if value is None or value == "":
        return None
    if not re.match(rf"^({schemes})://[^\s/]+", value):
        raise ValueError(f"must be a URL such as {example}")
    return value.rstrip("/")


def mask_url(text: str) -> str:
    """The text with the user and password of every URL in it replaced by <redacted>."""
    return _URL_USERINFO.sub(rf"\g<scheme>{REDACTED}@", text)


def url_userinfo(text: str) -> list[str]:
    """The "user:password" part of each URL in the text, as written."""
    return [match.group("userinfo") for match in _URL_USERINFO.finditer(text) if match.group("userinfo")]


def is_loopback(host: str) -> bool:
    """Whether a listen address is reachable from this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything
