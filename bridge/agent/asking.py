"""A run's requests to the model: each recorded in its trace and counted, with the images its
profile can see, and handed once to the fallback profile when the run's model fails for good."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from bridge.agent.runstate import RunState
from bridge.agent.trace import RunTrace
from bridge.errors import ProviderError
from bridge.llm.base import ChatMessage, Completion, Provider
from bridge.llm.profiles import Fallback, Profiles
from bridge.metrics import Metrics

log = logging.getLogger(__name__)


class ModelRequests:
    """Asks the model for a run. `metrics` is read at each request: the composition root sets the
    runner's after it is built."""

    def __init__(self, profiles: Profiles, provider: Provider, metrics: Callable[[], Metrics | None]) -> None:
        self.profiles = profiles
        self.provider = provider
        self.metrics = metrics

    async def complete(
        self,
        state: RunState,
        messages: list[ChatMessage],
        tools: list[dict[str, Any]],
        *,
        final: bool = False,
    ) -> Completion:
        """One model request, recorded in the run's trace whether it succeeds or fails.

        When the run's model fails for good (its retries spent) and [llm] fallback names another
        profile, the same request goes once to that one, which then answers the rest of the run: the
        first model is likely still down, and each further request would wait out its retries again.
        """
        try:
            return await self._ask(state, messages, tools, final=final)
        except ProviderError as exc:
            if state.fallback is not None:
                # Already on the fallback: the main model failed earlier in this run, now this one has.
                raise state.fallback.failed_too(exc) from exc
            name = self.profiles.fallback_for(state.answering)
            if name is None:
                raise
            fallback = self._fall_back(state, name, exc)
        try:
            return await self._ask(state, messages, tools, final=final)
        except ProviderError as exc:
            raise fallback.failed_too(exc) from exc

    def _fall_back(self, state: RunState, name: str, exc: ProviderError) -> Fallback:
        """Hand the rest of the run to the fallback profile `name`, in the state and its trace."""
        log.warning(
            "run %s: model profile %s failed (%s); asking the fallback profile %s",
            state.run_id,
            state.answering,
            exc.message,
            name,
        )
        # The reason the chat is told (the note on the answer): never the server's own words.
        state.fallback = Fallback(name, state.answering, exc.user_message or exc.message)
        state.answering, state.provider = name, self.profiles.get(name)
        model = self.profiles.settings(name).model
        state.trace.header["fallback"] = {"profile": name, "model": model, "because": exc.message}
        return state.fallback

    async def _ask(
        self, state: RunState, messages: list[ChatMessage], tools: list[dict[str, Any]], *, final: bool
    ) -> Completion:
        """One request to the profile answering now, recorded in the trace."""
        started = RunTrace.clock()
        fallback = state.answering if state.fallback is not None else None
        provider = state.provider or self.provider
        if state.images is not None:
            # Only a profile that takes images gets them (a fallback may not); the rest go by name.
            vision = self.profiles.settings(state.answering).vision
            messages = await state.images.parts(messages, vision)
        try:
            if state.display is not None:
                # A fresh segment per request: after tool calls the answer goes on below their activity.
                completion = await provider.complete(messages, tools, state.display.segment())
            else:
                completion = await provider.complete(messages, tools)
        except ProviderError as exc:
            self._count_request(state, started, failed=True)
            state.trace.model_call(
                started,
                messages,
                tools,
                error=exc.message,
                error_detail=exc.detail,
                final=final,
                fallback=fallback,
            )
            raise
        self._count_request(state, started, failed=False)
        state.trace.model_call(started, messages, tools, completion, final=final, fallback=fallback)
        state.add_usage(completion)
        return completion

    def _count_request(self, state: RunState, started: float, *, failed: bool) -> None:
        metrics = self.metrics()
        if metrics is not None:
            provider = self.profiles.settings(state.answering).provider
            metrics.model_request(provider, RunTrace.clock() - started, failed=failed)
