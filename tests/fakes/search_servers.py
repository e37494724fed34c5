"""Fake search providers on 127.0.0.1: SearXNG's JSON API and the Brave Search API, answering from a
table of canned results, recording each request, and failing on demand."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from devkit.fakes.loopback import LoopbackServer


@dataclass
class Result:
    title: str
    url: str
    snippet: str


@dataclass
class SearchRequest:
    query: str
    params: dict[str, str]
    headers: dict[str, str] = field(default_factory=dict)


class _FakeSearch(LoopbackServer):
    def __init__(self, results: dict[str, list[Result]] | None = None) -> None:
        super().__init__()
        self.results = results or {}
        self.requests: list[SearchRequest] = []
        # The HTTP status to answer with instead of results, and the body to send instead of JSON.
        self.status = 200
        self.raw_body: str | None = None

    def _record(self, request: web.Request) -> str:
        query = request.query.get("q", "")
        self.requests.append(SearchRequest(query, dict(request.query), dict(request.headers)))
        self._notify()
        return query

    def _refusal(self) -> web.Response | None:
        if self.status != 200:
            return web.json_response({"error": "refused"}, status=self.status)
        if self.raw_body is not None:
            return web.Response(text=self.raw_body, content_type="text/html")
        return None


class FakeSearxng(_FakeSearch):
    """`GET /search?q=…&format=json` as SearXNG answers it (results: title, url, content)."""

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/search", self._search)

    async def _search(self, request: web.Request) -> web.Response:
        query = self._record(request)
        if (refused := self._refusal()) is not None:
            return refused
        if request.query.get("format") != "json":
            # SearXNG refuses formats its settings do not enable.
            return web.Response(status=403, text="format not allowed")
        found = [
            {"title": r.title, "url": r.url, "content": r.snippet, "engine": "fake"}
            for r in self.results.get(query, [])
        ]
        body: dict[str, Any] = {"query": query, "number_of_results": len(found), "results": found}
        return web.json_response(body)


class FakeBrave(_FakeSearch):
    """`GET /web/search?q=…&count=N` with X-Subscription-Token, as the Brave Search API answers it."""

    def __init__(self, key: str, results: dict[str, list[Result]] | None = None) -> None:
        super().__init__(results)
        self.key = key

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/web/search", self._search)

    async def _search(self, request: web.Request) -> web.Response:
        query = self._record(request)
        if request.headers.get("X-Subscription-Token") != self.key:
            return web.json_response(
                {"type": "ErrorResponse", "error": {"code": "SUBSCRIPTION_TOKEN_INVALID"}}, status=401
            )
        if (refused := self._refusal()) is not None:
            return refused
        count = int(request.query.get("count", "20"))
        found = [
            {"title": r.title, "url": r.url, "description": r.snippet, "type": "search_result"}
            for r in self.results.get(query, [])[:count]
        ]
        return web.json_response({"type": "search", "query": {"original": query}, "web": {"results": found}})
