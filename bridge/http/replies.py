"""The admin API's error answers and request bodies, one way for every route."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from aiohttp import web

ErrorT = TypeVar("ErrorT", bound=web.HTTPError)


def _error(kind: type[ErrorT], error: str, detail: str) -> ErrorT:
    return kind(text=json.dumps({"error": error, "detail": detail}), content_type="application/json")


def bad_request(detail: str) -> web.HTTPBadRequest:
    return _error(web.HTTPBadRequest, "bad_request", detail)


def not_found(detail: str) -> web.HTTPNotFound:
    return _error(web.HTTPNotFound, "not_found", detail)


def forbidden(detail: str) -> web.HTTPForbidden:
    return _error(web.HTTPForbidden, "forbidden", detail)


def conflict(detail: str) -> web.HTTPConflict:
    """The request is understood, but what it names is in a state that does not allow it."""
    return _error(web.HTTPConflict, "conflict", detail)


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
