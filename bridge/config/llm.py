"""Config of [llm] and [llm.profiles.NAME]: the model a chat talks to, and the others /model switches to."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator

from bridge.config.base import KeyFromEnv, url_setting
from bridge.config.base import Section as _Section

_PROFILE_NAME = re.compile(r"^[a-z0-9_-]+$")
DEFAULT_PROFILE = "default"


class LLMProfile(KeyFromEnv):
    """One [llm.profiles.NAME] table: another model, which owners pick for a chat with /model NAME.

    Keys left out come from [llm]. The API key never sits in the file: `api_key_env` names the
    environment variable that holds it (none for a local server that needs no key).
    """

    provider: Literal["openai", "anthropic"] | None = None
    base_url: str | None = None
    model: str
    api_key_env: str | None = None
    timeout_s: float | None = Field(None, gt=0)
    max_retries: int | None = Field(None, ge=0, le=10)
    temperature: float | None = Field(None, ge=0, le=2)
    max_tokens: int | None = Field(None, gt=0)
    tool_mode: Literal["native", "text"] | None = None
    text_result_role: Literal["tool", "user"] | None = None
    vision: bool | None = None

    WHOSE_KEY = "a profile's key"
    WITHOUT_KEY = "this profile has no API key"

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return url_setting(value, "http://127.0.0.1:8080/v1")


class LLMSettings(_Section):
    # "openai": any OpenAI-compatible /chat/completions server; "anthropic": the Anthropic Messages API.
    provider: Literal["openai", "anthropic"] = "openai"
    base_url: str | None = None
    api_key: SecretStr = SecretStr("")
    model: str = "gpt-4o-mini"
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(3, ge=0, le=10)
    temperature: float | None = Field(None, ge=0, le=2)
    max_tokens: int | None = Field(None, gt=0)
    # Stream answers where a chat can show them as they come (bridge chat): the text appears token by
    # token instead of all at once at the end.
    stream: bool = True
    # "native": tools go as `tools` and come back as `tool_calls`. "text": for models without native
    # tool calling, tools are described in the system prompt and one fenced JSON block is a call.
    tool_mode: Literal["native", "text"] = "native"
    # The role text-mode tool results go back as; "user" suits chat templates that reject "tool".
    text_result_role: Literal["tool", "user"] = "tool"
    # The model takes images: photos users send go to it as image parts. Without it, the user is told
    # this model can't see images, and the caption is answered.
    vision: bool = False
    # Other models a chat can switch to with /model NAME; [llm] itself is the profile "default".
    profiles: dict[str, LLMProfile] = Field(default_factory=dict)
    # The profile that answers when a chat's own model fails after its retries ("default": [llm]).
    fallback: str | None = None

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return url_setting(value, "http://127.0.0.1:8080/v1")

    @field_validator("profiles")
    @classmethod
    def _profile_names(cls, value: dict[str, LLMProfile]) -> dict[str, LLMProfile]:
        for name in value:
            if name == DEFAULT_PROFILE:
                raise ValueError(f"{name!r} is reserved: it is [llm] itself; choose another profile name")
            if not _PROFILE_NAME.match(name):
                raise ValueError(
                    f"{name!r} is not a profile name: use lowercase letters, digits, _ and -, e.g. 'local'"
                )
        return value

    @field_validator("fallback")
    @classmethod
    def _known_fallback(cls, value: str | None, info: ValidationInfo) -> str | None:
        # Validated after `profiles` (declared first); if that failed, its own error says why.
        profiles = info.data.get("profiles")
        if value is not None and profiles is not None and value not in (DEFAULT_PROFILE, *profiles):
            known = ", ".join([DEFAULT_PROFILE, *sorted(profiles)])
            raise ValueError(f"{value!r} is not a profile; defined profiles: {known}")
        return value

    def profile_names(self) -> list[str]:
        """The profile names /model takes: "default" ([llm]) first, then the tables by name."""
        return [DEFAULT_PROFILE, *sorted(self.profiles)]

    def profile_of(self, chosen: str | None) -> str:
        """The profile a session with this /model choice runs on: "default" if none, or if removed."""
        return chosen if chosen is not None and chosen in self.profiles else DEFAULT_PROFILE

    def for_profile(self, name: str) -> LLMSettings:
        """The effective settings of a profile: its own keys over [llm]'s ("default" is [llm]).

        [llm]'s base_url and key carry over only to a profile that talks to the same server (same
        provider, same or no base_url): the key must never be sent to a server it was not made for.
        """
        if name == DEFAULT_PROFILE:
            return self
        profile = self.profiles[name]
        provider = profile.provider or self.provider
        same_api = provider == self.provider
        base_url = profile.base_url or (self.base_url if same_api else None)
        same_server = same_api and base_url == self.base_url
        own = {k: v for k, v in profile if v is not None and k not in ("api_key_env", "provider", "base_url")}
        return self.model_copy(
            update={
                **own,
                "provider": provider,
                "base_url": base_url,
                "api_key": profile.api_key if profile.api_key_env or not same_server else self.api_key,
                # Whether a model sees images is the model's own: never taken from [llm]'s model.
                "vision": bool(profile.vision),
                "profiles": {},
                "fallback": None,
            }
        )

    def missing_keys(self) -> list[str]:
        """One line per profile whose key variable is unset or empty, naming the profile and variable."""
        return [
            profile.missing_key(f"llm.profiles.{name}")
            for name, profile in sorted(self.profiles.items())
            if profile.key_missing
        ]
