"""Config of [tools]: the workspace, timeouts, limits, manifests and disabled tools."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field

from bridge.config.base import Section


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
