"""Builds the Provider that `[llm] provider` names."""

from __future__ import annotations

from bridge.config.llm import LLMSettings
from bridge.llm.anthropic import AnthropicProvider
from bridge.llm.base import Provider
from bridge.llm.openai import OpenAIProvider


def build_provider(settings: LLMSettings) -> Provider:
    """The provider for `settings.provider`: the native Anthropic API, or any OpenAI-compatible server."""
    if settings.provider == "anthropic":
        return AnthropicProvider(settings)
    return OpenAIProvider(settings)
