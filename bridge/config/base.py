"""The base of every config section (unknown keys are errors that name the key), the base of a
section whose key is read from an environment variable, and the checks and redaction of the URLs and
addresses that sections hold."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, PrivateAttr, SecretStr, field_validator, model_validator

REDACTED = "<redacted>"
# scheme://userinfo@: the userinfo ends at the last "@" before the path, query or fragment.
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#\s]*)@")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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


class KeyFromEnv(Section):
    """A section whose API key is never written in the config: `api_key_env` names the environment
    variable that holds it (none: no key, as for a local server), so the key stays out of config
    files and check-config's output.

    The key is read when the settings are loaded, so the log and trace redactors know it from the
    start (bridge.logs.secret_values reads private attributes); never a field, so never rendered. A
    section declares `api_key_env` itself, where its table lists it, and words its errors: whose key
    it is (WHOSE_KEY) and what a missing one means (WITHOUT_KEY).
    """

    WHOSE_KEY: ClassVar[str]  # e.g. "a profile's key"
    WITHOUT_KEY: ClassVar[str]  # e.g. "this profile has no API key"
    if TYPE_CHECKING:
        api_key_env: str | None
    _api_key: SecretStr = PrivateAttr(default_factory=lambda: SecretStr(""))

    @model_validator(mode="before")
    @classmethod
    def _no_key_in_file(cls, data: Any) -> Any:
        if isinstance(data, dict) and "api_key" in data:
            raise ValueError(
                f"api_key: {cls.WHOSE_KEY} is never written in the config; put it in an environment "
                "variable and name that variable in api_key_env"
            )
        return data

    @field_validator("api_key_env", check_fields=False)
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.match(value):
            raise ValueError(
                f"{value!r} is not an environment variable name (letters, digits and _), e.g. "
                "'OPENAI_API_KEY'; the key itself goes in that variable, not here"
            )
        return value

    @model_validator(mode="after")
    def _read_key(self) -> Self:
        if self.api_key_env:
            self._api_key = SecretStr(os.environ.get(self.api_key_env, ""))
        return self

    @property
    def api_key(self) -> SecretStr:
        return self._api_key

    @property
    def key_missing(self) -> bool:
        """The section names a key variable that is unset or empty."""
        return bool(self.api_key_env) and not self._api_key.get_secret_value()

    def missing_key(self, where: str) -> str:
        """check-config's line for a missing key, WHERE being the table's path (e.g. "tts")."""
        return (
            f"{where}.api_key_env: the environment variable {self.api_key_env} is not set, so "
            f"{self.WITHOUT_KEY}"
        )


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
