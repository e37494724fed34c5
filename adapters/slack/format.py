"""Markdown to Slack's mrkdwn, and plain text made safe to send: nothing a model writes can ping.

Slack reads three characters as markup in every text field: `&`, `<` and `>`. Its control sequences
(`<!channel>`, `<!here>`, `<@U123>`, `<#C123>`, `<!subteam^S1>`) and links are written inside angle
brackets, so once every `<` and `>` of the model's text is escaped, the only brackets left are the
links this renderer writes itself, and they hold nothing but an http(s) or mailto address. `@channel`
written as a word notifies no one: messages go with `link_names` off.

The renderer is the project's Markdown parser (mistune, as for Telegram's HTML) with a renderer for
mrkdwn on bridge.markup's base, which walks the Markdown and writes lists, tables and quotes. The
converters on PyPI were weighed and left: slackify-markdown passes `<!channel>` and `<@U…>` through
on purpose, and markdown-to-mrkdwn rewrites with regular expressions and returns its input unchanged
when one fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from mistune.core import BlockState

from bridge.markup import MarkupRenderer, Token

__all__ = ["escape", "to_mrkdwn"]

# What must not appear raw inside <url|label>: it would end the address or the link early.
_URL_UNSAFE = {"|": "%7C", "<": "%3C", ">": "%3E", " ": "%20", "&": "&amp;"}


def escape(text: str) -> str:
    """Plain text as Slack must receive it: `&`, `<` and `>` as entities, so no control sequence
    (a mention, @channel, a link) can be formed."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_mrkdwn(markdown: str) -> str:
    """Render Markdown as mrkdwn: bold, italic, strike, code, code blocks, quotes and links, with
    every other character escaped."""
    return MrkdwnRenderer.render_markdown(markdown)


def _address(url: str) -> str:
    return "".join(_URL_UNSAFE.get(char, char) for char in url.strip())


class MrkdwnRenderer(MarkupRenderer):
    """mrkdwn. It has no headings, lists or tables: headings become bold lines, lists bullets and
    numbers written out, tables a monospace block. A marker inside itself adds nothing and is dropped,
    and code holds only text, as Slack shows it.
    """

    NAME = "mrkdwn"
    # Slack shows other schemes as dead text at best; javascript: and friends never.
    LINK_SCHEMES = ("http://", "https://", "mailto:")
    MARKS: ClassVar[Mapping[str, str]] = {"strong": "*", "emphasis": "_", "strikethrough": "~"}
    LIST_INDENT = "    "

    def escape(self, text: str) -> str:
        return escape(text)

    def enclose(self, mark: str, inner: str) -> str:
        if not inner.strip():
            return inner
        # Slack ends a marker only at a non-space: spaces inside go outside it.
        lead, body, trail = _spaces(inner)
        return f"{lead}{mark}{body}{mark}{trail}"

    def preformatted(self, text: str) -> str:
        # A fence inside the text would end the block early, so its backticks are spaced apart.
        return "```\n" + escape(text.replace("```", "` ` `")) + "\n```"

    def quote(self, inner: str) -> str:
        # mrkdwn quotes line by line with a raw ">".
        return "\n".join(f"> {line}" if line else ">" for line in inner.split("\n"))

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
        if not self.link_allowed(url):
            return escape(label)
        if not label or label == url.strip():
            return f"<{_address(url)}>"
        return f"<{_address(url)}|{escape(label)}>"

    def _render_image(self, token: Token, state: BlockState) -> str:
        # An image in text is a link to it, named by its alt text.
        alt = " ".join(self._plain(token["children"]).split())
        url = token["attrs"]["url"]
        if not self.link_allowed(url):
            return escape(alt)
        return f"<{_address(url)}|{escape(alt)}>" if alt else f"<{_address(url)}>"

    def _render_block_code(self, token: Token, state: BlockState) -> str:
        code = token["raw"].removesuffix("\n")
        if not code.strip():
            return ""
        # Slack shows a language name after the fence as code: it is left out.
        return self.preformatted(code)


def _spaces(text: str) -> tuple[str, str, str]:
    """(leading spaces, the text between, trailing spaces)."""
    body = text.strip()
    start = text.index(body[0]) if body else len(text)
    return text[:start], body, text[start + len(body) :]
