"""The readable text of an HTML page: what webfetch returns and web_search's snippets are cleaned with."""

from __future__ import annotations

import re
from html.parser import HTMLParser

_WHITESPACE = re.compile(r"\s+")
_SKIP_TAGS = frozenset({"script", "style", "noscript", "head", "template"})
_BLOCK_TAGS = frozenset(
    {
        "address", "article", "aside", "blockquote", "br", "dd", "details", "div", "dl", "dt",
        "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6",
        "header", "hr", "li", "main", "nav", "ol", "p", "pre", "section", "summary", "table",
        "td", "th", "tr", "ul",
    }
)  # fmt: skip


class _TextExtractor(HTMLParser):
    """Visible text and <title> of an HTML page, block elements separated by newlines."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self._skip_depth: dict[str, int] = {}
        self._in_title = False
        self._title_seen = False
        self._title: list[str] = []
        self._parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title" and not self._title_seen:
            self._in_title = True
        elif tag == "body":
            # Pages that never close <head> would otherwise hide their whole body.
            self._skip_depth.pop("head", None)
        elif tag in _SKIP_TAGS:
            self._skip_depth[tag] = self._skip_depth.get(tag, 0) + 1
        if tag in _BLOCK_TAGS:
            self._parts.append("\n")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        # <br/> and friends: a boundary, never an unclosed skip region.
        if tag in _BLOCK_TAGS:
            self._parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title" and self._in_title:
            # Only the document's first <title>; an <svg><title> later is just a tooltip.
            self._in_title = False
            self._title_seen = True
        elif tag in _SKIP_TAGS and self._skip_depth.get(tag):
            self._skip_depth[tag] -= 1
        if tag in _BLOCK_TAGS:
            self._parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self._title.append(data)
        elif not any(self._skip_depth.values()):
            # Line breaks in the source are just whitespace; only block boundaries become newlines.
            # Runs become one space, not nothing, so "a <b>bold</b> word" keeps its spaces.
            self._parts.append(_WHITESPACE.sub(" ", data))

    @property
    def title(self) -> str:
        return " ".join("".join(self._title).split())

    @property
    def text(self) -> str:
        lines = ("".join(self._parts)).split("\n")
        return "\n".join(collapsed for line in lines if (collapsed := " ".join(line.split())))


def html_to_text(html: str) -> tuple[str, str]:
    """(title, text) of an HTML document: scripts, styles and <head> dropped, whitespace collapsed."""
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    return parser.title, parser.text
