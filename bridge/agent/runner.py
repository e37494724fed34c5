"""The agent run loop: restore groups, call the model, check and run tools, persist, reply."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from bridge.agent.asking import ModelRequests
from bridge.agent.attachments import read_attachments
from bridge.agent.chat_agents import ChatAgents, RunAgent
from bridge.agent.history import build_messages, size, truncate, within_budget
from bridge.agent.loops import LoopGuard, Stop, in_words, last_answer, last_request
from bridge.agent.prompt import build_system_prompt
from bridge.agent.runstate import (
    CUT_SHORT_ERROR,
    CUT_SHORT_NOTE,
    LiveDisplay,
    MediaReader,
    ReplyPlanner,
    RunResult,
    RunState,
    RunStatus,
)
from bridge.agent.toolcalls import NullObserver, RunObserver, ToolCaller, not_run
from bridge.agent.trace import RunTrace
from bridge.config import Settings
from bridge.errors import BridgeError, ProviderError
from bridge.live import LiveEvents
from bridge.llm.base import ChatMessage, Provider
from bridge.llm.profiles import Profiles
from bridge.logs import redactor
from bridge.media.blobs import MediaStore, media_root
from bridge.media.parts import ImageReader
from bridge.metrics import Metrics
from bridge.sessions.authority import Authorities, Authority
from bridge.store.base import OutboxItem, OutboxRow, SessionRow
from bridge.store.sessions import new_id
from bridge.store.tables import DatabaseStore
from bridge.text import scrub
from bridge.tools.base import FileSender, SessionMessenger, SubAgentSpawner, ToolContext
from bridge.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from bridge.tasks.catalog import TaskCatalog

log = logging.getLogger(__name__)
# The one line per finished run, on a logger of its own so `bridge chat` can leave it out.
runs_log = logging.getLogger("bridge.runs")

# Old traces are pruned after this many runs (and at start), not after every run.
PRUNE_EVERY = 100
RETRY_HINT = "Your message is saved: send /retry to try again."


class AgentRunner:
    """Runs one turn of a session from its stored history to a persisted final reply."""

    # Benchmark-only: bench/round_trips.py switches group restoration off to count what it saves.
    # Nothing in the product or its config sets it.
    restore_groups = True

    def __init__(
        self,
        settings: Settings,
        store: DatabaseStore,
        registry: ToolRegistry,
        provider: Provider,
        profiles: Profiles | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.registry = registry
        # The default profile's provider ([llm]); a chat switched with /model runs on its profile's.
        self.provider = provider
        self.profiles = profiles or Profiles(settings.llm, registry, provider)
        # The model requests of every run (set lazily: `metrics` is the composition root's to set).
        self._models = ModelRequests(self.profiles, provider, lambda: self.metrics)
        # Who the owners are, for the authority of chat runs (the composition root adds the console's).
        self.authorities = Authorities(settings.owners)
        # Set by the composition root once the agent-to-agent service (which runs this runner) exists.
        self.messenger: SessionMessenger | None = None
        # Scheduled tasks, for the scheduled_tasks tools (set by the Bridge that runs the scheduler).
        self.tasks: TaskCatalog | None = None
        # Where send_file sends (set by the composition root; None: no chat to send to).
        self.files: FileSender | None = None
        # Where spawn_agent starts sub-agents (set by the composition root; None: none here).
        self.spawner: SubAgentSpawner | None = None
        # Set by the composition root: where runs, model requests and tool calls are counted, and
        # the admin server's live stream.
        self.metrics: Metrics | None = None
        self.live = LiveEvents()
        self.tools = ToolCaller(settings, store, registry)
        # Which agent ([agents.NAME]) each chat has; a config reload swaps its settings.
        self.agents = ChatAgents(settings, registry)
        self.blobs = MediaStore(media_root(settings))
        self._redact = redactor(settings)
        self._finished = 0

    async def run(
        self,
        session: SessionRow,
        *,
        channel: str | None = None,
        observer: RunObserver | None = None,
        run_id: str | None = None,
        upto: int | None = None,
        force: bool = False,
        reply: ReplyPlanner | None = None,
        display: LiveDisplay | None = None,
        media: MediaReader | None = None,
        authority: Authority | None = None,
        parent_run_id: str | None = None,
    ) -> RunResult:
        """Answer the session's newest message (or `upto`, in followup mode).

        A run whose message an earlier run already took up is skipped (status "skipped", no run row):
        two messages sent together are answered by the first run that sees them, and a follow-up run
        must not ask the model again with the bot's own answer last. `force` (/retry) answers anyway.
        `reply` plans the delivery rows of the answer, written with it in one transaction.
        `display` shows each model request's text as it streams, where the chat can.
        `media` reads the attachments of the messages it answers (photos fetched, voice transcribed).
        `authority` is whom the run acts for; a chat's run (None) acts for whoever wrote the newest
        message it answers, in that chat.
        `parent_run_id` is the run that started this one as a sub-agent (spawn_agent), for traces.
        """
        observer = observer or NullObserver()
        agent = self.settings.agent
        run_id = run_id or new_id()
        # The message claimed by the run row in one transaction, then the context read beside the writer.
        started = await self.store.begin_run(
            run_id,
            session.id,
            channel,
            memory_scope=session.key,
            history_limit=agent.history_limit,
            memory_limit=agent.memory_limit,
            upto=upto,
            force=force,
            parent_run_id=parent_run_id,
        )
        if started.answers is None or started.input_hash is None:
            return RunResult(run_id, "skipped", "")
        if authority is None:
            authority = self.authorities.for_chat(session.key, started.answers.sender)
        self.live.publish("run_started", run_id=run_id, session_key=session.key, channel=channel)
        context, rows, input_hash = started.context, started.rows, started.input_hash
        if media is not None:
            limit = agent.run_timeout_s
            rows = await read_attachments(media, rows, run_id=run_id, store=self.store, timeout_s=limit)
        # The chat's agent: its prompt, and the registry and skills as it sees them (only what it may use).
        chat_agent = self.agents.for_run(session)
        # Restored from the whole history with one indexed query, not from the window: a group loaded
        # 200 turns ago is still loaded. Groups that left the registry, or that this chat's agent may
        # not use (loaded under another agent), are dropped here.
        loaded = chat_agent.registry.known_groups(context.loaded_groups if self.restore_groups else ())
        # Loaded skills come back the same way; those no longer configured (or not the agent's) are dropped.
        skills = chat_agent.skills.known(context.loaded_skills if self.restore_groups else ())
        ctx = ToolContext(
            settings=self.settings,
            store=self.store,
            registry=chat_agent.registry,
            session=session,
            run_id=run_id,
            authority=authority,
            authorities=self.authorities,
            loaded_groups=loaded,
            channel=channel,
            messenger=self.messenger,
            tasks=self.tasks,
            loaded_skills=skills,
            files=self.files,
            spawner=self.spawner,
            skills=chat_agent.skills,
            workspace=chat_agent.workspace,
        )
        summary = context.summary.content if context.summary else None
        replay = build_messages(rows, agent.max_tool_result_chars)
        if force:
            # /retry of an answer that broke off as it streamed: the new answer replaces it, so the
            # model is not shown the old one as if it had been said.
            while replay and replay[-1].role == "assistant" and not replay[-1].tool_calls:
                replay.pop()
        # The summary of older turns shares the budget; the newest turn is kept whatever it costs.
        budget = max(agent.history_max_chars - len(summary or ""), agent.history_max_chars // 2)
        state = RunState(
            run_id=run_id,
            messages=within_budget(replay, budget),
            trace=RunTrace(run_id, session.id, session.key, channel, input_hash, acting=authority.describe()),
            memories=context.memories,
            summary=summary,
            display=display,
            images=ImageReader(self.blobs, self.settings.media.history_images),
        )
        # The chat's model (/model), else its agent's, else [llm]'s; a profile since removed from the
        # config counts as none.
        profile = state.answering = self.profiles.resolve(self.agents.model_profile(session))
        if not chat_agent.choice.is_default:
            state.trace.header["agent"] = chat_agent.name
        state.provider = self.profiles.get(profile)
        state.trace.use_model(profile, self.profiles.settings(profile).model)
        # Past the budget (or a full window, so older rows exist): the dispatcher compacts after the reply.
        over_budget = len(context.rows) >= agent.history_limit or size(replay) > budget
        try:
            async with asyncio.timeout(agent.run_timeout_s):
                result = await self._loop(ctx, state, observer, chat_agent)
        except TimeoutError:
            result = self._end(
                state,
                "timeout",
                f"⚠️ I ran out of time ({agent.run_timeout_s:g} s) on this request. {RETRY_HINT}",
            )
        except ProviderError as exc:
            # The chat gets one plain sentence; what the server said is here and in the run's trace.
            # The message's excerpt of the body is masked (addresses, secrets); the whole body is in the
            # trace only.
            log.warning(
                "run %s %s: the model failed: %s (the whole answer: bridge trace %s)",
                run_id,
                session.key,
                exc.message,
                run_id,
            )
            result = self._end(state, "error", f"⚠️ {_sentence(exc.user_message or exc.message)} {RETRY_HINT}")
        except asyncio.CancelledError:
            await asyncio.shield(self._finish(state, "cancelled", "cancelled"))
            raise
        except Exception as exc:  # a bug must cost one answer, never the session
            log.exception("run %s failed", run_id)
            result = self._failed(state, exc)
        result.loaded_groups = set(ctx.loaded_groups)
        result.loaded_skills = set(ctx.loaded_skills)
        result.over_budget = over_budget
        return await asyncio.shield(self._conclude(state, result, ctx.session.id, reply))

    async def _conclude(
        self, state: RunState, result: RunResult, session_id: str, reply: ReplyPlanner | None
    ) -> RunResult:
        """DatabaseStore the run's end with its answer and reply rows; if that fails, end it as an error that
        the user is told about, so a run is never left 'running' with nobody told."""
        result.reply = scrub(result.reply)
        # An answer (or a polite stop) is history; an error or a timeout is not, so /retry can redo it.
        answer = result.reply if result.status in ("ok", "stopped") else None
        if state.fallback is not None and answer is not None:
            # Said in the chat but not stored as the model's words, which later turns replay to it.
            result.reply = scrub(result.reply + state.fallback.note())
        if state.cut_short is not None and answer is not None:
            # The stored answer is what the chat saw stream in; the note is for the chat only.
            result.reply = scrub(result.reply + CUT_SHORT_NOTE)
        error = None if result.status == "ok" else result.stop_reason or result.reply
        planned = await reply(state.run_id, result.reply) if reply is not None else []
        try:
            ids = await self._finish(
                state, result.status, error, answer=answer, session_id=session_id, outbox=planned
            )
        except Exception as exc:
            log.exception("storing the end of run %s failed", state.run_id)
            result = self._failed(state, exc)
            planned = await reply(state.run_id, result.reply) if reply is not None else []
            ids = await self._finish(
                state, "error", f"storing the answer failed: {exc!r}"[:500], outbox=planned
            )
        result.outbox = [OutboxRow(i, item, None, 0.0) for i, item in zip(ids, planned, strict=True)]
        return result

    def _failed(self, state: RunState, exc: BaseException) -> RunResult:
        # A BridgeError may say what the user should hear; anything else is a bug, named but not shown.
        said = exc.user_message if isinstance(exc, BridgeError) else None
        what = said or f"Something went wrong while answering ({type(exc).__name__})."
        return self._end(state, "error", f"⚠️ {_sentence(what)} {RETRY_HINT}")

    async def _loop(
        self, ctx: ToolContext, state: RunState, observer: RunObserver, chat_agent: RunAgent
    ) -> RunResult:
        agent = self.settings.agent
        guard = LoopGuard(agent.loops)
        # The registry as the chat's agent sees it: the listing, the tools sent and the calls allowed.
        registry = chat_agent.registry
        # An MCP server's group restored after a restart is listed once in this process, here, so its
        # tools are offered; within the run's time limit.
        await registry.prepare(ctx.loaded_groups)
        # The prompt changes within a run only when a call loads a group or a skill: it is built
        # again then, not for every request (4.8% of a lone chat's turn, bench/throughput.py).
        system, built_for = "", None
        for iteration in range(1, agent.max_iterations + 1):
            state.iterations = iteration
            loaded = (frozenset(ctx.loaded_groups), frozenset(ctx.loaded_skills))
            if loaded != built_for:
                built_for = loaded
                system = build_system_prompt(
                    self.settings,
                    registry,
                    ctx.session,
                    ctx.loaded_groups,
                    state.memories,
                    state.summary,
                    ctx.loaded_skills,
                    agent=chat_agent,
                )
            tools = [t for t in registry.active_tools(ctx.loaded_groups) if t.offered_to(ctx)]
            completion = await self._models.complete(
                state, [ChatMessage("system", system), *state.messages], [t.schema() for t in tools]
            )
            if completion.correction and not state.corrected:
                # A call in the wrong format: the model is told how to write it and asked again. The
                # exchange lives only in this run's messages (and its trace), never in history.
                state.corrected = True
                state.messages += [
                    ChatMessage("assistant", completion.content),
                    ChatMessage("user", completion.correction),
                ]
                continue
            if completion.cut_short is not None:
                # Part of the answer was shown as it streamed, then the stream broke: what was shown
                # is the answer (asking again would show it twice), and /retry can redo it.
                state.cut_short = completion.cut_short
                reply = completion.content.strip() or "(The model returned an empty answer.)"
                why = f"{CUT_SHORT_ERROR}: {completion.cut_short}"
                return RunResult(state.run_id, "stopped", reply, iteration, stop_reason=why)
            if not completion.tool_calls:
                return RunResult(state.run_id, "ok", self._answer(state, completion.content), iteration)
            # Small real models call a tool again after its result instead of answering, or cycle
            # between two. Running it again changes nothing: the response is dropped, the answer asked for.
            stop = guard.repeat(completion.tool_calls)
            if stop is not None:
                return await self._final_answer(state, system, stop)
            state.messages.append(
                ChatMessage("assistant", completion.content, tool_calls=completion.tool_calls)
            )
            for index, call in enumerate(completion.tool_calls):
                if stop is not None:
                    # The request needs a result for every call it replays; these never ran.
                    state.messages.append(not_run(call))
                    continue
                # The model's text that came with the calls is stored once, on the first call.
                preamble = completion.content if index == 0 else ""
                started = RunTrace.clock()
                result = await self.tools.call(
                    ctx, call, iteration, preamble, observer, state.writes, registry
                )
                state.trace.tool_call(started, call, result)
                if self.metrics is not None:
                    self.metrics.tool_call(call.name, result.status)
                self.live.publish(
                    "tool",
                    run_id=state.run_id,
                    session_key=ctx.session.key,
                    tool=call.name,
                    status=result.status,
                )
                state.messages.append(
                    ChatMessage(
                        "tool",
                        truncate(result.content, agent.max_tool_result_chars),
                        tool_call_id=call.id,
                        name=call.name,
                    )
                )
                stop = guard.record(call, result)
            if stop is not None:
                return await self._final_answer(state, system, stop)
        return await self._final_answer(
            state,
            system,
            Stop(
                "max_iterations",
                f"⚠️ I stopped after {agent.max_iterations} steps without reaching an answer. "
                "Ask me to continue, or narrow the request.",
            ),
        )

    async def _final_answer(self, state: RunState, system: str, stop: Stop) -> RunResult:
        """A run cut short asks once more, with no tools offered, for an answer from what it has.

        The user then gets an answer rather than an error; `stop.message` (why the run stopped) is the
        reply only when that last request fails or comes back empty. The rule goes into the trace.
        """
        state.trace.header["stop_rule"] = stop.rule
        fallback = stop.message
        agent = self.settings.agent
        conversation = last_request(state.messages, agent.max_tool_result_chars, agent.loops.last_request)
        messages = [ChatMessage("system", system), *conversation]
        try:
            completion = await self._models.complete(state, messages, [], final=True)
        except ProviderError:
            completion = None
        answer, source = last_answer(
            completion.content if completion else None, stop, state.messages, self._plain
        )
        state.trace.header["answered_from"] = source
        return RunResult(state.run_id, "stopped", answer, state.iterations, stop_reason=fallback)

    def _answer(self, state: RunState, content: str) -> str:
        """A finished run's reply. An empty answer after a tool succeeded (a small model writes nothing
        once it has called save_memory or write_file) is what that tool did, in plain words."""
        if content.strip():
            return content.strip()
        found = in_words(state.messages, self._plain)
        if found:
            state.trace.header["answered_from"] = "tool_result"
            return found
        return "(The model returned an empty answer.)"

    def _plain(self, tool_name: str, content: str) -> str | None:
        """A tool's result in its own plain words (Tool.plain), where it has them."""
        tool = self.registry.get(tool_name)
        return tool.plain(content) if tool is not None and tool.plain is not None else None

    def _end(self, state: RunState, status: RunStatus, reply: str) -> RunResult:
        return RunResult(state.run_id, status, reply, state.iterations)

    async def _finish(
        self,
        state: RunState,
        status: str,
        error: str | None,
        *,
        answer: str | None = None,
        session_id: str | None = None,
        outbox: list[OutboxItem] | None = None,
    ) -> list[int]:
        if state.writes:
            # The run's tool records go in before its end. One that failed (the database went away)
            # left neither its call nor its result; the run is still recorded, with what it answered.
            for failed in await asyncio.gather(*state.writes, return_exceptions=True):
                if isinstance(failed, BaseException):
                    log.error("run %s: a tool call could not be recorded: %s", state.run_id, failed)
        usage = {"prompt_tokens": state.prompt_tokens, "completion_tokens": state.completion_tokens}
        keep = self.settings.runs.keep_traces
        ids = await self.store.finish_run(
            state.run_id,
            status,
            iterations=state.iterations,
            prompt_tokens=state.prompt_tokens,
            completion_tokens=state.completion_tokens,
            error=error,
            trace=state.trace.to_json(status, usage, self._redact) if keep else None,
            reply=(session_id, answer) if answer is not None and session_id is not None else None,
            outbox=outbox or (),
        )
        self._finished += 1
        self._report(state, status)
        if keep and self._finished % PRUNE_EVERY == 0:
            await self.store.prune_traces(keep)
        return ids

    def _report(self, state: RunState, status: str) -> None:
        """One log line per finished run (its fields as `extra` for the JSON log), and its metrics."""
        seconds = state.trace.elapsed()
        tokens = state.prompt_tokens + state.completion_tokens
        key = state.trace.header["session_key"]
        runs_log.info(
            "run %s %s: %s, %d steps, %d tokens, %d ms",
            state.run_id,
            key,
            status,
            state.iterations,
            tokens,
            seconds * 1000,
            extra={
                "run_id": state.run_id,
                "session_key": key,
                "status": status,
                "steps": state.iterations,
                "tokens": tokens,
                "ms": round(seconds * 1000),
            },
        )
        if self.metrics is not None:
            self.metrics.run_finished(status, seconds, state.prompt_tokens, state.completion_tokens)
        self.live.publish(
            "run_finished",
            run_id=state.run_id,
            session_key=key,
            status=status,
            steps=state.iterations,
            tokens=tokens,
            ms=round(seconds * 1000),
        )


def _sentence(text: str) -> str:
    """A notice's text as a sentence: the next one ("Your message is saved…") follows a full stop."""
    text = text.rstrip()
    return text if text.endswith((".", "!", "?")) else f"{text}."
