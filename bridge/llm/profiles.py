"""Model profiles: one Provider per [llm.profiles.NAME] (and [llm] as "default"), built on first use."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bridge.config.llm import DEFAULT_PROFILE, LLMSettings
from bridge.errors import ProviderError
from bridge.llm.base import ChatMessage, Completion, Provider, TextSink
from bridge.llm.factory import build_provider
from bridge.llm.textmode import Names, NativeModeProvider, TextModeProvider

log = logging.getLogger(__name__)


def with_tool_mode(llm: LLMSettings, provider: Provider, names: Names) -> Provider:
    """The provider as the runner uses it: the strict text protocol in text mode; in native mode, calls a
    server left in the text are still recognised. The catalogue's tools and groups, loaded or not, tell
    a written call from text."""
    known, groups = names.knows, names.is_group
    if llm.tool_mode == "text":
        return TextModeProvider(provider, known=known, groups=groups, result_role=llm.text_result_role)
    return NativeModeProvider(provider, known=known, groups=groups)


class _NoKey:
    """Stands in for a profile whose key variable is unset: each request fails, saying what to set.

    A ProviderError, so the fallback profile (if any) answers instead and the chat is told why;
    `bridge run` itself does not refuse to start over a profile nobody may use.
    """

    def __init__(self, name: str, variable: str) -> None:
        self.message = (
            f"The model profile `{name}` has no API key: the environment variable {variable} is not "
            "set. Set it and restart Bridge, or switch with /model."
        )

    async def complete(
        self, messages: list[ChatMessage], tools: list[dict[str, Any]], sink: TextSink | None = None
    ) -> Completion:
        raise ProviderError(self.message)

    async def aclose(self) -> None:
        return None


class Profiles:
    """A bot's model profiles by name: "default" ([llm]) and each [llm.profiles.NAME].

    Each profile's provider is built once, when a chat first uses it, so an unused profile opens no
    connection. `default` is the default profile's provider ready to use (tool mode applied), e.g. one
    a test injected; when None it is built from [llm] like the others.
    """

    def __init__(
        self,
        llm: LLMSettings,
        names: Names,
        default: Provider | None = None,
        *,
        build: Callable[[LLMSettings], Provider] = build_provider,
    ) -> None:
        self.llm = llm
        self._names = names
        self._build = build
        self._providers: dict[str, Provider] = {}
        if default is not None:
            self._providers[DEFAULT_PROFILE] = default
        # A session may name a profile that has since left the config: said once per name, not per turn.
        self._unknown_seen: set[str] = set()
        for problem in llm.missing_keys():
            log.warning("%s; a chat on that profile gets an error (or the fallback) until it is set", problem)

    def names(self) -> list[str]:
        """The profile names: "default" first, then the others by name."""
        return self.llm.profile_names()

    def settings(self, name: str) -> LLMSettings:
        """The effective [llm] settings of a known profile."""
        return self.llm.for_profile(name)

    def resolve(self, name: str | None) -> str:
        """The profile a session runs on: its own, or "default" when it has none or it was removed."""
        profile = self.llm.profile_of(name)
        if name is not None and name != profile and name not in self._unknown_seen:
            self._unknown_seen.add(name)
            log.warning("model profile %r is not in the config (any more); its chats use the default", name)
        return profile

    def fallback_for(self, name: str) -> str | None:
        """The profile to ask when `name` failed for good: [llm] fallback, unless that is `name` itself."""
        fallback = self.llm.fallback
        return fallback if fallback is not None and fallback != name else None

    def get(self, name: str | None) -> Provider:
        """The provider of a profile (see resolve), built on first use."""
        name = self.resolve(name)
        provider = self._providers.get(name)
        if provider is None:
            provider = self._providers[name] = self._make(name)
        return provider

    def _make(self, name: str) -> Provider:
        profile = self.llm.profiles.get(name)
        if profile is not None and profile.key_missing and profile.api_key_env:
            return _NoKey(name, profile.api_key_env)
        settings = self.settings(name)
        return with_tool_mode(settings, self._build(settings), self._names)

    async def aclose(self) -> None:
        """Close every provider built so far (each holds an HTTP client)."""
        providers, self._providers = list(self._providers.values()), {}
        for provider in providers:
            try:
                await provider.aclose()
            except Exception:  # one client failing to close must not leave the others open
                log.exception("closing a model client failed")


@dataclass(frozen=True, slots=True)
class Fallback:
    """The fallback profile took over a run: which, from which, and why."""

    profile: str
    failed: str
    reason: str

    def note(self) -> str:
        """What the reply says about it, appended to the answer."""
        return (
            f"\n\n_(Answered by the fallback model `{self.profile}` because `{self.failed}` failed: "
            f"{_short_reason(self.reason)})_"
        )

    def failed_too(self, exc: ProviderError) -> ProviderError:
        """The error the user sees when the fallback fails as well: both reasons."""
        first = f" (That was the fallback model `{self.profile}`; `{self.failed}` failed first: "
        first += f"{_short_reason(self.reason)})"
        return ProviderError(
            exc.message + first,
            retryable=exc.retryable,
            status=exc.status,
            detail=exc.detail,
            user_message=(exc.user_message or exc.message).rstrip(".") + first,
        )


def _short_reason(message: str, limit: int = 160) -> str:
    """A provider's error message as a clause: no trailing period, at most `limit` characters."""
    text = " ".join(message.split()).rstrip(".")
    if text[:1].isupper() and text[1:2].islower():
        text = text[0].lower() + text[1:]
    return text if len(text) <= limit else text[: limit - 1] + "…"
