"""JSON parsing of untrusted text (model output, tool arguments) that fails only with ValueError."""

from __future__ import annotations

import json
from typing import Any


def loads(text: str | bytes) -> Any:
    """json.loads, except that input nested too deep is a ValueError too (json raises RecursionError),
    so one check covers every malformed input."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
