"""Markdown to the HTML subset Telegram's Bot API accepts with parse_mode=HTML."""

from __future__ import annotations

import html
import re
import threading
import unicodedata
from collections.abc import Iterable
from html.entities import html5
from re import Match
from typing import Any, cast

import mistune
from mistune.core import BlockState, InlineState
from mistune.inline_parser import InlineParser
from mistune.plugins.table import table_in_list, table_in_quote

__all__ = ["to_telegram_html"]

Token = dict[str, Any]

# Telegram shows a link with any other scheme as dead text at best; javascript: and friends never.
_LINK_SCHEMES = ("http://", "https://", "tg://", "mailto:")
# CommonMark only decodes complete references; html.unescape alone would also take "&copy" without ";".
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
# Blocks whose lines must not be re-indented inside a list item: their text is preformatted.
_PREFORMATTED = frozenset({"block_code", "table", "block_quote", "block_html", "thematic_break"})
_BULLET = "• "
_RULE = "———"


def to_telegram_html(markdown: str) -> str:
    """Render Markdown as Telegram HTML: only b, i, s, code, pre, a, blockquote and tg-spoiler tags,
    always balanced and nested the way Telegram allows, with all text escaped."""
    rendered = cast(str, _parser()(markdown))  # a str whenever a renderer is set
    return rendered.rstrip().lstrip("\n")


_parsers = threading.local()


def _parser() -> mistune.Markdown:
    """This thread's parser, built on first use: building one (its plugins, their regular expressions)
    cost 5.5% of a Telegram turn when each message had its own. Rendering never awaits, so the
    renderer's nesting state belongs to one message at a time; it starts each one afresh."""
    md: mistune.Markdown | None = getattr(_parsers, "md", None)
    if md is None:
        md = mistune.create_markdown(renderer=TelegramHTMLRenderer(), plugins=["strikethrough", "table"])
        table_in_quote(md)
        table_in_list(md)
        md.inline.register("tg_spoiler", r"\|\|(?=[^\s|])", _parse_spoiler, before="link")
        _parsers.md = md
    return md


def _parse_spoiler(inline: InlineParser, match: Match[str], state: InlineState) -> int | None:
    """||hidden|| as on Discord; like ~~strike~~, the closing marker must follow a non-space."""
    if state.depth >= inline.max_nested_level:
        return None
    start = match.end()
    close = state.delimiters.find("||", start, formatting=True)
    if close is None:
        return None
    child = state.copy()
    child.src = state.src[start:close]
    state.append_token({"type": "tg_spoiler", "children": inline.render(child)})
    return close + 2


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


def _attribute(value: str) -> str:
    return html.escape(value, quote=True)


def _decode_entities(text: str) -> str:
    def decode(match: Match[str]) -> str:
        reference = match[0]
        if reference[1] == "#" or reference[1:] in html5:
            return html.unescape(reference)
        return reference

    return _ENTITY.sub(decode, text)


def _link_allowed(url: str) -> bool:
    return url.strip().lower().startswith(_LINK_SCHEMES)


def _width(text: str) -> int:
    """Columns text takes in a monospace font: wide East Asian characters take two, marks none."""
    width = 0
    for char in text:
        if unicodedata.combining(char) or char == "\u200d":
            continue
        width += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return width


