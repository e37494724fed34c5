"""What the browser may reach: the decision on one URL or one host, shared by the context's request
routes (engine) and the vetting proxy every request goes through (proxy).

The rules are webfetch's (bridge.tools.builtin.web.guard): a host is resolved and every address it
gives is judged by `is_blocked_address`; one private answer refuses the host, so a name mixing public
and private addresses cannot win by luck. Only http(s) pages may be shown; ws(s) may be opened by
them, and data:/blob: only as a page's own subresources, never as the page.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import SplitResult, urlsplit

from bridge.errors import BlockedAddressError
from bridge.tools.builtin.web.guard import IPAddress, Resolver, is_blocked_address, system_resolver

# A page is only ever one of these.
PAGE_SCHEMES = frozenset({"http", "https"})
# What a page may request besides pages: its WebSockets, and what it builds in memory (no network).
SUBRESOURCE_SCHEMES = PAGE_SCHEMES | {"ws", "wss", "data", "blob"}
# The empty page a new tab starts on; the one about: URL allowed.
BLANK = "about:blank"
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
# A resolver that hangs must not hold a request (or the proxy's connection) forever.
RESOLVE_TIMEOUT_S = 10.0

Blocked = Callable[[IPAddress], bool]


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request was not let through: `code` is blocked_address, invalid_url or unresolvable."""

    code: str
    message: str
    host: str = ""


@dataclass(frozen=True, slots=True)
class Policy:
    """Which hosts the browser may reach. `resolver` and `blocked` are seams for the tests (a name that
    resolves to a private address without real DNS); a Bridge always runs with the defaults."""

    allow_private_network: bool
    resolver: Resolver = field(default=system_resolver)
    blocked: Blocked = field(default=is_blocked_address)

    async def addresses(self, host: str, port: int) -> list[str] | Refusal:
        """The addresses to dial for host, every one vetted (refused as a whole if one is blocked)."""
        literal = _ip_literal(host)
        if literal is not None:
            addresses = [str(literal)]
        else:
            try:
                async with asyncio.timeout(RESOLVE_TIMEOUT_S):
                    addresses = await self.resolver(host, port)
            except TimeoutError:
                return Refusal("unresolvable", f"Timed out resolving {host}.", host)
            except OSError as exc:
                return Refusal("unresolvable", f"Could not resolve {host}: {exc.strerror or exc}.", host)
            if not addresses:
                return Refusal("unresolvable", f"Could not resolve {host}: no addresses.", host)
        if self.allow_private_network:
            return addresses
        for ip in addresses:
            refusal = self.vet_address(host, ip)
            if refusal is not None:
                return refusal
        return addresses

    def vet_address(self, host: str, ip: str) -> Refusal | None:
        try:
            address = ipaddress.ip_address(ip)
        except ValueError:
            # Not an address we can judge (getaddrinfo never gives one): refuse.
            return Refusal("blocked_address", str(BlockedAddressError(host, ip)), host)
        if self.blocked(address):
            return Refusal("blocked_address", str(BlockedAddressError(host, ip)), host)
        return None

    async def vet_url(self, url: str, *, page: bool) -> Refusal | None:
        """None if the browser may request url; `page` for what becomes a page (a navigation, a frame)."""
        if page and url == BLANK:
            return None
        parts = parse(url, page=page)
        if isinstance(parts, Refusal):
            return parts
        if parts.scheme in ("data", "blob"):
            # Made by the page from what it already has: nothing is fetched.
            return None
        assert parts.hostname is not None
        if self.allow_private_network:
            # Nothing to judge; the proxy still resolves the name itself when it dials.
            return None
        found = await self.addresses(parts.hostname, port_of(parts))
        return found if isinstance(found, Refusal) else None


def parse(url: str, *, page: bool) -> SplitResult | Refusal:
    """url split, or invalid_url: a page must be http(s) with a host; a subresource may also be ws(s),
    data: or blob:. file:, chrome:, javascript:, about: (but about:blank) and the rest never pass."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a port out of range)
    except ValueError as exc:
        return Refusal("invalid_url", f"'{url}' is not a valid URL: {exc}.")
    scheme = parts.scheme.lower()
    allowed = PAGE_SCHEMES if page else SUBRESOURCE_SCHEMES
    if scheme not in allowed:
        what = "an http:// or https:// URL" if page else "a URL a web page may load"
        shown = url if len(url) <= 100 else url[:100] + "…"
        return Refusal("invalid_url", f"'{shown}' is not {what}; only web pages can be opened.")
    if scheme not in ("data", "blob") and not parts.hostname:
        return Refusal("invalid_url", f"'{url}' has no host.")
    return parts


def port_of(parts: SplitResult) -> int:
    return parts.port or DEFAULT_PORTS.get(parts.scheme.lower(), 80)


def _ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
