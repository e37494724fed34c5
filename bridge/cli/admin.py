"""`bridge admin` and `bridge health`: where the admin server is, and whether it says all is well."""

from __future__ import annotations

import httpx

from bridge.config import Settings

HEALTH_TIMEOUT_S = 5.0


def show_admin(settings: Settings) -> int:
    from bridge.http.auth import read_token, token_file
    from bridge.http.server import admin_url

    if not settings.admin.enabled:
        print(
            "The admin server is off: set [admin] enabled = true (or BRIDGE_ADMIN__ENABLED=true) and restart."
        )
        return 1
    url = admin_url(settings)
    print(f"Admin server: {url}  (log in at {url}login)")
    if settings.admin.token.get_secret_value():
        print(
            "Token: [admin] token (or BRIDGE_ADMIN__TOKEN); API clients send it as 'Authorization: Bearer …'."
        )
        return 0
    token = read_token(settings)
    if token is None:
        print(
            f"Token: made by `bridge run` at its start, in {token_file(settings)} (not there yet: start it)."
        )
        return 1
    # Printed for the operator at this terminal only; the file is readable by its owner alone.
    print(f"Token: {token}  (from {token_file(settings)}, new at each start of `bridge run`)")
    return 0


def check_health(settings: Settings) -> int:
    """For a container's HEALTHCHECK: GET /healthz with the token; 0 when it answers 200."""
    from bridge.http.auth import read_token
    from bridge.http.server import admin_url

    if not settings.admin.enabled:
        print("unhealthy: the admin server is off ([admin] enabled = false)")
        return 1
    token = read_token(settings) or ""
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
