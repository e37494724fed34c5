"""The base of every config section (unknown keys are errors that name the key), and the checks and
redaction of the URLs and addresses that sections hold."""

from __future__ import annotations

import ipaddress
import re

from pydantic import BaseModel, ConfigDict

REDACTED = "<redacted>"
# scheme://userinfo@: the userinfo ends at the last "@" before the path, query or fragment.
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#\s]*)@")


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