def _pad(text: str, width: int, align: str | None) -> str:
    space = width - _width(text)
    if align == "right":
        return " " * space + text
    if align == "center":
        return " " * (space // 2) + text + " " * (space - space // 2)
    return text + " " * space


class TelegramHTMLRenderer(mistune.BaseRenderer):
    """Renders mistune's token tree to Telegram HTML, one _render_<type> method per token type.

    Telegram has no block elements besides pre and blockquote, so blocks become text separated by
    blank lines. Its nesting rules are enforced here: code and pre hold only text, a link holds no
    link or code, and a blockquote holds no blockquote.
    """

    NAME = "telegram"

    def __init__(self) -> None:
        super().__init__()
        self._open: list[str] = []  # inline tags currently open around the text being rendered
        self._list_depth = 0
        self._in_quote = False

    def __call__(self, tokens: Iterable[Token], state: BlockState) -> str:
        # One renderer serves every message (to_telegram_html): a message a failure left half-walked
        # must not leave its open tags to the next.
        self._open, self._list_depth, self._in_quote = [], 0, False
        return self._blocks(list(tokens), state)

    def render_token(self, token: Token, state: BlockState) -> str:
        method = getattr(self, "_render_" + token["type"], None)
        if method is None:
            # A token type from a plugin this renderer does not know: keep its text, drop the markup.
            if "children" in token:
                return self._inline(token["children"], state)
            return _escape(token.get("raw", ""))
        result: str = method(token, state)
        return result

    # --- helpers ------------------------------------------------------------------------------

    def _blocks(self, tokens: list[Token], state: BlockState) -> str:
        """Blocks joined by a blank line; a heading is followed by a single newline."""
        out = ""
        previous: str | None = None
        for token in tokens:
            if token["type"] == "blank_line":
                continue
            rendered = self.render_token(token, state)
            if not rendered.strip():
                continue
            if previous is not None:
                out += "\n" if previous == "heading" else "\n\n"
            out += rendered
            previous = token["type"]
        return out

    def _inline(self, tokens: list[Token], state: BlockState) -> str:
        return "".join(self.render_token(token, state) for token in tokens)

    def _wrap(self, tag: str, tokens: list[Token], state: BlockState) -> str:
        # The same entity inside itself (**a *b **c** b* a**) adds nothing; keep the markup flat.
        if tag in self._open:
            return self._inline(tokens, state)
        self._open.append(tag)
        try:
            inner = self._inline(tokens, state)
        finally:
            self._open.pop()
        if not inner:
            return ""
        return f"<{tag}>{inner}</{tag}>"

    def _plain(self, tokens: list[Token]) -> str:
        """The visible text of inline tokens with all markup dropped (for alt text and table cells)."""
        parts = []
        for token in tokens:
            kind = token["type"]
            if kind in ("linebreak", "softbreak"):
                parts.append(" ")
            elif "children" in token:
                parts.append(self._plain(token["children"]))
            elif kind == "text":
                parts.append(_decode_entities(token["raw"]))
            else:
                parts.append(token.get("raw", ""))
        return "".join(parts)

    # --- inline -------------------------------------------------------------------------------

    def _render_text(self, token: Token, state: BlockState) -> str:
        return _escape(_decode_entities(token["raw"]))

    def _render_emphasis(self, token: Token, state: BlockState) -> str:
        return self._wrap("i", token["children"], state)

    def _render_strong(self, token: Token, state: BlockState) -> str:
        return self._wrap("b", token["children"], state)

    def _render_strikethrough(self, token: Token, state: BlockState) -> str:
        return self._wrap("s", token["children"], state)

    def _render_tg_spoiler(self, token: Token, state: BlockState) -> str:
        return self._wrap("tg-spoiler", token["children"], state)

    def _render_codespan(self, token: Token, state: BlockState) -> str:
        # Telegram entities other than b/i/u/s/spoiler may not contain each other: no code in a link.
        if "a" in self._open:
            return _escape(token["raw"])
        return f"<code>{_escape(token['raw'])}</code>"

    def _render_link(self, token: Token, state: BlockState) -> str:
        url = token["attrs"]["url"]
        if "a" in self._open or not _link_allowed(url):
            return self._inline(token["children"], state)
        self._open.append("a")
        try:
            text = self._inline(token["children"], state)
        finally:
            self._open.pop()
        # [](https://x) would be an invisible link; show the address instead.
        return f'<a href="{_attribute(url)}">{text if text.strip() else _escape(url)}</a>'

    def _render_image(self, token: Token, state: BlockState) -> str:
        # Telegram cannot inline an image in text: show the alt text and link to the picture.
        alt = _escape(self._plain(token["children"]))
        url = token["attrs"]["url"]
        if "a" in self._open or not _link_allowed(url):
            return alt
        link = f'<a href="{_attribute(url)}">{_escape(url)}</a>'
        return f"{alt} ({link})" if alt.strip() else link

    def _render_linebreak(self, token: Token, state: BlockState) -> str:
        return "\n"

    def _render_softbreak(self, token: Token, state: BlockState) -> str:
        # Chat text keeps the author's line breaks; a browser would fold this into a space.
        return "\n"

    def _render_inline_html(self, token: Token, state: BlockState) -> str:
        return _escape(token["raw"])

    # --- blocks -------------------------------------------------------------------------------

    def _render_paragraph(self, token: Token, state: BlockState) -> str:
        return self._inline(token["children"], state)

    def _render_block_text(self, token: Token, state: BlockState) -> str:
        return self._inline(token["children"], state)

    def _render_heading(self, token: Token, state: BlockState) -> str:
        return self._wrap("b", token["children"], state)

    def _render_thematic_break(self, token: Token, state: BlockState) -> str:
        return _RULE

    def _render_block_html(self, token: Token, state: BlockState) -> str:
        return _escape(token["raw"].strip())

    def _render_block_code(self, token: Token, state: BlockState) -> str:
        code = _escape(token["raw"].removesuffix("\n"))
        if not code:
            return ""  # an empty pre is an empty entity, and alone an empty message Telegram rejects
        info = _decode_entities((token.get("attrs") or {}).get("info") or "").split()
        if info:
            return f'<pre><code class="language-{_attribute(info[0])}">{code}</code></pre>'
        return f"<pre>{code}</pre>"

    def _render_block_quote(self, token: Token, state: BlockState) -> str:
        # Telegram rejects a blockquote inside a blockquote; inner quotes become plain text.
        if self._in_quote:
            return self._blocks(token["children"], state)
        self._in_quote = True
        try:
            inner = self._blocks(token["children"], state)
        finally:
            self._in_quote = False
        return f"<blockquote>{inner}</blockquote>" if inner.strip() else ""

    def _render_list(self, token: Token, state: BlockState) -> str:
        indent = "  " * self._list_depth
        attrs = token["attrs"]
        number = attrs.get("start", 1)
        lines = []
        self._list_depth += 1
        try:
            for item in token["children"]:
                marker = f"{number}. " if attrs["ordered"] else _BULLET
                number += 1
                lines.append(self._item(item, state, indent + marker, indent + " " * len(marker)))
        finally:
            self._list_depth -= 1
        return "\n".join(lines)

    def _item(self, item: Token, state: BlockState, marker: str, hang: str) -> str:
        """One list item: the marker, then its blocks; continuation lines hang under the text."""
        parts: list[str] = []
        for child in item["children"]:
            kind = child["type"]
            if kind == "blank_line":
                continue
            rendered = self.render_token(child, state)
            if not rendered.strip():
                continue
            if kind not in _PREFORMATTED and kind != "list":
                # Text blocks hang under the marker; the first one shares the marker's line.
                lead = hang if parts else marker
                parts.append(lead + rendered.replace("\n", "\n" + hang))
                continue
            if not parts:
                # Nested lists carry their own indentation and preformatted text must not be
                # shifted, so an item opening with either gets the marker on a line of its own.
                parts.append(marker.rstrip())
            parts.append(rendered)
        return "\n".join(parts) if parts else marker.rstrip()

    def _render_list_item(self, token: Token, state: BlockState) -> str:  # pragma: no cover
        # Items are rendered by _item with their list's marker; this only guards stray tokens.
        return self._blocks(token["children"], state)

    def _render_table(self, token: Token, state: BlockState) -> str:
        """A table as a monospace block: pre may hold only text, so cells lose inline markup."""
        rows: list[list[str]] = []
        aligns: list[str | None] = []
        for section in token["children"]:
            section_rows = [section] if section["type"] == "table_head" else section["children"]
            for row in section_rows:
                rows.append([self._plain(cell["children"]).strip() for cell in row["children"]])
                if section["type"] == "table_head":
                    aligns = [cell["attrs"].get("align") for cell in row["children"]]
        columns = max(len(row) for row in rows)
        aligns += [None] * (columns - len(aligns))
        for row in rows:
            row += [""] * (columns - len(row))
        widths = [max(1, *(_width(row[column]) for row in rows)) for column in range(columns)]

        def line(row: list[str]) -> str:
            cells = zip(row, widths, aligns, strict=True)
            return " | ".join(_pad(cell, width, align) for cell, width, align in cells).rstrip()

        lines = [line(row) for row in rows]
        lines.insert(1, "-+-".join("-" * width for width in widths))
        return "<pre>" + _escape("\n".join(lines)) + "</pre>"
