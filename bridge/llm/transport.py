"""An httpx transport on aiohttp: model requests keep httpx's API without httpcore's per-request cost.

Measured with bench/http_throughput.py (100 chats, the instant model in another process): 129
turns/s on httpx's own transport, 277-297 on this one. httpcore checks every pooled connection on
every request; aiohttp's connector does not.

Why not the httpx-aiohttp package, which does the same: its 0.2 maps a refused connection to
ConnectTimeout (its ClientConnectionError entry wins over ClientConnectorError), and the provider's
messages tell "refused" from "timed out" from "cannot connect"; and its session ignores the proxy
variables that httpx honours. This is the part of it Bridge needs, with the mapping the provider
relies on.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import httpx
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL


class ModelClient(httpx.AsyncClient):
    """httpx's client, whose cookie jar is touched only by a response that sets a cookie.

    httpx hands every response to its jar through urllib's request and response shims, 4% of a turn's
    time on the loop, and model servers set no cookies (a load balancer's sticky session still works).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._jar = _SetCookiesOnly(kwargs.get("cookies"))

    @property
    def cookies(self) -> httpx.Cookies:
        return self._jar

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        self._jar = _SetCookiesOnly(cookies)


class _SetCookiesOnly(httpx.Cookies):
    def extract_cookies(self, response: httpx.Response) -> None:
        if "set-cookie" in response.headers:
            super().extract_cookies(response)


class AiohttpTransport(httpx.AsyncBaseTransport):
    """Sends httpx requests with one aiohttp ClientSession, made on first use (inside the loop)."""

    def __init__(self, *, max_connections: int = 100) -> None:
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._proxies = EnvProxies()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._session is None:
            # HTTP(S)_PROXY and NO_PROXY as httpx's own transport honours them: from EnvProxies, not
            # trust_env (see there).
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=self._max_connections))
        timeout = request.extensions.get("timeout", {})
        # Credentials in the URL are httpx's to turn into a header (aiohttp refuses both). Copied only
        # when there are some: the copy parses the URL again.
        url = str(request.url.copy_with(userinfo=b"") if request.url.userinfo else request.url)
        proxy, proxy_auth = self._proxies.of(url)
        with _mapped():
            response = await self._session.request(
                request.method,
                url,
                proxy=proxy,
                proxy_auth=proxy_auth,
                headers=request.headers.multi_items(),
                data=request.content or None,
                allow_redirects=False,
                auto_decompress=False,
                compress=False,
                timeout=aiohttp.ClientTimeout(
                    sock_connect=timeout.get("connect"),
                    sock_read=timeout.get("read"),
                    connect=timeout.get("pool"),
                ),
            ).__aenter__()
        extensions = {"http_version": b"HTTP/1.1", "reason_phrase": (response.reason or "").encode()}
        if response.content_type != "text/event-stream":
            # A whole answer (JSON, or an error page) is read here at once: handed to httpx as a
            # stream, it came back through three async iterators, 3% of a turn's time on the loop.
            with _mapped():
                try:
                    body = await response.read()
                finally:
                    response.release()
            headers = response.raw_headers
            return httpx.Response(
                response.status, headers=headers, content=body, request=request, extensions=extensions
            )
        return httpx.Response(
            status_code=response.status,
            headers=response.raw_headers,
            stream=_Body(response),
            request=request,
            extensions=extensions,
        )

    async def aclose(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()


class EnvProxies:
    """The proxy that HTTP(S)_PROXY and NO_PROXY name for each origin, looked up on its first request.

    aiohttp's trust_env looks the proxy up again for every request, and ~/.netrc too, each on a worker
    thread: two thread hops a request, which cost a `bridge run` Telegram turn about 2.5 ms of its 9 ms
    of CPU (bench/telegram_turn.py). httpx, whose behaviour this keeps, reads the environment once per
    client, and no ~/.netrc.
    """

    def __init__(self) -> None:
        self._known: dict[str, tuple[URL | None, aiohttp.BasicAuth | None]] = {}

    def of(self, url: str) -> tuple[URL | None, aiohttp.BasicAuth | None]:
        """(proxy, its credentials) for a request to url; (None, None) to go direct."""
        path = url.find("/", url.find("//") + 2)
        origin = url if path < 0 else url[:path]
        found = self._known.get(origin)
        if found is None:
            try:
                found = get_env_proxy_for_url(URL(origin))
            except LookupError:  # no proxy for the scheme, or NO_PROXY names the host
                found = (None, None)
            self._known[origin] = found
        return found


class _Body(httpx.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _mapped():
            async for chunk in self._response.content.iter_chunked(64 * 1024):
                yield chunk

    async def aclose(self) -> None:
        self._response.release()


@contextlib.contextmanager
def _mapped() -> Iterator[None]:
    """aiohttp's errors as the httpx errors they are, most specific first; the cause is kept."""
    try:
        yield
    except aiohttp.ConnectionTimeoutError as exc:
        raise httpx.ConnectTimeout(str(exc) or "connect timed out") from exc
    except aiohttp.SocketTimeoutError as exc:
        raise httpx.ReadTimeout(str(exc) or "read timed out") from exc
    except aiohttp.ServerTimeoutError as exc:
        raise httpx.TimeoutException(str(exc) or "timed out") from exc
    except aiohttp.ClientProxyConnectionError as exc:
        raise httpx.ProxyError(str(exc)) from exc
    except aiohttp.ClientConnectorError as exc:
        # Refused, unknown host, unreachable network: the request never left.
        raise httpx.ConnectError(str(exc)) from exc
    except aiohttp.ClientPayloadError as exc:
        raise httpx.ReadError(str(exc)) from exc
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
        raise httpx.ReadError(str(exc) or type(exc).__name__) from exc
    except aiohttp.InvalidURL as exc:
        raise httpx.UnsupportedProtocol(str(exc)) from exc
    except aiohttp.ClientResponseError as exc:
        raise httpx.RemoteProtocolError(str(exc)) from exc
    except aiohttp.ClientError as exc:
        raise httpx.TransportError(str(exc) or type(exc).__name__) from exc
