"""Config of MCP servers: [mcp] and its [[mcp.servers]] entries, each a lazily connected tool group."""

from __future__ import annotations

import os
import re
from pathlib import Path

from pydantic import Field, SecretStr, field_validator, model_validator

from bridge.config.base import Section

# Also the group's name in "Available Tool Groups" and a prefix of its tools' names, so it keeps to
# what a function name may hold (and leaves room in the 64 characters for the tool's own name).
_SERVER_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
# `${NAME}` in an env or headers value is read from Bridge's environment: the operator names each
# variable a server gets, so nothing else of Bridge's environment (its tokens) reaches it.
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand(value: str, where: str) -> str:
    """`value` with each ${NAME} replaced by that environment variable; an unset one is an error."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise ValueError(f"{where} uses ${{{name}}}, which is not set in Bridge's environment")
        return os.environ[name]

    return _VARIABLE.sub(one, value)


class McpServerSettings(Section):
    """One [[mcp.servers]] entry: a stdio command or a streamable-HTTP URL, listed as a tool group."""

    name: str
    # The group's line in "Available Tool Groups": what the server is for, in a few words.
    description: str
    # stdio: the command that starts the server, its arguments, extra environment and folder.
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    # The server's whole environment beyond PATH, HOME, USER, LOGNAME, SHELL and TERM.
    env: dict[str, SecretStr] = Field(default_factory=dict)
    cwd: Path | None = None
    # Streamable HTTP: the endpoint, and headers sent with each request (e.g. Authorization).
    url: str | None = None
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    # Connecting, listing and each call; a tool named in [tools] timeouts uses that instead.
    timeout_s: float = Field(30.0, gt=0, le=3600)
    # Only these of the server's tools are offered (its own names); empty offers them all.
    tools: list[str] = Field(default_factory=list)
    disabled: bool = False

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _SERVER_NAME.match(value):
            raise ValueError(
                f"{value!r}: 1-32 characters of a-z, 0-9, _ and -, starting with a letter or digit"
            )
        return value

    @field_validator("description")
    @classmethod
    def _description(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("say in a few words what the server is for; the model picks groups by it")
        return value

    @field_validator("env", "headers")
    @classmethod
    def _expanded(cls, value: dict[str, SecretStr]) -> dict[str, SecretStr]:
        return {k: SecretStr(expand(v.get_secret_value(), k)) for k, v in value.items()}

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"{value!r} is not an http:// or https:// URL")
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSettings:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                f"server {self.name!r}: set either `command` (a stdio server) or `url` (streamable HTTP)"
            )
        if self.url is not None and (self.args or self.env or self.cwd):
            raise ValueError(f"server {self.name!r}: args, env and cwd are for a `command` server")
        if self.command is not None and self.headers:
            raise ValueError(f"server {self.name!r}: headers are for a `url` server")
        return self

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"


class McpSettings(Section):
    """[mcp]: the MCP servers whose tools the model may load, and how long an unused one stays open."""

    # A server no call used for this long is closed (its process ended); the next call reopens it.
    idle_close_s: float = Field(600.0, gt=0)
    servers: list[McpServerSettings] = Field(default_factory=list)

    @field_validator("servers")
    @classmethod
    def _unique(cls, servers: list[McpServerSettings]) -> list[McpServerSettings]:
        seen: set[str] = set()
        for server in servers:
            if server.name in seen:
                raise ValueError(f"two servers are named {server.name!r}; each is a tool group of its own")
            seen.add(server.name)
        return servers
