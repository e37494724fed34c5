"""Markdown rendered as a chat platform's markup: the structure every platform shares, on mistune.

A model writes Markdown; each platform takes its own markup (Telegram a subset of HTML, Slack mrkdwn,
Matrix HTML). What they share lives here, once: the walk over mistune's token tree, blocks joined by
blank lines, the same mark inside itself kept flat, lists written out with their markers and hanging
indents, tables as monospace blocks padded to the widths a monospace font shows, quotes that hold no
quote, entities decoded as CommonMark does, links only with the schemes a platform opens, and one
parser per thread and renderer, built on first use.

`MarkupRenderer` is the base: a platform's renderer subclasses it and fills in its hooks, the class
attributes (`LINK_SCHEMES`, `MARKS`, `LIST_INDENT`, `SPOILERS`) and the methods `escape`, `enclose`,
`preformatted`, `quote` and the token renderers no two platforms write alike (`_render_codespan`,
`_render_link`, `_render_image`, `_render_block_code`); any other `_render_<type>` may be overridden
too. `HTMLRenderer` is the HTML of chat clients, with the text's line breaks kept as typed: Telegram's
renderer adds its spoiler and its rule that a link holds no code. Matrix's HTML (`formatted_body`)
starts from it as well, overriding what a real HTML reader needs (line breaks as `<br>`, and lists,
headings, tables and nested quotes as their elements where it wants them) and `enclose` for a spoiler
written with an attribute (`<span data-mx-spoiler>`).

Imports only mistune and the standard library; the platforms' renderers live in their adapters.
"""

from __future__ import annotations

import html
import re
import threading
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from html.entities import html5
from re import Match
from typing import Any, ClassVar, cast

import mistune
from mistune.core import BlockState, InlineState
from mistune.inline_parser import InlineParser
from mistune.plugins.table import table_in_list, table_in_quote

__all__ = ["HTMLRenderer", "MarkupRenderer", "Token", "decode_entities"]

Token = dict[str, Any]

# CommonMark only decodes complete references; html.unescape alone would also take "&copy" without ";".
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
# Blocks whose lines must not be re-indented inside a list item: their text is preformatted.
_PREFORMATTED = frozenset({"block_code", "table", "block_quote", "block_html", "thematic_break"})
_BULLET = "• "
_RULE = "———"

# One parser per thread and renderer class (MarkupRenderer.parser).
_parsers = threading.local()


def decode_entities(text: str) -> str:
    """The text with every complete character reference (`&amp;`, `&#38;`, `&#x26;`) decoded."""

    def decode(match: Match[str]) -> str:
        reference = match[0]
        if reference[1] == "#" or reference[1:] in html5:
            return html.unescape(reference)
        return reference

    return _ENTITY.sub(decode, text)


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
    state.append_token({"type": "spoiler", "children": inline.render(child)})
    return close + 2


