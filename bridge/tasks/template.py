"""A webhook's prompt template: {{body}}, {{body.a.b}}, {{hook}} and {{event_id}}, nothing that runs.

No format strings or Jinja on purpose: the body comes from outside, and `str.format` or a template
engine would let a crafted field reach attributes or code. A placeholder is a name and a path into
the JSON body, and its value is text.
"""

from __future__ import annotations

import json
import re
from typing import Any

PLACEHOLDER = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
_PATH = re.compile(r"^(?:(hook|event_id)|body((?:\.[A-Za-z0-9_-]+)*))$")
NAMES = (
    "{{body}}, {{body.some.field}} (a list item by its number: {{body.items.0}}), {{hook}} and {{event_id}}"
)


def problem(text: str) -> str | None:
    """What is wrong with a template, or None."""
    for match in PLACEHOLDER.finditer(text):
        if not _PATH.match(match.group(1)):
            return f"{match.group(0)} is not a placeholder; there are {NAMES}"
    return None


def lookup(value: Any, path: str) -> Any:
    """The value at a dotted path (`release.id`, `commits.0.id`) of a JSON value; None where absent."""
    for part in path.split("."):
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def _text(value: Any, *, whole: bool = False) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, indent=2 if whole else None)


def render(text: str, *, body: Any, hook: str, event_id: str) -> str:
    """The template with each placeholder replaced; a field the body lacks becomes empty."""

    def value(match: re.Match[str]) -> str:
        found = _PATH.match(match.group(1))
        if found is None:  # refused by the config check; left as written if one slips through
            return match.group(0)
        name, path = found.group(1), (found.group(2) or "").lstrip(".")
        if name is not None:
            return hook if name == "hook" else event_id
        return _text(lookup(body, path)) if path else _text(body, whole=True)

    return PLACEHOLDER.sub(value, text)
