"""Markdown as Matrix HTML (`formatted_body` in `org.matrix.custom.html`), and message contents that
ping no one.

The HTML comes from the project's Markdown parser (bridge.markup, on mistune, as Telegram's and
Slack's markup do), with what a Matrix client reads as HTML: line breaks as `<br>`, paragraphs,
headings and lists as their elements, quotes inside quotes, spoilers as `<span data-mx-spoiler>`.
The plain `body` beside it is the Markdown itself, as Element sends it.

Nothing the model writes notifies anyone: every content carries `m.mentions: {}`, which tells the
homeserver that the event mentions nobody (it then ignores names, user ids and "@room" in the text),
and a link to a user or room (matrix.to, matrix: URIs), which clients draw as a pill, is written as
its text instead.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from mistune.core import BlockState

from bridge.markup import HTMLRenderer, Token

__all__ = ["HTML_FORMAT", "MatrixHTMLRenderer", "text_content", "to_html"]

HTML_FORMAT = "org.matrix.custom.html"
# A permalink to a user, room or alias: clients show it as a pill (and once notified by it).
_PILL = re.compile(r"^\s*(?:https?://matrix\.to/#/|matrix:(?:u|r|roomid)/)", re.IGNORECASE)


class MatrixHTMLRenderer(HTMLRenderer):
    """HTML for Matrix clients: what HTMLRenderer writes, with block elements a browser would show."""

    NAME = "matrix-html"
    MARKS: ClassVar[dict[str, str]] = {
        "strong": "strong",
        "emphasis": "em",
        "strikethrough": "del",
        "spoiler": "span",
    }
    SPOILERS: ClassVar[bool] = True

    def enclose(self, mark: str, inner: str) -> str:
        if not inner:
            return ""
        if mark == "span":
            return f"<span data-mx-spoiler>{inner}</span>"
        return f"<{mark}>{inner}</{mark}>"

    def _render_linebreak(self, token: Token, state: BlockState) -> str:
        return "<br>"

    def _render_softbreak(self, token: Token, state: BlockState) -> str:
        # Chat text keeps the author's line breaks, which HTML would fold into spaces.
        return "<br>"

    def _render_paragraph(self, token: Token, state: BlockState) -> str:
        return f"<p>{self._inline(token['children'], state)}</p>"

    def _render_heading(self, token: Token, state: BlockState) -> str:
        level = min(max(int(token.get("attrs", {}).get("level", 1)), 1), 6)
        return f"<h{level}>{self._inline(token['children'], state)}</h{level}>"

    def _render_thematic_break(self, token: Token, state: BlockState) -> str:
        return "<hr>"

    def _render_block_quote(self, token: Token, state: BlockState) -> str:
        inner = self._blocks(token["children"], state)
        return f"<blockquote>{inner}</blockquote>" if inner.strip() else ""

    def _render_list(self, token: Token, state: BlockState) -> str:
        attrs = token["attrs"]
        items = "".join(f"<li>{self._item_html(item, state)}</li>" for item in token["children"])
        if not attrs["ordered"]:
            return f"<ul>{items}</ul>"
        start = int(attrs.get("start", 1))
        return f'<ol start="{start}">{items}</ol>' if start != 1 else f"<ol>{items}</ol>"

    def _item_html(self, item: Token, state: BlockState) -> str:
        parts = []
        for child in item["children"]:
            if child["type"] == "blank_line":
                continue
            # A tight list's text is block_text: no paragraph around it.
            parts.append(self.render_token(child, state))
        return "".join(parts)

    def _render_link(self, token: Token, state: BlockState) -> str:
        if _PILL.match(token["attrs"]["url"]):
            return self._inline(token["children"], state)
        return super()._render_link(token, state)

    def _render_image(self, token: Token, state: BlockState) -> str:
        if _PILL.match(token["attrs"]["url"]):
            return self.escape(self._plain(token["children"]))
        return super()._render_image(token, state)


def to_html(markdown: str) -> str:
    """The Markdown as Matrix HTML, every character of the text escaped."""
    return MatrixHTMLRenderer.render_markdown(markdown)


def text_content(msgtype: str, body: str, *, markdown: bool) -> dict[str, Any]:
    """A message's content: the body as written, its HTML where it is Markdown (and has any markup),
    and `m.mentions: {}`, so that the homeserver notifies nobody whatever the text says."""
    content: dict[str, Any] = {"msgtype": msgtype, "body": body, "m.mentions": {}}
    if markdown:
        rendered = to_html(body)
        if rendered and rendered != f"<p>{MatrixHTMLRenderer().escape(body)}</p>":
            content["format"] = HTML_FORMAT
            content["formatted_body"] = rendered
    return content
