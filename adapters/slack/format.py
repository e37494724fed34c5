"""Markdown to Slack's mrkdwn, and plain text made safe to send: nothing a model writes can ping.

Slack reads three characters as markup in every text field: `&`, `<` and `>`. Its control sequences
(`<!channel>`, `<!here>`, `<@U123>`, `<#C123>`, `<!subteam^S1>`) and links are written inside angle
brackets, so once every `<` and `>` of the model's text is escaped, the only brackets left are the
links this renderer writes itself, and they hold nothing but an http(s) or mailto address. `@channel`
written as a word notifies no one: messages go with `link_names` off.

The renderer is the project's Markdown parser (mistune, as for Telegram's HTML) with a renderer for
mrkdwn. The converters on PyPI were weighed and left: slackify-markdown passes `<!channel>` and
`<@U…>` through on purpose, and markdown-to-mrkdwn rewrites with regular expressions and returns its
input unchanged when one fails.
"""

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
from mistune.core import BlockState
from mistune.plugins.table import table_in_list, table_in_quote

__all__ = ["escape", "to_mrkdwn"]

Token = dict[str, Any]

# Slack shows other schemes as dead text at best; javascript: and friends never.
_LINK_SCHEMES = ("http://", "https://", "mailto:")
# CommonMark only decodes complete references; html.unescape alone would also take "&copy" without ";".
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
# What must not appear raw inside <url|label>: it would end the address or the link early.
_URL_UNSAFE = {"|": "%7C", "<": "%3C", ">": "%3E", " ": "%20", "&": "&amp;"}
_PREFORMATTED = frozenset({"block_code", "table", "block_quote", "block_html", "thematic_break"})
_BULLET = "• "
_RULE = "———"
# mrkdwn's markers, by the Markdown element that asks for them.
_MARK = {"strong": "*", "emphasis": "_", "strikethrough": "~"}


def escape(text: str) -> str:
    """Plain text as Slack must receive it: `&`, `<` and `>` as entities, so no control sequence
    (a mention, @channel, a link) can be formed."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_mrkdwn(markdown: str) -> str:
    """Render Markdown as mrkdwn: bold, italic, strike, code, code blocks, quotes and links, with
    every other character escaped."""
    rendered = cast(str, _parser()(markdown))  # a str whenever a renderer is set
    return rendered.rstrip().lstrip("\n")


_parsers = threading.local()


def _parser() -> mistune.Markdown:
    """This thread's parser, built on first use (as Telegram's: building one costs more than most
    renders). Rendering never awaits, so the renderer's state belongs to one message at a time."""
    md: mistune.Markdown | None = getattr(_parsers, "md", None)
    if md is None:
        md = mistune.create_markdown(renderer=MrkdwnRenderer(), plugins=["strikethrough", "table"])
        table_in_quote(md)
        table_in_list(md)
        _parsers.md = md
    return md


def _decode_entities(text: str) -> str:
    def decode(match: Match[str]) -> str:
        reference = match[0]
        if reference[1] == "#" or reference[1:] in html5:
            return html.unescape(reference)
        return reference

    return _ENTITY.sub(decode, text)


def _link_allowed(url: str) -> bool:
    return url.strip().lower().startswith(_LINK_SCHEMES)


def _address(url: str) -> str:
    return "".join(_URL_UNSAFE.get(char, char) for char in url.strip())


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


