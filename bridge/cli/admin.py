"""`bridge admin` and `bridge health`: where the admin server is, and whether it says all is well.
Both find the running bot's token file through the config (`--config`), from any folder."""

from __future__ import annotations

import httpx

from bridge.cli.exits import fail
from bridge.config import Settings
from bridge.errors import ConfigError

HEALTH_TIMEOUT_S = 5.0
CONFIGURED = "[admin] token (or BRIDGE_ADMIN__TOKEN)"


def show_admin(settings: Settings, *, rotate: bool = False) -> int:
    """Print the admin server's URL and how to log in; with ROTATE, first replace the kept token."""
    from bridge.http.auth import read_token, token_file, write_token
    from bridge.http.server import admin_url

    if not settings.admin.enabled:
        print(
            "The admin server is off: set [admin] enabled = true (or BRIDGE_ADMIN__ENABLED=true) and restart."
        )
        return 1
    configured = bool(settings.admin.token.get_secret_value())
    if rotate and configured:
        print(f"The token is set in {CONFIGURED}: change it there and restart `bridge run`.")
        return 1
    path = token_file(settings)
    if rotate:
        try:
            write_token(path)
        except ConfigError as exc:
            return fail(exc)
        # The server reads the token once, at its start: simpler than re-reading a file on each request.
        print(
            f"New token written to {path}. Restart `bridge run` to use it: until then it expects the old "
            "one, so `bridge health` (which reads the new one) reports unhealthy."
        )
    url = admin_url(settings)
    print(f"Admin server: {url}  (log in at {url}login)")
    if configured:
        print(f"Token: {CONFIGURED}; API clients send it as 'Authorization: Bearer …'.")
        return 0
    token = read_token(settings)
    if token is None:
        print(f"Token: made by `bridge run` at its first start, in {path} (not there yet: start it).")
        return 1
    # Printed for the operator at this terminal only; the file is readable by its owner alone.
    print(
        f"Token: {token}  (from {path}, kept across restarts; `bridge admin --rotate-token` makes a new one)"
    )
    return 0


def check_health(settings: Settings) -> int:
    """For a container's HEALTHCHECK: GET /healthz with the token; 0 when it answers 200."""
    from bridge.http.auth import read_token, token_file
    from bridge.http.server import admin_url

    if not settings.admin.enabled:
        print("unhealthy: the admin server is off ([admin] enabled = false)")
        return 1
    token = read_token(settings)
    if token is None:
        # Never an empty "Bearer " header: say where the token was looked for instead.
        print(
            f"unhealthy: no admin token: {token_file(settings)} is missing or empty and {CONFIGURED} "
            "is not set; start `bridge run` (it writes the file), or give the bot's config with --config"
        )
        return 1
    try:
        # trust_env=False: a proxy from the environment must never sit between us and 127.0.0.1.
        answer = httpx.get(
            admin_url(settings) + "healthz",
            headers={"Authorization": f"Bearer {token}"},
            timeout=HEALTH_TIMEOUT_S,
            trust_env=False,
        )
    except httpx.HTTPError as exc:
        print(f"unhealthy: {type(exc).__name__}: {exc}")
        return 1
    healthy = answer.status_code == 200
    print(f"{'healthy' if healthy else 'unhealthy'}: {answer.status_code} {answer.text.strip()}")
    return 0 if healthy else 1
