"""The aiohttp transport under model requests: httpx's errors for each failure, and proxies honoured."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
from aiohttp import web

from bridge.llm.transport import AiohttpTransport, ModelClient
from devkit.fakes.loopback import closed_port


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=AiohttpTransport(), timeout=2.0) as http:
        yield http


async def serve(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


async def test_a_request_and_its_answer_pass_through_unchanged(client: httpx.AsyncClient) -> None:
    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        return web.Response(body=body[::-1], status=201, headers={"X-Seen": request.headers["Authorization"]})

    runner, base = await serve(echo)
    try:
        response = await client.post(f"{base}/v1", content=b"hello", headers={"Authorization": "Bearer k"})
    finally:
        await runner.cleanup()
    assert (response.status_code, response.content, response.headers["x-seen"]) == (201, b"olleh", "Bearer k")


async def test_a_refused_connection_is_a_connect_error_not_a_timeout(client: httpx.AsyncClient) -> None:
    with pytest.raises(httpx.ConnectError) as info:
        await client.get(f"http://127.0.0.1:{closed_port()}/v1")
    assert not isinstance(info.value, httpx.TimeoutException)


async def test_a_server_too_slow_to_answer_is_a_read_timeout(client: httpx.AsyncClient) -> None:
    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.Response(text="late")

    runner, base = await serve(slow)
    try:
        with pytest.raises(httpx.ReadTimeout):
            await client.get(f"{base}/v1", timeout=httpx.Timeout(2.0, read=0.2))
    finally:
        await runner.cleanup()


async def test_a_connection_dropped_mid_body_is_a_read_error(client: httpx.AsyncClient) -> None:
    async def cut(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Length": "1000"})
        await response.prepare(request)
        await response.write(b'{"partial": ')
        assert request.transport is not None
        request.transport.close()
        return response

    runner, base = await serve(cut)
    try:
        with pytest.raises(httpx.ReadError):
            await client.get(f"{base}/v1")
    finally:
        await runner.cleanup()


async def test_the_proxy_variables_are_honoured_as_httpx_honours_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[str] = []

    async def proxy(request: web.Request) -> web.Response:
        seen.append(str(request.url))
        return web.Response(text="via proxy")

    runner, base = await serve(proxy)
    monkeypatch.setenv("HTTP_PROXY", base)
    monkeypatch.setenv("NO_PROXY", "")
    monkeypatch.setenv("no_proxy", "")
    try:
        async with httpx.AsyncClient(transport=AiohttpTransport()) as http:
            response = await http.get("http://model.example/v1/chat/completions")
    finally:
        await runner.cleanup()
    assert response.text == "via proxy"
    assert seen and seen[0].endswith("/v1/chat/completions")


async def test_credentials_in_the_url_go_as_httpx_sends_them_not_as_an_error(
    client: httpx.AsyncClient,
) -> None:
    async def auth(request: web.Request) -> web.Response:
        return web.Response(text=request.headers.get("Authorization", "none"))

    runner, base = await serve(auth)
    try:
        response = await client.get(base.replace("http://", "http://user:secret@") + "/v1")
    finally:
        await runner.cleanup()
    assert response.status_code == 200
    assert response.text.startswith("Basic ")  # httpx made the header; aiohttp did not refuse it


async def test_a_compressed_answer_is_read_whole_and_decoded(client: httpx.AsyncClient) -> None:
    async def zipped(request: web.Request) -> web.Response:
        body = gzip.compress(b'{"choices": []}')
        return web.Response(body=body, content_type="application/json", headers={"Content-Encoding": "gzip"})

    runner, base = await serve(zipped)
    try:
        response = await client.post(f"{base}/v1", content=b"{}")
    finally:
        await runner.cleanup()
    assert response.json() == {"choices": []}


async def test_an_event_stream_arrives_event_by_event_not_when_it_ends(client: httpx.AsyncClient) -> None:
    # Only event streams are left as streams (a whole answer is read at once): the server sends its
    # second event only once the client has read the first, so reading the whole body would hang.
    first_read = asyncio.Event()

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"data: one\n\n")
        await asyncio.wait_for(first_read.wait(), 5)
        await response.write(b"data: two\n\n")
        await response.write_eof()
        return response

    runner, base = await serve(stream)
    lines = []
    try:
        async with client.stream("POST", f"{base}/v1", content=b"{}") as response:
            async for line in response.aiter_lines():
                lines.append(line)
                first_read.set()
    finally:
        await runner.cleanup()
    assert [line for line in lines if line] == ["data: one", "data: two"]


async def test_the_model_client_keeps_a_cookie_the_server_sets_and_sends_it_back() -> None:
    # Its jar is skipped for answers that set none; one that does (a load balancer's sticky
    # session) is kept as httpx keeps it.
    seen: list[str] = []

    async def sticky(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Cookie", ""))
        if request.path == "/plain":
            return web.Response(text="no cookie")
        return web.Response(text="ok", headers={"Set-Cookie": "lb=node-2; Path=/"})

    runner, base = await serve(sticky)
    try:
        async with ModelClient(transport=AiohttpTransport()) as http:
            await http.get(f"{base}/plain")
            assert dict(http.cookies) == {}
            await http.get(f"{base}/v1")
            await http.get(f"{base}/v1")
            assert dict(http.cookies) == {"lb": "node-2"}
    finally:
        await runner.cleanup()
    assert seen == ["", "", "lb=node-2"]
