"""Per-chat model profiles: /model switches a chat's model, and a fallback profile answers when it fails."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bridge.agent.trace import format_trace
from bridge.llm.base import ChatMessage
from bridge.llm.profiles import Profiles
from bridge.tools.registry import ToolRegistry
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from tests.harness import Harness, running_bridge
from tests.invariants import assert_intact

PROFILE_KEY = "sk-profile-NEVER-SHOWN-7731"
MAIN_KEY = "sk-main-NEVER-SENT-ELSEWHERE-5512"
# One retry, so "failed after its retries" is two requests and takes a moment.
RETRY_ONCE: dict[str, Any] = {"max_retries": 1, "timeout_s": 2}


@pytest.fixture
async def other_llm() -> AsyncIterator[FakeOpenAI]:
    """A second fake model server: the `other` profile's."""
    async with FakeOpenAI() as server:
        yield server


def with_profiles(other: FakeOpenAI, *, fallback: str | None = None, **llm: Any) -> dict[str, Any]:
    """[llm] keys: the profile `other` on the second server, with its key in PROFILE_KEY_VAR."""
    profile: dict[str, Any] = {
        "base_url": other.base_url,
        "model": "fake-other",
        "api_key_env": "PROFILE_KEY_VAR",
    }
    settings: dict[str, Any] = {"profiles": {"other": profile}, **llm}
    if fallback is not None:
        settings["fallback"] = fallback
    return settings


@pytest.fixture(autouse=True)
def _profile_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROFILE_KEY_VAR", PROFILE_KEY)


def notices(h: Harness) -> list[str]:
    return h.sender.of("notice")


