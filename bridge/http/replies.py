"""The admin API's error answers and request bodies, one way for every route."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web


def bad_request(detail: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(
        text=json.dumps({"error": "bad_request", "detail": detail}), content_type="application/json"
    )


def not_found(detail: str) -> web.HTTPNotFound:
    return web.HTTPNotFound(
        text=json.dumps({"error": "not_found", "detail": detail}), content_type="application/json"
    )


def forbidden(detail: str) -> web.HTTPForbidden:
    return web.HTTPForbidden(
        text=json.dumps({"error": "forbidden", "detail": detail}), content_type="application/json"
    )


def conflict(detail: str) -> web.HTTPConflict:
    """The request is understood, but what it names is in a state that does not allow it."""
    return web.HTTPConflict(
        text=json.dumps({"error": "conflict", "detail": detail}), content_type="application/json"
    )


async def body_of(request: web.Request, *, forms: bool = False) -> dict[str, Any]:
    """The request's JSON object (or, with `forms`, a form's fields); 400 for anything else."""
    if forms and request.content_type != "application/json":
        return dict(await request.post())
    try:
        data = await request.json()
    except ValueError:
        raise bad_request("the body must be JSON") from None
    if not isinstance(data, dict):
        raise bad_request("the body must be a JSON object")
    return data
