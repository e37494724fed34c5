"""Config of [admin]: the admin HTTP server inside `bridge run`."""

from __future__ import annotations

from pydantic import Field, SecretStr, model_validator

from bridge.config.base import Section, is_loopback


class AdminSettings(Section):
    """The admin HTTP server inside `bridge run`: health, metrics, the API and the dashboard."""

    enabled: bool = False
    listen: str = "127.0.0.1"
    port: int = Field(8765, ge=1, le=65535)
    # Bearer token (or the login form's) for every route. Unset on a loopback address, the first start
    # makes one and keeps it in admin.token beside the database (`bridge admin` prints the URL;
    # `bridge admin --rotate-token` replaces it).
    token: SecretStr = SecretStr("")
    # Open connections past this close the oldest still sending no request header, or are refused
    # (503); a connection with no whole header this long after opening is closed (bridge/serving.py).
    max_connections: int = Field(256, ge=1, le=100_000)
    header_timeout_s: float = Field(10.0, gt=0, le=300)

    @model_validator(mode="after")
    def _safe(self) -> AdminSettings:
        token = self.token.get_secret_value()
        if token and len(token) < 16:
            raise ValueError("token must be at least 16 characters (e.g. `openssl rand -hex 24`)")
        if self.enabled and not token and not is_loopback(self.listen):
            raise ValueError(
                f"token is required when listen ({self.listen}) is not a loopback address: anyone who can "
                "reach the port could read every chat (or BRIDGE_ADMIN__TOKEN)"
            )
        return self
