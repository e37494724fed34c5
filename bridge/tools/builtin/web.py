"""The `web` tool group: fetch a page over HTTP(S), refusing private addresses at connect time."""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable
from functools import cache
from html.parser import HTMLParser

import httpcore
import httpx
from pydantic import Field

from bridge.errors import BlockedAddressError
from bridge.tools.arguments import Arguments, Positive, Text, typed_tool
from bridge.tools.base import ToolContext, ToolGroup, ToolResult

USER_AGENT = "Bridge/0.1"
FETCH_TIMEOUT_S = 20.0
MAX_REDIRECTS = 5

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# (host, port) -> the IP address strings to dial, in preference order.
Resolver = Callable[[str, int], Awaitable[list[str]]]


def is_blocked_address(ip: IPAddress) -> bool:
    """True for any address that is not plainly on the public internet."""
    if isinstance(ip, ipaddress.IPv6Address):
        # ::ffff:10.0.0.1 and 6to4 2002:0a00:0001:: reach IPv4 hosts; judge the IPv4 inside.
        # (Python's own flags for mapped addresses differ between patch releases.)
        if ip.ipv4_mapped is not None:
            return is_blocked_address(ip.ipv4_mapped)
        if ip.sixtofour is not None and is_blocked_address(ip.sixtofour):
            return True
    return (
        ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_reserved
        or ip.is_multicast
        or ip.is_unspecified
        # Catches what the flags above miss, e.g. carrier-grade NAT 100.64.0.0/10.
        or not ip.is_global
    )


async def system_resolver(host: str, port: int) -> list[str]:
    """Every address getaddrinfo gives for host, deduplicated, in the order given."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses: list[str] = []
    for _family, _type, _proto, _canon, sockaddr in infos:
        address = str(sockaddr[0])
        if address not in addresses:
            addresses.append(address)
    return addresses


class GuardedNetworkBackend(httpcore.AsyncNetworkBackend):
    """An httpcore backend that resolves the host itself, vets every address, then dials an IP.

    Doing this at connect time, on the addresses actually dialled, covers the first request,
    every redirect hop, and DNS rebinding (the name is resolved once, here, and the vetted IP is
    what gets connected; nothing resolves it a second time).
    """

    def __init__(
        self,
        allow_private_network: bool,
        inner: httpcore.AsyncNetworkBackend | None = None,
        resolver: Resolver | None = None,
    ) -> None:
        self._allow_private = allow_private_network
        self._inner = inner if inner is not None else httpcore.AnyIOBackend()
        self._resolve = resolver if resolver is not None else system_resolver

    def vet(self, host: str, ip: str, port: int) -> None:
        """Raise BlockedAddressError unless (ip, port) may be dialled for host."""
        if self._allow_private:
            return
        try:
            address = ipaddress.ip_address(ip)
        except ValueError:
            # Not an address we can judge (should not happen with getaddrinfo output): refuse.
            raise BlockedAddressError(host, ip) from None
        if is_blocked_address(address):
            raise BlockedAddressError(host, ip)

    async def connect_tcp(
        self,
        host: str,
        port: int,
        # The name and shape are httpcore's backend interface, not a choice made here.
        timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                addresses = await self._resolve(host, port)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"timed out resolving {host}") from None
        except OSError as exc:
            raise httpcore.ConnectError(f"could not resolve {host}: {exc.strerror or exc}") from None
        if not addresses:
            raise httpcore.ConnectError(f"could not resolve {host}: no addresses")
        # Every address first, so a name mixing public and private answers is refused outright
        # rather than depending on which one happens to answer.
        for ip in addresses:
            self.vet(host, ip, port)

        last_error: Exception | None = None
        for ip in addresses:
            try:
                # TLS still verifies and sends SNI for the original host name: httpcore takes those
                # from the request's origin, not from what is dialled here.
                return await self._inner.connect_tcp(
                    ip, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last_error = exc
        assert last_error is not None
        raise last_error

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        # A unix socket is local by definition; the tool never asks for one.
        raise httpcore.ConnectError("unix sockets are not allowed")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


@cache
def _ssl_context() -> ssl.SSLContext:
    # Loading the CA bundle takes milliseconds; one shared context serves every fetch. Its
    # trust_env only means SSL_CERT_FILE/SSL_CERT_DIR are honoured, never proxies.
    return httpx.create_ssl_context()


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport, with a connection pool whose every TCP connect goes through the guard."""

    def __init__(
        self, allow_private_network: bool, backend: httpcore.AsyncNetworkBackend | None = None
    ) -> None:
        super().__init__(verify=_ssl_context(), trust_env=False)
        # Replacing the pool, built with httpcore's public `network_backend` argument, is less
        # fragile than poking the pool's private `_network_backend` (which it also copies into
        # each connection). The one private name relied on is httpx's `_pool`; check it is there
        # so a rename in httpx fails loudly here instead of silently dropping the guard.
        if not isinstance(getattr(self, "_pool", None), httpcore.AsyncConnectionPool):
            raise RuntimeError("httpx.AsyncHTTPTransport no longer has a _pool; cannot install the guard")
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=_ssl_context(),
            network_backend=backend or GuardedNetworkBackend(allow_private_network),
        )


# --- text extraction ---------------------------------------------------------------------------

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


def _kind(content_type: str) -> str | None:
    mime = content_type.split(";", 1)[0].strip().lower()
    if mime in ("text/html", "application/xhtml+xml"):
        return "html"
    if mime in ("text/plain", "text/markdown"):
        return "text"
    if mime == "application/json" or mime.endswith("+json"):
        return "json"
    return None


# --- the tool ----------------------------------------------------------------------------------


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


def web_group() -> ToolGroup:
    """The `web` group: webfetch."""
    return ToolGroup(name="web", description="Fetch a web page and read its text", tools=(webfetch,))
