"""The web tool group: text extraction, limits, and the connect-time private-address guard."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpcore
import pytest
from aiohttp import web

from bridge.errors import BlockedAddressError
from bridge.tools.base import ToolContext, ToolResult
from bridge.tools.builtin.web import (
    GuardedNetworkBackend,
    html_to_text,
    is_blocked_address,
    web_group,
    webfetch,
)
from tests.tools.conftest import MakeContext

PAGE = """<!doctype html>
<html><head><title> Hello   World </title>
<style>.hidden { color: red }</style>
<script>var leaked = "script text";</script>
<meta charset="utf-8"></head>
<body>
<h1>Heading</h1>
<p>First   paragraph
spans lines.</p>
<script>alert("body script")</script>
<noscript>Please enable JavaScript</noscript>
<div>Second<br>line &amp; more</div>
<svg><title>tooltip</title></svg>
</body></html>"""


@dataclass
class Server:
    """One aiohttp server on 127.0.0.1 and the paths it was asked for."""

    port: int
    hits: list[str] = field(default_factory=list)

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"


Routes = dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]]
StartServer = Callable[[Routes], Awaitable[Server]]


@pytest.fixture
async def start_server() -> AsyncIterator[StartServer]:
    runners: list[web.AppRunner] = []

    async def start(routes: Routes) -> Server:
        server = Server(port=0)

        @web.middleware
        async def record(
            request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
        ) -> web.StreamResponse:
            server.hits.append(request.path)
            return await handler(request)

        app = web.Application(middlewares=[record])
        for path, handler in routes.items():
            app.router.add_get(path, handler)
        runner = web.AppRunner(app)
        await runner.setup()
        runners.append(runner)
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        server.port = runner.addresses[0][1]
        return server

    yield start
    for runner in runners:
        await runner.cleanup()


async def fetch(ctx: ToolContext, **args: Any) -> ToolResult:
    return await webfetch(args, ctx)


def text_handler(
    body: str, content_type: str = "text/plain"
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(text=body, content_type=content_type)

    return handler


@pytest.fixture
def private_ctx(make_ctx: MakeContext) -> ToolContext:
    """The test servers are on loopback, so most tests must allow private addresses."""
    return make_ctx(allow_private_network=True)


def test_group_exposes_webfetch() -> None:
    group = web_group()
    assert group.name == "web"
    assert [tool.name for tool in group.tools] == ["webfetch"]


async def test_html_is_reduced_to_title_and_visible_text(
    private_ctx: ToolContext, start_server: StartServer
) -> None:
    server = await start_server({"/": text_handler(PAGE, "text/html")})

    result = await fetch(private_ctx, url=server.url())

    assert result.ok, result.content
    header, _, body = result.content.partition("\n\n")
    assert header == f"URL: {server.url()}\nStatus: 200\nTitle: Hello World"
    assert body == "Heading\nFirst paragraph spans lines.\nSecond\nline & more\ntooltip"
    for hidden in ("script text", "body script", "color: red", "enable JavaScript"):
        assert hidden not in result.content


def test_inline_elements_keep_the_spaces_around_them() -> None:
    assert html_to_text("<p>a <b>bold</b>\n<i>word</i>, then<br/>next</p>") == ("", "a bold word, then\nnext")


def test_html_without_closing_head_still_shows_the_body() -> None:
    title, text = html_to_text("<html><head><title>T</title><body><p>Visible</p>")
    assert (title, text) == ("T", "Visible")


async def test_plain_text_and_json_are_returned_as_is(
    private_ctx: ToolContext, start_server: StartServer
) -> None:
    server = await start_server(
        {
            "/t": text_handler("  keep   this\n\nspacing  "),
            "/j": text_handler('{"a": [1, 2]}', "application/json"),
        }
    )

    text = await fetch(private_ctx, url=server.url("/t"))
    data = await fetch(private_ctx, url=server.url("/j"))

    assert text.content.endswith("\n\n  keep   this\n\nspacing  ")
    assert data.content.endswith('\n\n{"a": [1, 2]}')
    assert "Title:" not in text.content


async def test_body_is_capped_at_web_max_bytes(make_ctx: MakeContext, start_server: StartServer) -> None:
    ctx = make_ctx(allow_private_network=True, web_max_bytes=1000)
    server = await start_server({"/": text_handler("a" * 200_000)})

    result = await fetch(ctx, url=server.url())

    assert result.ok
    assert "a" * 1000 in result.content and "a" * 1001 not in result.content
    assert "larger than 1000 bytes" in result.content


async def test_text_is_truncated_to_max_chars(private_ctx: ToolContext, start_server: StartServer) -> None:
    server = await start_server({"/": text_handler("b" * 5000)})

    result = await fetch(private_ctx, url=server.url(), max_chars=100)

    assert "b" * 100 in result.content and "b" * 101 not in result.content
    assert "truncated to 100 of 5000 characters" in result.content


async def test_loopback_is_refused_by_default(make_ctx: MakeContext, start_server: StartServer) -> None:
    server = await start_server({"/": text_handler("private data")})

    for url in (server.url(), f"http://localhost:{server.port}/"):
        result = await fetch(make_ctx(), url=url)
        assert result.code == "blocked_address", result.content
        assert "allow_private_network = true" in result.content
    assert server.hits == []


async def test_loopback_is_allowed_with_allow_private_network(
    private_ctx: ToolContext, start_server: StartServer
) -> None:
    server = await start_server({"/": text_handler("private data")})

    result = await fetch(private_ctx, url=server.url())

    assert result.ok
    assert result.content.endswith("private data")


async def test_redirects_are_followed_to_the_final_url(
    private_ctx: ToolContext, start_server: StartServer
) -> None:
    async def hop(request: web.Request) -> web.Response:
        raise web.HTTPFound("/final")

    server = await start_server({"/start": hop, "/final": text_handler("arrived")})

    result = await fetch(private_ctx, url=server.url("/start"))

    assert result.content.startswith(f"URL: {server.url('/final')}\nStatus: 200")


async def test_redirect_from_allowed_host_to_loopback_is_refused(
    make_ctx: MakeContext, start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    internal = await start_server({"/secret": text_handler("internal admin page")})

    async def bounce(request: web.Request) -> web.Response:
        raise web.HTTPFound(internal.url("/secret"))

    public = await start_server({"/": bounce})

    # Pretend only the `public` server's address is on the internet; everything else keeps the
    # real vetting. A guard that only checked the first URL would follow the redirect.
    real_vet = GuardedNetworkBackend.vet
    vetted: list[int] = []

    def vet(self: GuardedNetworkBackend, host: str, ip: str, port: int) -> None:
        vetted.append(port)
        if port != public.port:
            real_vet(self, host, ip, port)

    monkeypatch.setattr(GuardedNetworkBackend, "vet", vet)

    result = await fetch(make_ctx(), url=public.url())

    assert result.code == "blocked_address", result.content
    assert public.hits == ["/"]
    assert internal.hits == []
    assert vetted == [public.port, internal.port]


async def test_non_http_scheme_is_refused(ctx: ToolContext) -> None:
    for url in ("file:///etc/passwd", "ftp://example.com/x", "javascript:alert(1)", "not a url"):
        result = await fetch(ctx, url=url)
        assert result.code == "invalid_url", (url, result.content)


async def test_missing_url_is_reported(ctx: ToolContext) -> None:
    result = await fetch(ctx)
    assert result.content == "Error [invalid_arguments]: Invalid arguments for webfetch: 'url' is required."


async def test_not_found_is_an_http_error(private_ctx: ToolContext, start_server: StartServer) -> None:
    server = await start_server({})

    result = await fetch(private_ctx, url=server.url("/missing"))

    assert result.code == "http_error"
    assert "HTTP 404" in result.content


async def test_unsupported_content_type_is_refused(
    private_ctx: ToolContext, start_server: StartServer
) -> None:
    async def image(request: web.Request) -> web.Response:
        return web.Response(body=b"\x89PNG\r\n", content_type="image/png")

    server = await start_server({"/img": image})

    result = await fetch(private_ctx, url=server.url("/img"))

    assert result.code == "unsupported_content"
    assert "image/png" in result.content


async def test_connection_refused_is_fetch_failed(private_ctx: ToolContext) -> None:
    # A port that was free a moment ago: nothing listens there now.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    result = await fetch(private_ctx, url=f"http://127.0.0.1:{port}/")

    assert result.code == "fetch_failed"
    assert "127.0.0.1" in result.content


# --- the guard itself ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.1.2.3",
        "10.0.0.1",
        "172.16.5.4",
        "192.168.1.1",
        "169.254.169.254",  # cloud metadata
        "100.64.0.1",  # carrier-grade NAT
        "0.0.0.0",
        "224.0.0.1",
        "240.0.0.1",
        "255.255.255.255",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "2002:7f00:1::",  # 6to4 wrapping 127.0.0.1
    ],
)
def test_private_and_special_addresses_are_blocked(address: str) -> None:
    assert is_blocked_address(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"])
def test_public_addresses_are_not_blocked(address: str) -> None:
    assert not is_blocked_address(ipaddress.ip_address(address))


class RecordingBackend(httpcore.AsyncNetworkBackend):
    """Stands in for the real network: records what would have been dialled."""

    def __init__(self) -> None:
        self.dialled: list[tuple[str, int]] = []

    async def connect_tcp(  # type: ignore[override]  # the options we ignore are keyword-only here
        self, host: str, port: int, **kwargs: Any
    ) -> httpcore.AsyncNetworkStream:
        self.dialled.append((host, port))
        return httpcore.AsyncNetworkStream()


class ScriptedResolver:
    """Answers each lookup with the next scripted answer, like a rebinding DNS server."""

    def __init__(self, *answers: list[str]) -> None:
        self._answers = list(answers)

    async def __call__(self, host: str, port: int) -> list[str]:
        return self._answers.pop(0)


async def test_guard_dials_the_vetted_ip_not_the_name() -> None:
    inner = RecordingBackend()
    backend = GuardedNetworkBackend(False, inner=inner, resolver=ScriptedResolver(["93.184.215.14"]))

    await backend.connect_tcp("example.test", 443)

    assert inner.dialled == [("93.184.215.14", 443)]


async def test_guard_refuses_a_rebinding_answer_at_connect_time() -> None:
    inner = RecordingBackend()
    resolver = ScriptedResolver(["93.184.215.14"], ["127.0.0.1"])
    backend = GuardedNetworkBackend(False, inner=inner, resolver=resolver)

    await backend.connect_tcp("rebind.test", 80)
    with pytest.raises(BlockedAddressError, match=r"rebind\.test \(127\.0\.0\.1\)"):
        await backend.connect_tcp("rebind.test", 80)

    assert inner.dialled == [("93.184.215.14", 80)]


async def test_guard_refuses_a_name_with_any_private_answer() -> None:
    inner = RecordingBackend()
    resolver = ScriptedResolver(["93.184.215.14", "10.0.0.7"])
    backend = GuardedNetworkBackend(False, inner=inner, resolver=resolver)

    with pytest.raises(BlockedAddressError):
        await backend.connect_tcp("mixed.test", 80)

    assert inner.dialled == []


async def test_guard_allows_private_answers_when_configured() -> None:
    inner = RecordingBackend()
    backend = GuardedNetworkBackend(True, inner=inner, resolver=ScriptedResolver(["10.0.0.7"]))

    await backend.connect_tcp("intranet.test", 8080)

    assert inner.dialled == [("10.0.0.7", 8080)]
