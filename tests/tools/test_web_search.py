"""web_search against fake SearXNG and Brave servers on 127.0.0.1: results, the cache, the key, failures,
and that an unconfigured bot never offers the tool."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import devkit.fakes.openai_server as fake
from bridge.app.registry import build_registry
from bridge.config import Settings
from bridge.errors import ConfigError
from bridge.tools.base import ToolContext, ToolResult
from bridge.tools.builtin.web.search import CACHE, web_search
from devkit.fakes.loopback import closed_port
from devkit.fakes.openai_server import FakeOpenAI
from tests.fakes.search_servers import FakeBrave, FakeSearxng, Result
from tests.harness import running_bridge
from tests.tools.conftest import MakeContext

KEY = "brave-key-77c1"
PYTHON = [
    Result("<strong>Python</strong> language", "https://www.python.org/", "The <b>official</b> home"),
    Result("Python docs", "https://docs.python.org/3/", "Docs for Python 3"),
    Result("Evil", "javascript:alert(1)", "not a web page"),
    Result("PyPI", "https://pypi.org/", "The package index"),
]


@pytest.fixture(autouse=True)
def empty_cache() -> Iterator[None]:
    CACHE.clear()
    yield
    CACHE.clear()


@pytest.fixture
async def searxng() -> AsyncIterator[FakeSearxng]:
    async with FakeSearxng({"python": PYTHON}) as server:
        yield server


@pytest.fixture
async def brave() -> AsyncIterator[FakeBrave]:
    async with FakeBrave(KEY, {"python": PYTHON}) as server:
        yield server


async def search(ctx: ToolContext, **args: Any) -> ToolResult:
    return await web_search(args, ctx)


def searxng_ctx(make_ctx: MakeContext, server: FakeSearxng, **more: Any) -> ToolContext:
    return make_ctx(web_search={"provider": "searxng", "base_url": server.origin, **more})


async def test_searxng_results_are_titles_urls_and_plain_snippets(
    make_ctx: MakeContext, searxng: FakeSearxng
) -> None:
    result = await search(searxng_ctx(make_ctx, searxng), query="python")

    assert result.ok, result.content
    body = json.loads(result.content)
    assert body["results"][:2] == [
        {"title": "Python language", "url": "https://www.python.org/", "snippet": "The official home"},
        {"title": "Python docs", "url": "https://docs.python.org/3/", "snippet": "Docs for Python 3"},
    ]
    # A result that is not a web page never reaches the model as a link to follow.
    assert all(r["url"].startswith("https://") for r in body["results"])
    assert "untrusted" in body["note"]
    assert searxng.requests[0].params == {"q": "python", "format": "json"}


async def test_results_stop_at_max_results_whatever_the_model_asks(
    make_ctx: MakeContext, searxng: FakeSearxng
) -> None:
    ctx = searxng_ctx(make_ctx, searxng, max_results=2)

    asked_more = json.loads((await search(ctx, query="python", max_results=50)).content)
    asked_fewer = json.loads((await search(ctx, query="python", max_results=1)).content)

    assert len(asked_more["results"]) == 2
    assert len(asked_fewer["results"]) == 1


async def test_the_same_query_is_answered_from_the_cache_until_it_expires(
    make_ctx: MakeContext, searxng: FakeSearxng
) -> None:
    cached = searxng_ctx(make_ctx, searxng)
    first = await search(cached, query="python")
    second = await search(cached, query="python")
    assert first.content == second.content
    assert len(searxng.requests) == 1

    expired = searxng_ctx(make_ctx, searxng, cache_ttl_s=0)
    await search(expired, query="python")
    assert len(searxng.requests) == 2


async def test_no_results_is_an_empty_list_not_an_error(make_ctx: MakeContext, searxng: FakeSearxng) -> None:
    result = await search(searxng_ctx(make_ctx, searxng), query="nothing matches this")
    assert result.ok and json.loads(result.content)["results"] == []


async def test_brave_sends_the_key_from_the_named_variable(
    make_ctx: MakeContext, brave: FakeBrave, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_BRAVE_KEY", KEY)
    ctx = make_ctx(
        web_search={"provider": "brave", "base_url": brave.origin, "api_key_env": "TEST_BRAVE_KEY"}
    )

    result = await search(ctx, query="python", max_results=2)

    assert result.ok, result.content
    assert [r["url"] for r in json.loads(result.content)["results"]] == [
        "https://www.python.org/",
        "https://docs.python.org/3/",
    ]
    assert brave.requests[0].params == {"q": "python", "count": "2"}


async def test_brave_without_its_key_names_the_variable_and_sends_nothing(
    make_ctx: MakeContext, brave: FakeBrave, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEST_BRAVE_KEY", raising=False)
    ctx = make_ctx(
        web_search={"provider": "brave", "base_url": brave.origin, "api_key_env": "TEST_BRAVE_KEY"}
    )

    result = await search(ctx, query="python")

    assert result.code == "not_configured"
    assert "TEST_BRAVE_KEY" in result.content
    assert brave.requests == []


async def test_a_refused_key_is_reported_without_the_key(
    make_ctx: MakeContext, brave: FakeBrave, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_BRAVE_KEY", "a-wrong-key-5150")
    ctx = make_ctx(
        web_search={"provider": "brave", "base_url": brave.origin, "api_key_env": "TEST_BRAVE_KEY"}
    )

    result = await search(ctx, query="python")

    assert result.code == "search_failed" and "HTTP 401" in result.content
    assert "a-wrong-key-5150" not in result.content


@pytest.mark.parametrize(
    ("status", "raw", "code", "words"),
    [
        (429, None, "rate_limited", "too many searches"),
        (500, None, "search_failed", "HTTP 500"),
        (200, "<html>not json</html>", "search_failed", "other than JSON"),
    ],
)
async def test_a_failing_provider_gives_an_error_result_in_plain_words(
    make_ctx: MakeContext, searxng: FakeSearxng, status: int, raw: str | None, code: str, words: str
) -> None:
    searxng.status, searxng.raw_body = status, raw

    result = await search(searxng_ctx(make_ctx, searxng), query="python")

    assert result.code == code and words in result.content
    # A failure is not cached: the next call asks again.
    await search(searxng_ctx(make_ctx, searxng), query="python")
    assert len(searxng.requests) == 2


async def test_an_unreachable_instance_is_search_failed(make_ctx: MakeContext) -> None:
    ctx = make_ctx(web_search={"provider": "searxng", "base_url": f"http://127.0.0.1:{closed_port()}"})
    result = await search(ctx, query="python")
    assert result.code == "search_failed" and "could not be reached" in result.content


def test_web_search_is_offered_only_once_a_provider_is_configured() -> None:
    assert build_registry(Settings()).get("web_search") is None
    configured = build_registry(
        Settings(tools={"web_search": {"provider": "searxng", "base_url": "http://127.0.0.1:8888"}})
    )
    assert configured.group_of("web_search") == "web"
    assert [t.name for t in configured.tools_of(configured.group("web"))] == ["webfetch", "web_search"]  # type: ignore[arg-type]


def test_disabling_web_search_while_it_is_not_configured_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="web_search"):
        build_registry(Settings(tools={"disabled": ["web_search"]}))


@pytest.mark.parametrize(
    ("section", "key"),
    [({"provider": "google"}, "provider"), ({"provider": "searxng", "base_url": "searx.lan"}, "base_url")],
)
def test_a_bad_web_search_setting_names_its_key(section: dict[str, str], key: str) -> None:
    with pytest.raises(ValueError, match=f"web_search.{key}|{key}"):
        Settings(tools={"web_search": section})


async def test_a_chat_searches_the_web_after_loading_the_group(tmp_path: Path, searxng: FakeSearxng) -> None:
    llm = FakeOpenAI()
    llm.push(
        fake.tool_call("load_tool_group", {"group_name": "web"}),
        fake.tool_call("web_search", {"query": "python"}),
        fake.text("Python lives at https://www.python.org/"),
    )
    tools = {"web_search": {"provider": "searxng", "base_url": searxng.origin}}
    async with llm, running_bridge(tmp_path, llm, tools=tools) as h:
        await h.say("find python's home page")
    assert h.sender.of("reply") == ["Python lives at https://www.python.org/"]
    # The model read the results: the request after the call carries them.
    last = llm.requests[-1]["messages"][-1]
    assert last["role"] == "tool" and "https://docs.python.org/3/" in last["content"]
