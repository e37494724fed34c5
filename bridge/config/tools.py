"""Config of [tools]: the workspace, timeouts, limits, manifests and disabled tools, and the tools that
reach outside, each off until configured: [tools.web_search], [tools.exec], [tools.browser]."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator

from bridge.config.base import KeyFromEnv, Section, url_setting

SearchProvider = Literal["searxng", "brave"]


class WebSearchSettings(KeyFromEnv):
    """web_search in the `web` group: listed only once a provider is set. Brave's key is read from its
    variable with the settings, so the log and trace redactors know it (KeyFromEnv)."""

    # "searxng" (a self-hosted instance's JSON API, no key) or "brave" (the Brave Search API). Unset:
    # the tool is not offered.
    provider: SearchProvider | None = None
    # SearXNG: the instance's address (required). Brave: the API's address (its public one by default).
    base_url: str | None = None
    # Brave: the environment variable holding the API key (never the key itself, so it stays out of
    # config files and check-config).
    api_key_env: str = "BRAVE_API_KEY"
    max_results: int = Field(5, ge=1, le=20)
    # How long one query's results are reused: a model often repeats a search within a turn.
    cache_ttl_s: float = Field(300.0, ge=0)

    WHOSE_KEY = "the Brave Search API key"
    WITHOUT_KEY = "web_search with Brave answers that the key is missing"

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return url_setting(value, "http://127.0.0.1:8888")

    @property
    def enabled(self) -> bool:
        return self.provider is not None


class ExecSettings(Section):
    """The `exec` group (run_command, run_python): off by default, and run only inside bubblewrap."""

    enabled: bool = False
    # Let sandboxed commands reach the network. Off: the sandbox has no network at all.
    allow_network: bool = False
    # The bwrap binary; a bare name is looked up on PATH.
    bwrap: str = "bwrap"
    # The longest a command may run (a call may ask for less); the whole process group is killed then.
    max_timeout_s: float = Field(60.0, gt=0)
    max_memory_mb: int = Field(512, ge=16)
    max_processes: int = Field(64, ge=1)
    # Characters of stdout and stderr (each) returned to the model; the rest is cut and counted.
    max_output_chars: int = Field(20_000, ge=100)


class BrowserSettings(Section):
    """The `browser` group: Playwright driving Chromium, off by default."""

    enabled: bool = False
    # The Chromium binary Playwright drives (Debian's by default); never a browser Playwright downloads.
    executable: Path = Path("/usr/bin/chromium")
    # Seconds a session's browser context stays open with no tool call; then it is closed.
    idle_close_s: float = Field(300.0, gt=0)
    # Characters of page text snapshot() returns.
    max_chars: int = Field(20_000, ge=100)
    # Seconds a navigation or an action may take.
    timeout_s: float = Field(20.0, gt=0)


class ToolsSettings(Section):
    workspace: Path = Path("data/workspace")
    allow_private_network: bool = False
    default_timeout_s: float = Field(30.0, gt=0)
    # Per-tool overrides of default_timeout_s, e.g. { webfetch = 20 }.
    timeouts: dict[str, Annotated[float, Field(gt=0)]] = Field(default_factory=dict)
    # JSON manifests (files or folders of *.json) that define extra tool groups.
    manifests: list[Path] = Field(default_factory=list)
    web_max_bytes: int = Field(2_000_000, gt=0)
    web_max_chars: int = Field(20_000, gt=0)
    file_max_bytes: int = Field(1_000_000, gt=0)
    # Tool or group names the model never sees, e.g. ["web", "write_file"].
    disabled: list[str] = Field(default_factory=list)
    web_search: WebSearchSettings = Field(default_factory=WebSearchSettings)
    exec: ExecSettings = Field(default_factory=ExecSettings)
    browser: BrowserSettings = Field(default_factory=BrowserSettings)
