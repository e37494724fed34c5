"""What tool schemas cost in tokens, as `bridge mcp list` and the dashboard's Tools page show it:
counted on the JSON a request carries (bridge.tools.base.schemas_json)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

# Without a tokenizer installed, tokens are estimated at four characters each (marked "~").
CHARS_PER_TOKEN = 4


@cache
def token_counter() -> tuple[Callable[[str], int], str]:
    """A function counting a text's tokens, and how: "" where bpe-openai is installed (o200k_base,
    counted), "~" where they are estimated at CHARS_PER_TOKEN characters a token."""
    try:
        import bpe_openai  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return (lambda text: -(-len(text) // CHARS_PER_TOKEN)), "~"
    encoding: Any = bpe_openai.get_encoding("o200k_base")
    return (lambda text: len(encoding.encode(text))), ""
