"""Markdown to the HTML subset Telegram's Bot API accepts with parse_mode=HTML.

The walk over the Markdown, lists, tables and quotes are bridge.markup's, shared with the other
platforms; what is Telegram's own is here: its spoiler, tg:// links, and no code inside a link.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from mistune.core import BlockState

from bridge.markup import HTMLRenderer, Token

__all__ = ["to_telegram_html"]


def to_telegram_html(markdown: str) -> str:
    """Render Markdown as Telegram HTML: only b, i, s, code, pre, a, blockquote and tg-spoiler tags,
    always balanced and nested the way Telegram allows, with all text escaped."""
    return TelegramHTMLRenderer.render_markdown(markdown)


class TelegramHTMLRenderer(HTMLRenderer):
    """Telegram HTML. Telegram has no block elements besides pre and blockquote, so blocks become text
    separated by blank lines. Its nesting rules are enforced: code and pre hold only text, a link
    holds no link or code, and a blockquote holds no blockquote.
    """

    NAME = "telegram"
    # Telegram shows a link with any other scheme as dead text at best; javascript: and friends never.
    LINK_SCHEMES = ("http://", "https://", "tg://", "mailto:")
    MARKS: ClassVar[Mapping[str, str]] = {**HTMLRenderer.MARKS, "spoiler": "tg-spoiler"}
    SPOILERS = True

    def _render_codespan(self, token: Token, state: BlockState) -> str:
        # Telegram entities other than b/i/u/s/spoiler may not contain each other: no code in a link.
        if "a" in self._open:
            return self.escape(token["raw"])
        return super()._render_codespan(token, state)