class MrkdwnRenderer(mistune.BaseRenderer):
    """Renders mistune's token tree to mrkdwn, one _render_<type> method per token type.

    mrkdwn has no headings, lists or tables: headings become bold lines, lists bullets and numbers
    written out, tables a monospace block. A marker inside itself adds nothing and is dropped, and
    code holds only text, as Slack shows it.
    """

    NAME = "mrkdwn"

    def __init__(self) -> None:
        super().__init__()
        self._open: list[str] = []  # markers currently open around the text being rendered
        self._list_depth = 0
        self._in_quote = False

    def __call__(self, tokens: Iterable[Token], state: BlockState) -> str:
        # One renderer serves every message: a message a failure left half-walked must not leave
        # its open markers to the next.
        self._open, self._list_depth, self._in_quote = [], 0, False
        return self._blocks(list(tokens), state)

    def render_token(self, token: Token, state: BlockState) -> str:
        method = getattr(self, "_render_" + token["type"], None)
        if method is None:
            # A token type from a plugin this renderer does not know: keep its text, drop the markup.
            if "children" in token:
                return self._inline(token["children"], state)
            return escape(token.get("raw", ""))
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

    def _wrap(self, mark: str, tokens: list[Token], state: BlockState) -> str:
        if mark in self._open:
            return self._inline(tokens, state)
        self._open.append(mark)
        try:
            inner = self._inline(tokens, state)
        finally:
            self._open.pop()
        if not inner.strip():
            return inner
        # Slack ends a marker only at a non-space: spaces inside go outside it.
        lead, body, trail = _spaces(inner)
        return f"{lead}{mark}{body}{mark}{trail}"

    def _plain(self, tokens: list[Token]) -> str:
        """The visible text of inline tokens with all markup dropped (link labels, table cells)."""
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
        return escape(_decode_entities(token["raw"]))

    def _render_emphasis(self, token: Token, state: BlockState) -> str:
        return self._wrap(_MARK["emphasis"], token["children"], state)

    def _render_strong(self, token: Token, state: BlockState) -> str:
        return self._wrap(_MARK["strong"], token["children"], state)

    def _render_strikethrough(self, token: Token, state: BlockState) -> str:
        return self._wrap(_MARK["strikethrough"], token["children"], state)

    def _render_codespan(self, token: Token, state: BlockState) -> str:
        code = token["raw"]
        # mrkdwn's inline code cannot hold a backtick.
        if "`" in code or not code.strip():
            return escape(code)
        return f"`{escape(code)}`"

    def _render_link(self, token: Token, state: BlockState) -> str:
        url = token["attrs"]["url"]
        # A label is plain text: mrkdwn shows no markup inside a link.
        label = " ".join(self._plain(token["children"]).split())
        if not _link_allowed(url):
            return escape(label)
        if not label or label == url.strip():
            return f"<{_address(url)}>"
        return f"<{_address(url)}|{escape(label)}>"

    def _render_image(self, token: Token, state: BlockState) -> str:
        # An image in text is a link to it, named by its alt text.
        alt = " ".join(self._plain(token["children"]).split())
        url = token["attrs"]["url"]
        if not _link_allowed(url):
            return escape(alt)
        return f"<{_address(url)}|{escape(alt)}>" if alt else f"<{_address(url)}>"

    def _render_linebreak(self, token: Token, state: BlockState) -> str:
        return "\n"

    def _render_softbreak(self, token: Token, state: BlockState) -> str:
        # Chat text keeps the author's line breaks; a browser would fold this into a space.
        return "\n"

    def _render_inline_html(self, token: Token, state: BlockState) -> str:
        return escape(token["raw"])

    # --- blocks -------------------------------------------------------------------------------

    def _render_paragraph(self, token: Token, state: BlockState) -> str:
        return self._inline(token["children"], state)

    def _render_block_text(self, token: Token, state: BlockState) -> str:
        return self._inline(token["children"], state)

    def _render_heading(self, token: Token, state: BlockState) -> str:
        return self._wrap(_MARK["strong"], token["children"], state)

    def _render_thematic_break(self, token: Token, state: BlockState) -> str:
        return _RULE

    def _render_block_html(self, token: Token, state: BlockState) -> str:
        return escape(token["raw"].strip())

    def _render_block_code(self, token: Token, state: BlockState) -> str:
        code = token["raw"].removesuffix("\n")
        if not code.strip():
            return ""
        # Slack shows a language name after the fence as code: it is left out. A fence inside the
        # code would end the block early, so its backticks are spaced apart.
        return "```\n" + escape(code.replace("```", "` ` `")) + "\n```"

    def _render_block_quote(self, token: Token, state: BlockState) -> str:
        # mrkdwn quotes line by line with a raw ">", and has no quote inside a quote.
        if self._in_quote:
            return self._blocks(token["children"], state)
        self._in_quote = True
        try:
            inner = self._blocks(token["children"], state)
        finally:
            self._in_quote = False
        if not inner.strip():
            return ""
        return "\n".join(f"> {line}" if line else ">" for line in inner.split("\n"))

    def _render_list(self, token: Token, state: BlockState) -> str:
        indent = "    " * self._list_depth
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
                lead = hang if parts else marker
                parts.append(lead + rendered.replace("\n", "\n" + hang))
                continue
            if not parts:
                parts.append(marker.rstrip())
            parts.append(rendered)
        return "\n".join(parts) if parts else marker.rstrip()

    def _render_list_item(self, token: Token, state: BlockState) -> str:  # pragma: no cover
        # Items are rendered by _item with their list's marker; this only guards stray tokens.
        return self._blocks(token["children"], state)

    def _render_table(self, token: Token, state: BlockState) -> str:
        """A table as a monospace block: a code block holds only text, so cells lose their markup."""
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
        return "```\n" + escape("\n".join(lines).replace("```", "` ` `")) + "\n```"


def _spaces(text: str) -> tuple[str, str, str]:
    """(leading spaces, the text between, trailing spaces)."""
    body = text.strip()
    start = text.index(body[0]) if body else len(text)
    return text[:start], body, text[start + len(body) :]