class MarkupRenderer(mistune.BaseRenderer, ABC):
    """Renders mistune's token tree to a platform's markup, one _render_<type> method per token type.

    Chat markup has few block elements, so blocks become text separated by blank lines; a heading is
    its text in the strong mark, followed by a single newline. One renderer serves every message of
    its thread (`render_markdown`).
    """

    NAME = "markup"
    # The schemes a link may have; any other is shown as its text (javascript: and friends never).
    LINK_SCHEMES: ClassVar[tuple[str, ...]] = ("http://", "https://", "mailto:")
    # The mark each inline element is written with: "strong", "emphasis", "strikethrough", and
    # "spoiler" where SPOILERS is on.
    MARKS: ClassVar[Mapping[str, str]]
    # One level of list nesting, before the marker of an inner list.
    LIST_INDENT: ClassVar[str] = "  "
    # Whether ||hidden|| is a spoiler (written with MARKS["spoiler"]) or plain text.
    SPOILERS: ClassVar[bool] = False

    def __init__(self) -> None:
        super().__init__()
        self._open: list[str] = []  # marks currently open around the text being rendered
        self._list_depth = 0
        self._in_quote = False

    @classmethod
    def render_markdown(cls, markdown: str) -> str:
        """The Markdown in this renderer's markup, without the blank lines around it."""
        rendered = cast(str, cls.parser()(markdown))  # a str whenever a renderer is set
        return rendered.rstrip().lstrip("\n")

    @classmethod
    def parser(cls) -> mistune.Markdown:
        """This thread's parser for this renderer, built on first use: building one (its plugins,
        their regular expressions) cost 5.5% of a Telegram turn when each message had its own.
        Rendering never awaits, so the renderer's nesting state belongs to one message at a time; it
        starts each one afresh."""
        built: dict[type[MarkupRenderer], mistune.Markdown] | None = getattr(_parsers, "built", None)
        if built is None:
            built = _parsers.built = {}
        md = built.get(cls)
        if md is None:
            md = built[cls] = cls._build_parser()
        return md

    @classmethod
    def _build_parser(cls) -> mistune.Markdown:
        md = mistune.create_markdown(renderer=cls(), plugins=["strikethrough", "table"])
        table_in_quote(md)
        table_in_list(md)
        if cls.SPOILERS:
            md.inline.register("spoiler", r"\|\|(?=[^\s|])", _parse_spoiler, before="link")
        return md

    def __call__(self, tokens: Iterable[Token], state: BlockState) -> str:
        # One renderer serves every message: a message a failure left half-walked must not leave
        # its open marks to the next.
        self._open, self._list_depth, self._in_quote = [], 0, False
        return self._blocks(list(tokens), state)

    def render_token(self, token: Token, state: BlockState) -> str:
        method = getattr(self, "_render_" + token["type"], None)
        if method is None:
            # A token type from a plugin this renderer does not know: keep its text, drop the markup.
            if "children" in token:
                return self._inline(token["children"], state)
            return self.escape(token.get("raw", ""))
        result: str = method(token, state)
        return result

    # --- what each platform writes its own way ----------------------------------------------

    @abstractmethod
    def escape(self, text: str) -> str:
        """Plain text as the platform must receive it, so that none of it reads as markup."""

    @abstractmethod
    def enclose(self, mark: str, inner: str) -> str:
        """Rendered inline text in a mark from MARKS (inner may be empty or all spaces)."""

    @abstractmethod
    def preformatted(self, text: str) -> str:
        """Plain text (not yet escaped) as a monospace block: a table, or code."""

    @abstractmethod
    def quote(self, inner: str) -> str:
        """Rendered blocks, not blank, as a quote."""

    @abstractmethod
    def _render_codespan(self, token: Token, state: BlockState) -> str: ...

    @abstractmethod
    def _render_link(self, token: Token, state: BlockState) -> str: ...

    @abstractmethod
    def _render_image(self, token: Token, state: BlockState) -> str: ...

    @abstractmethod
    def _render_block_code(self, token: Token, state: BlockState) -> str: ...

    # --- helpers ------------------------------------------------------------------------------

    def link_allowed(self, url: str) -> bool:
        return url.strip().lower().startswith(self.LINK_SCHEMES)

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

    def _within(self, mark: str, tokens: list[Token], state: BlockState) -> str:
        """Inline tokens rendered with the mark open around them (so they can see it is)."""
        self._open.append(mark)
        try:
            return self._inline(tokens, state)
        finally:
            self._open.pop()

    def _wrap(self, mark: str, tokens: list[Token], state: BlockState) -> str:
        # The same mark inside itself (**a *b **c** b* a**) adds nothing; keep the markup flat.
        if mark in self._open:
            return self._inline(tokens, state)
        return self.enclose(mark, self._within(mark, tokens, state))

    def _plain(self, tokens: list[Token]) -> str:
        """The visible text of inline tokens with all markup dropped (alt text, labels, table cells)."""
        parts = []
        for token in tokens:
            kind = token["type"]
            if kind in ("linebreak", "softbreak"):
                parts.append(" ")
            elif "children" in token:
                parts.append(self._plain(token["children"]))
            elif kind == "text":
                parts.append(decode_entities(token["raw"]))
            else:
                parts.append(token.get("raw", ""))
        return "".join(parts)

    # --- inline -------------------------------------------------------------------------------

    def _render_text(self, token: Token, state: BlockState) -> str:
        return self.escape(decode_entities(token["raw"]))

    def _render_emphasis(self, token: Token, state: BlockState) -> str:
        return self._wrap(self.MARKS["emphasis"], token["children"], state)

    def _render_strong(self, token: Token, state: BlockState) -> str:
        return self._wrap(self.MARKS["strong"], token["children"], state)

    def _render_strikethrough(self, token: Token, state: BlockState) -> str:
        return self._wrap(self.MARKS["strikethrough"], token["children"], state)

    def _render_spoiler(self, token: Token, state: BlockState) -> str:
        return self._wrap(self.MARKS["spoiler"], token["children"], state)

    def _render_linebreak(self, token: Token, state: BlockState) -> str:
        return "\n"

    def _render_softbreak(self, token: Token, state: BlockState) -> str:
        # Chat text keeps the author's line breaks; a browser would fold this into a space.
        return "\n"

    def _render_inline_html(self, token: Token, state: BlockState) -> str:
        return self.escape(token["raw"])

    # --- blocks -------------------------------------------------------------------------------

    def _render_paragraph(self, token: Token, state: BlockState) -> str:
        return self._inline(token["children"], state)

    def _render_block_text(self, token: Token, state: BlockState) -> str:
        return self._inline(token["children"], state)

    def _render_heading(self, token: Token, state: BlockState) -> str:
        return self._wrap(self.MARKS["strong"], token["children"], state)

    def _render_thematic_break(self, token: Token, state: BlockState) -> str:
        return _RULE

    def _render_block_html(self, token: Token, state: BlockState) -> str:
        return self.escape(token["raw"].strip())

    def _render_block_quote(self, token: Token, state: BlockState) -> str:
        # Telegram rejects a quote inside a quote and mrkdwn has none: inner quotes become plain text.
        if self._in_quote:
            return self._blocks(token["children"], state)
        self._in_quote = True
        try:
            inner = self._blocks(token["children"], state)
        finally:
            self._in_quote = False
        return self.quote(inner) if inner.strip() else ""

    def _render_list(self, token: Token, state: BlockState) -> str:
        indent = self.LIST_INDENT * self._list_depth
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
        """A table as a monospace block: such a block holds only text, so cells lose inline markup."""
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
        return self.preformatted("\n".join(lines))


