"""The SSRF guard every tool that reaches the web goes through: each address is vetted when it is
dialled, so redirects and DNS rebinding are covered (webfetch, web_search, the browser)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable
from functools import cache

import httpcore
import httpx

from bridge.errors import BlockedAddressError

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