def user_texts(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def models_error(trace: dict[str, Any]) -> str:
    """The errors of a trace's model requests, with what the servers said in full."""
    return " ".join(
        s.get("error", "") + s.get("error_detail", "") for s in trace["steps"] if s["type"] == "model"
    )


async def stored_trace(h: Harness) -> dict[str, Any]:
    session = await h.bridge.store.active_session("main")
    assert session is not None
    runs = await h.bridge.store.list_runs(session_key="main", limit=1)
    text = await h.bridge.store.get_trace(runs[0][0].id)
    assert text is not None
    return json.loads(text)


# -- /model ------------------------------------------------------------------------------------


async def test_model_alone_lists_the_profiles_default_first_and_marks_this_chat(
    tmp_path: Path, fake_llm: FakeOpenAI, other_llm: FakeOpenAI
) -> None:
    async with running_bridge(tmp_path, fake_llm, llm=with_profiles(other_llm, tool_mode="native")) as h:
        await h.say("/model")
        await h.say("/model other")
        await h.say("/model")
    before, _, after = notices(h)
    assert before.splitlines() == [
        "Model profiles (▶ this chat):",
        "▶ default: model fake, native tool calls",
        "• other: model fake-other, native tool calls",
        "Owners switch with /model NAME.",
    ]
    assert "• default" in after and "▶ other: model fake-other" in after
    assert fake_llm.requests == [] and other_llm.requests == []


async def test_model_name_sends_the_chats_requests_to_that_profiles_server(
    tmp_path: Path, fake_llm: FakeOpenAI, other_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("from default"), fake.text("default again"))
    other_llm.push(fake.tool_call("get_current_time", {}), fake.text("from other"))
    async with running_bridge(tmp_path, fake_llm, llm=with_profiles(other_llm, api_key=MAIN_KEY)) as h:
        await h.say("one")
        await h.say("/model other")
        await h.say("two")
        await h.say("/model default")
        await h.say("three")
    assert h.sender.of("reply") == ["from default", "from other", "default again"]
    assert notices(h)[0].startswith("This chat now uses the model profile other: model fake-other")
    assert [user_texts(r)[-1] for r in fake_llm.requests] == ["one", "three"]
    # The tool step and the answer of that turn both went to the profile's server, with its model.
    assert [user_texts(r)[-1] for r in other_llm.requests] == ["two", "two"]
    assert {r["model"] for r in other_llm.requests} == {"fake-other"}
    # Its own key from the variable it names; [llm]'s key is never sent to another server.
    assert {h["authorization"] for h in other_llm.request_headers} == {f"Bearer {PROFILE_KEY}"}
    assert {h["authorization"] for h in fake_llm.request_headers} == {f"Bearer {MAIN_KEY}"}
    assert_intact(tmp_path / "bridge.db", ["one", "two", "three"])


async def test_the_model_choice_survives_clear(
    tmp_path: Path, fake_llm: FakeOpenAI, other_llm: FakeOpenAI
) -> None:
    other_llm.push(fake.text("still other"))
    async with running_bridge(tmp_path, fake_llm, llm=with_profiles(other_llm)) as h:
        await h.say("/model other")
        old = await h.bridge.store.active_session("main")
        await h.say("/clear")
        new = await h.bridge.store.active_session("main")
        await h.say("after clear")
    assert old is not None and new is not None and old.id != new.id
    assert new.model_profile == "other"
    assert h.sender.of("reply") == ["still other"] and fake_llm.requests == []
    assert user_texts(other_llm.requests[0]) == ["after clear"]


async def test_status_shows_the_profile_and_its_model(
    tmp_path: Path, fake_llm: FakeOpenAI, other_llm: FakeOpenAI
) -> None:
    async with running_bridge(tmp_path, fake_llm, llm=with_profiles(other_llm)) as h:
        await h.say("/status")
        await h.say("/model other")
        await h.say("/status")
    before, _, after = notices(h)
    assert "Model: default (fake)" in before.splitlines()
    assert "Model: other (fake-other)" in after.splitlines()


async def test_a_non_owner_can_list_but_not_switch_the_model(
    tmp_path: Path, fake_llm: FakeOpenAI, other_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("default answers"))
    async with running_bridge(tmp_path, fake_llm, llm=with_profiles(other_llm)) as h:
        await h.say("/model other", sender="stranger")
        await h.say("/model", sender="stranger")
        await h.say("hello", sender="stranger")
        session = await h.bridge.store.active_session("test:dm:stranger")
    refusal, listing = notices(h)
    assert refusal == "Only an owner of this bot can change the model of a chat."
    assert "▶ default" in listing
    assert session is not None and session.model_profile is None
    assert h.sender.of("reply") == ["default answers"] and other_llm.requests == []


async def test_an_unknown_profile_name_is_refused_with_the_names(
    tmp_path: Path, fake_llm: FakeOpenAI, other_llm: FakeOpenAI
) -> None:
    async with running_bridge(tmp_path, fake_llm, llm=with_profiles(other_llm)) as h:
        await h.say("/model gpt-9")
        session = await h.bridge.store.active_session("main")
    assert notices(h) == ["There is no model profile 'gpt-9'. Profiles: default, other."]
    assert session is not None and session.model_profile is None


async def test_model_is_in_help_and_the_platform_menus() -> None:
    from bridge.gateway.commands import COMMANDS, HELP

    assert "model" in dict(COMMANDS) and "/model:" in HELP


async def test_a_session_whose_profile_was_removed_runs_on_the_default(
    tmp_path: Path, fake_llm: FakeOpenAI, other_llm: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    fake_llm.push(fake.text("default it is"), fake.text("and again"))
    async with running_bridge(tmp_path, fake_llm, llm=with_profiles(other_llm)) as h:
        session = await h.bridge.store.ensure_active_session("main")
        # Chosen while a profile "retired" was configured; the config no longer has it.
        await h.bridge.store.set_model_profile(session.id, "retired")
        await h.say("hello")
        await h.say("again")
        await h.say("/status")
        trace = await stored_trace(h)
    assert h.sender.of("reply") == ["default it is", "and again"] and other_llm.requests == []
    assert "Model: default (fake); the profile retired chosen here is no longer configured" in notices(h)[0]
    assert trace["profile"] == "default" and trace["model"] == "fake"
    # Said once, not on every turn.
    assert sum("'retired'" in r.getMessage() for r in caplog.records) == 1


# -- fallback ----------------------------------------------------------------------------------


async def test_the_fallback_answers_when_the_main_model_fails_after_its_retries_and_the_reply_says_so(
    tmp_path: Path, fake_llm: FakeOpenAI, other_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.http_error(500, "overloaded"), fake.http_error(500, "overloaded"))
    other_llm.push(fake.tool_call("get_current_time", {}), fake.text("the fallback's answer"))
    llm = with_profiles(other_llm, fallback="other", **RETRY_ONCE)
    async with running_bridge(tmp_path, fake_llm, llm=llm) as h:
        await h.say("time?")
        trace = await stored_trace(h)
        session = await h.bridge.store.active_session("main")
        assert session is not None
        history = await h.bridge.store.history(session.id, 10, chat_only=True)
    (reply,) = h.sender.of("reply")
    assert reply == (
        "the fallback's answer\n\n_(Answered by the fallback model `other` because `default` failed: "
        "the model server kept failing (HTTP 500) after 2 attempts)_"
    )
    # The server's own words are for the trace, never the chat.
    assert "overloaded" in models_error(trace)
    # The note is for the chat: history keeps the model's own words, which later turns replay.
    assert history[-1].content == "the fallback's answer"
    # The same request went to the fallback; after it took over, the run's next step went straight
    # to it rather than waiting out the main model's retries again.
    assert len(fake_llm.requests) == 2 and len(other_llm.requests) == 2
    assert other_llm.requests[0]["messages"] == fake_llm.requests[0]["messages"]
    assert other_llm.requests[0]["model"] == "fake-other"
    models = [s for s in trace["steps"] if s["type"] == "model"]
    assert "kept failing" in models[0]["error"] and "fallback_profile" not in models[0]
    assert [s.get("fallback_profile") for s in models[1:]] == ["other", "other"]
    assert trace["profile"] == "default" and trace["fallback"]["profile"] == "other"
    assert trace["fallback"]["model"] == "fake-other" and trace["status"] == "ok"
    shown = format_trace(json.dumps(trace))
    assert "model fake (profile default)" in shown
    assert "answered by the fallback profile other (fake-other)" in shown
    assert "model request: " in shown and "model request (fallback profile other): " in shown
    assert_intact(tmp_path / "bridge.db", ["time?"])


async def test_a_chat_on_a_profile_falls_back_to_the_default(
    tmp_path: Path, fake_llm: FakeOpenAI, other_llm: FakeOpenAI
) -> None:
    other_llm.push(fake.http_error(503, "down"), fake.http_error(503, "down"))
    fake_llm.push(fake.text("default saves the day"))
    async with running_bridge(
        tmp_path, fake_llm, llm=with_profiles(other_llm, fallback="default", **RETRY_ONCE)
    ) as h:
        await h.say("/model other")
        await h.say("hi")
    (reply,) = h.sender.of("reply")
    assert reply.startswith(
        "default saves the day\n\n_(Answered by the fallback model `default` because `other`"
    )


async def test_without_a_fallback_the_failure_is_told_as_before(
    tmp_path: Path, fake_llm: FakeOpenAI, other_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.http_error(500, "overloaded"), fake.http_error(500, "overloaded"), fake.text("ok now"))
    async with running_bridge(tmp_path, fake_llm, llm=with_profiles(other_llm, **RETRY_ONCE)) as h:
        await h.say("first")
        await h.say("second")
    error, answer = h.sender.of("reply")
    assert error == (
        "⚠️ The model server kept failing (HTTP 500) after 2 attempts. "
        "Your message is saved: send /retry to try again."
    )
    assert "fallback" not in error
    assert answer == "ok now" and other_llm.requests == []
    assert_intact(tmp_path / "bridge.db", ["first", "second"])


async def test_when_the_fallback_fails_too_the_error_names_both(
    tmp_path: Path, fake_llm: FakeOpenAI, other_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.http_error(500, "main down"), fake.http_error(500, "main down"), fake.text("back"))
    other_llm.push(fake.http_error(502, "backup down"), fake.http_error(502, "backup down"))
    async with running_bridge(
        tmp_path, fake_llm, llm=with_profiles(other_llm, fallback="other", **RETRY_ONCE)
    ) as h:
        await h.say("first")
        trace = await stored_trace(h)
        await h.say("second")
    error, answer = h.sender.of("reply")
    assert error == (
        "⚠️ The model server kept failing (HTTP 502) after 2 attempts (That was the fallback model "
        "`other`; `default` failed first: the model server kept failing (HTTP 500) after 2 attempts). "
        "Your message is saved: send /retry to try again."
    )
    assert "backup down" in models_error(trace) and "main down" in models_error(trace)
    assert answer == "back"
    assert trace["status"] == "error"
    assert [s.get("fallback_profile") for s in trace["steps"]] == [None, "other"]
    assert_intact(tmp_path / "bridge.db", ["first", "second"])


async def test_a_fallback_that_fails_later_in_the_run_is_named_in_the_error(
    tmp_path: Path, fake_llm: FakeOpenAI, other_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.http_error(500, "main down"), fake.http_error(500, "main down"))
    other_llm.push(
        fake.tool_call("get_current_time", {}), fake.http_error(500, "x"), fake.http_error(500, "x")
    )
    async with running_bridge(
        tmp_path, fake_llm, llm=with_profiles(other_llm, fallback="other", **RETRY_ONCE)
    ) as h:
        await h.say("time?")
    (error,) = h.sender.of("reply")
    assert error.startswith("⚠️") and "fallback model `other`" in error and "(HTTP 500)" in error
    assert "main down" not in error  # the server's words are in the trace, not the chat
    assert len(fake_llm.requests) == 2  # the failed main model was not asked again in this run


async def test_a_profile_whose_key_variable_is_unset_fails_clearly_and_falls_back(
    tmp_path: Path, fake_llm: FakeOpenAI, other_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PROFILE_KEY_VAR")
    fake_llm.push(fake.text("default answered"))
    async with running_bridge(tmp_path, fake_llm, llm=with_profiles(other_llm, fallback="default")) as h:
        await h.say("/model other")
        await h.say("hi")
    (reply,) = h.sender.of("reply")
    assert reply.startswith("default answered\n\n_(Answered by the fallback model `default` because `other`")
    assert "PROFILE_KEY_VAR is not set" in reply
    assert other_llm.requests == []


# -- secrets -------------------------------------------------------------------------------------


async def test_the_profile_key_never_reaches_the_trace_or_the_chat(
    tmp_path: Path, fake_llm: FakeOpenAI, other_llm: FakeOpenAI
) -> None:
    # A server that echoes the key it was sent, as some do on a 401.
    other_llm.push(fake.http_error(401, f"Incorrect API key provided: {PROFILE_KEY}"))
    fake_llm.push(fake.text("fine"))
    async with running_bridge(tmp_path, fake_llm, llm=with_profiles(other_llm, fallback="default")) as h:
        await h.say("/model other")
        await h.say("hi")
        trace = await stored_trace(h)
    assert PROFILE_KEY not in json.dumps(trace)
    assert all(PROFILE_KEY not in item.text for item in h.sender.sent)
    assert h.sender.of("reply")[0].startswith("fine\n\n_(Answered by the fallback model `default`")


async def test_the_runners_redactor_knows_the_profile_key(tmp_path: Path, other_llm: FakeOpenAI) -> None:
    from bridge.logs import redactor
    from tests.harness import make_settings

    settings = make_settings(tmp_path, "http://127.0.0.1:9/v1", llm=with_profiles(other_llm))
    assert PROFILE_KEY not in redactor(settings)(f"echo {PROFILE_KEY}")


# -- the Profiles set itself ---------------------------------------------------------------------


class _Recording:
    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False

    async def complete(
        self, messages: list[ChatMessage], tools: list[dict[str, Any]], sink: Any = None
    ) -> Any:
        raise AssertionError("not asked in this test")

    async def aclose(self) -> None:
        self.closed = True


async def test_profiles_build_each_provider_once_on_first_use_and_close_them_all(
    tmp_path: Path, other_llm: FakeOpenAI
) -> None:
    from tests.harness import make_settings

    settings = make_settings(tmp_path, "http://127.0.0.1:9/v1", llm=with_profiles(other_llm))
    built: list[str] = []

    def build(llm: Any) -> Any:
        built.append(llm.model)
        return _Recording(llm.model)

    default = _Recording("injected")
    profiles = Profiles(settings.llm, ToolRegistry(), default, build=build)
    assert profiles.names() == ["default", "other"]
    assert profiles.get(None) is default and profiles.get("default") is default and built == []
    first = profiles.get("other")
    assert profiles.get("other") is first and built == ["fake-other"]
    assert profiles.get("gone") is default
    await profiles.aclose()
    assert default.closed and first.inner.closed  # type: ignore[attr-defined]
