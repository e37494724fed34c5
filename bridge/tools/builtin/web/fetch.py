"""webfetch: a page over HTTP(S), refusing private addresses at connect time."""

from __future__ import annotations

import asyncio

import httpx
from pydantic import Field

from bridge.errors import BlockedAddressError
from bridge.tools.arguments import Arguments, Positive, Text, typed_tool
from bridge.tools.base import ToolContext, ToolResult
from bridge.tools.builtin.web.guard import FETCH_TIMEOUT_S, MAX_REDIRECTS, USER_AGENT, GuardedTransport
from bridge.tools.builtin.web.text import html_to_text


def _kind(content_type: str) -> str | None:
    mime = content_type.split(";", 1)[0].strip().lower()
    if mime in ("text/html", "application/xhtml+xml"):
        return "html"
    if mime in ("text/plain", "text/markdown"):
        return "text"
    if mime == "application/json" or mime.endswith("+json"):
        return "json"
    return None


class WebfetchArgs(Arguments):
    url: Text = Field(description="The http:// or https:// URL to fetch.")
    max_chars: Positive | None = Field(
        None, description="Return at most this many characters of text (default from settings)."
    )


def _check_url(url: str) -> httpx.URL | ToolResult:
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        return ToolResult.error("invalid_url", f"'{url}' is not a valid URL: {exc}")
    if parsed.scheme not in ("http", "https") or not parsed.host:
        return ToolResult.error("invalid_url", f"'{url}' is not an http:// or https:// URL.")
    return parsed


async def _read_capped(response: httpx.Response, max_bytes: int) -> tuple[bytes, bool]:
    """Up to max_bytes of the (decoded) body, and whether there was more."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body.extend(chunk)
        if len(body) > max_bytes:
            # Stop reading: the rest is never downloaded, only this chunk's overshoot is dropped.
            return bytes(body[:max_bytes]), True
    return bytes(body), False


def _decode(body: bytes, encoding: str | None) -> str:
    try:
        return body.decode(encoding or "utf-8", errors="replace")
    except LookupError:
        return body.decode("utf-8", errors="replace")


async def _webfetch(args: WebfetchArgs, ctx: ToolContext) -> ToolResult:
    url = _check_url(args.url)
    if isinstance(url, ToolResult):
        return url
    settings = ctx.settings.tools
    max_chars = args.max_chars or settings.web_max_chars

    transport = GuardedTransport(allow_private_network=settings.allow_private_network)
    try:
        async with (
            # httpx's timeout is per operation; this bounds the whole fetch against a slow drip.
            asyncio.timeout(FETCH_TIMEOUT_S),
            httpx.AsyncClient(
                transport=transport,
                # No proxies: the guard must see the real peer, not a proxy's address.
                trust_env=False,
                follow_redirects=True,
                max_redirects=MAX_REDIRECTS,
                timeout=FETCH_TIMEOUT_S,
                headers={"User-Agent": USER_AGENT},
            ) as client,
            client.stream("GET", url) as response,
        ):
            if response.status_code >= 400:
                reason = response.reason_phrase or "error"
                return ToolResult.error(
                    "http_error", f"HTTP {response.status_code} {reason} for {response.url}"
                )
            content_type = response.headers.get("content-type", "")
            kind = _kind(content_type)
            if kind is None:
                shown = content_type.split(";", 1)[0].strip() or "no content type"
                return ToolResult.error(
                    "unsupported_content",
                    f"{response.url} is {shown}; only HTML, plain text and JSON can be read.",
                )
            body, bytes_truncated = await _read_capped(response, settings.web_max_bytes)
            final_url = str(response.url)
            status = response.status_code
            text = _decode(body, response.encoding)
    except BlockedAddressError as exc:
        return ToolResult.error("blocked_address", str(exc))
    except httpx.TooManyRedirects:
        return ToolResult.error("fetch_failed", f"More than {MAX_REDIRECTS} redirects fetching {url}.")
    except (httpx.TimeoutException, TimeoutError):
        return ToolResult.error("fetch_failed", f"Timed out after {FETCH_TIMEOUT_S:g} s fetching {url}.")
    except httpx.UnsupportedProtocol as exc:
        # Only reachable through a redirect: the starting URL's scheme was checked above.
        return ToolResult.error("fetch_failed", f"Redirected to an unsupported URL: {exc}")
    except httpx.ConnectError as exc:
        return ToolResult.error("fetch_failed", f"Could not connect to {url.host}: {exc}")
    except httpx.HTTPError as exc:
        return ToolResult.error("fetch_failed", f"Fetching {url} failed: {str(exc) or type(exc).__name__}")

    title = ""
    if kind == "html":
        title, text = html_to_text(text)

    notes: list[str] = []
    if bytes_truncated:
        notes.append(f"[truncated: the response is larger than {settings.web_max_bytes} bytes]")
    if len(text) > max_chars:
        notes.append(f"[truncated to {max_chars} of {len(text)} characters]")
        text = text[:max_chars]

    header = [f"URL: {final_url}", f"Status: {status}"]
    if title:
        header.append(f"Title: {title}")
    out = "\n".join(header) + "\n\n" + text
    if notes:
        out += "\n\n" + "\n".join(notes)
    return ToolResult.success(out)


webfetch = typed_tool(
    "webfetch",
    "Fetch a web page (http or https) and return its readable text: for HTML the title and "
    "visible text, for plain text and JSON the body as is. Follows up to 5 redirects.",
    WebfetchArgs,
    _webfetch,
)