class HTMLRenderer(MarkupRenderer):
    """The HTML of chat clients, line breaks kept as typed: b, i, s, code, pre, a and blockquote,
    always balanced, with all text escaped. A link holds no link, and code and pre only text."""

    NAME = "html"
    MARKS: ClassVar[Mapping[str, str]] = {"strong": "b", "emphasis": "i", "strikethrough": "s"}

    def escape(self, text: str) -> str:
        return html.escape(text, quote=False)

    def attribute(self, value: str) -> str:
        """A value to go between an attribute's double quotes."""
        return html.escape(value, quote=True)

    def enclose(self, mark: str, inner: str) -> str:
        if not inner:
            return ""
        return f"<{mark}>{inner}</{mark}>"

    def preformatted(self, text: str) -> str:
        return f"<pre>{self.escape(text)}</pre>"

    def quote(self, inner: str) -> str:
        return f"<blockquote>{inner}</blockquote>"

    def _render_codespan(self, token: Token, state: BlockState) -> str:
        return f"<code>{self.escape(token['raw'])}</code>"

    def _render_link(self, token: Token, state: BlockState) -> str:
        url = token["attrs"]["url"]
        if "a" in self._open or not self.link_allowed(url):
            return self._inline(token["children"], state)
        text = self._within("a", token["children"], state)
        # [](https://x) would be an invisible link; show the address instead.
        return f'<a href="{self.attribute(url)}">{text if text.strip() else self.escape(url)}</a>'

    def _render_image(self, token: Token, state: BlockState) -> str:
        # A chat message cannot inline an image in text: show the alt text and link to the picture.
        alt = self.escape(self._plain(token["children"]))
        url = token["attrs"]["url"]
        if "a" in self._open or not self.link_allowed(url):
            return alt
        link = f'<a href="{self.attribute(url)}">{self.escape(url)}</a>'
        return f"{alt} ({link})" if alt.strip() else link

    def _render_block_code(self, token: Token, state: BlockState) -> str:
        code = token["raw"].removesuffix("\n")
        if not code:
            return ""  # an empty pre is an empty entity, and alone an empty message Telegram rejects
        info = decode_entities((token.get("attrs") or {}).get("info") or "").split()
        if info:
            language = self.attribute(info[0])
            return f'<pre><code class="language-{language}">{self.escape(code)}</code></pre>'
        return self.preformatted(code)
