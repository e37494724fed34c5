"""Chat commands: /clear, /new, /status, /stop, /send, /model, /agent, /voice, /pair, /tasks, /help
(/retry and /compact: the dispatcher)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from bridge.agent.chat_agents import ChatAgents
from bridge.config import Settings
from bridge.config.agents import DEFAULT_AGENT, AgentChoice
from bridge.config.llm import DEFAULT_PROFILE
from bridge.errors import PairingLimited
from bridge.gateway.lanes import Lanes
from bridge.gateway.pairing import Pairing, minutes_left, who
from bridge.gateway.policy import Decision, PolicyGate
from bridge.gateway.voice_out import VOICE_CHOICES, voice_state
from bridge.sessions.service import SessionService
from bridge.store.base import SessionRow
from bridge.store.tables import DatabaseStore
from bridge.tasks.catalog import TaskCatalog, TaskError
from bridge.tasks.when import when_text
from bridge.tools.registry import ToolRegistry

# (name, description): the one list behind /help and the platforms' command menus.
COMMANDS: tuple[tuple[str, str], ...] = (
    ("clear", "Start a fresh session (history and loaded tool groups reset; memories stay)"),
    ("new", "Same as /clear"),
    ("status", "Show this session: id, loaded tool groups, message count"),
    ("stop", "Stop the answer in progress"),
    ("retry", "Answer your last message again (after an error or an interrupted answer)"),
    ("compact", "Summarise the older turns of this session now, to keep its history short"),
    ("send", "Owners: let the bot speak here (on), keep it silent (off), or follow the config (inherit)"),
    ("model", "List the model profiles; owners: /model NAME switches this chat's model"),
    ("agent", "Show this chat's agent; owners: /agent NAME switches it, /agent default follows the config"),
    ("voice", "Spoken replies here: on (every answer), off (none), auto (answers to voice messages)"),
    ("pair", "Owners: approve a stranger's pairing code (/pair CODE), or list the codes waiting"),
    ("tasks", "List this chat's scheduled tasks and when they run next; /tasks cancel ID cancels one"),
    ("help", "List the commands"),
)
HELP = "Commands:\n" + "\n".join(f"/{name}: {description}" for name, description in COMMANDS)


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    args: str


def parse_command(text: str) -> Command | None:
    """`/name@bot args` → Command(name, args); anything else → None."""
    stripped = text.strip()
    if not stripped.startswith("/") or len(stripped) < 2 or not stripped[1].isalpha():
        return None
    head, _, args = stripped[1:].partition(" ")
    name = head.split("@", 1)[0].lower()
    return Command(name, args.strip())


class Commands:
    """Answers commands; each answer is a notice text for the chat the command came from."""

    def __init__(
        self,
        settings: Settings,
        store: DatabaseStore,
        sessions: SessionService,
        lanes: Lanes,
        registry: ToolRegistry,
        gate: PolicyGate,
        pairing: Pairing | None = None,
        tasks: TaskCatalog | None = None,
        agents: ChatAgents | None = None,
    ) -> None:
        self.gate = gate
        # Which agent each chat has; the runner's own (the composition root passes it), so a reload
        # that swaps the bindings is seen here too.
        self.agents = agents or ChatAgents(settings, registry)
        self.pairing = pairing
        self.tasks = tasks
        self.settings = settings
        self.store = store
        self.sessions = sessions
        self.lanes = lanes
        # Where workers share the chats: stops a chat's run in the worker running it (sharing.py).
        self.stop_elsewhere: Callable[[str], Awaitable[bool]] | None = None
        # Stops the sub-agents a chat's runs started (bridge.gateway.subagents); how many it stopped.
        self.stop_children: Callable[[str], Awaitable[int]] | None = None
        self.registry = registry

    async def handle(
        self, command: Command, key: str, *, surface: str, is_owner: bool, sender: str | None = None
    ) -> str:
        if command.name in ("clear", "new"):
            return await self.clear(key)
        if command.name == "status":
            return await self.status(key, surface)
        if command.name == "send":
            return await self.send(key, command.args, surface=surface, is_owner=is_owner)
        if command.name == "model":
            return await self.model(key, command.args, is_owner=is_owner)
        if command.name == "agent":
            return await self.agent(key, command.args, is_owner=is_owner)
        if command.name == "voice":
            return await self.voice(key, command.args, sender=sender)
        if command.name == "stop":
            return await self.stop(key)
        if command.name == "pair":
            return await self.pair(key, command.args, is_owner=is_owner, sender=sender)
        if command.name == "tasks":
            return await self.task_list(key, command.args, sender=sender)
        if command.name in ("help", "start"):
            return HELP
        return f"Unknown command /{command.name}. Send /help for the list."

    async def clear(self, key: str) -> str:
        # Cancel first: a run still in flight must not write its reply into the new session.
        await self._cancel(key)
        await self._stop_children(key)
        session = await self.sessions.start_new(key)
        return (
            f"Started a new session ({session.id}). History and loaded tool groups start fresh; "
            "saved memories are kept."
        )

    async def _cancel(self, key: str) -> bool:
        if await self.lanes.cancel(key):
            return True
        return self.stop_elsewhere is not None and await self.stop_elsewhere(key)

    async def _stop_children(self, key: str) -> int:
        return await self.stop_children(key) if self.stop_children is not None else 0

    async def stop(self, key: str) -> str:
        stopped = await self._cancel(key)
        # After the parent: stopped first, it cannot react to its children's end.
        children = await self._stop_children(key)
        # Messages that waited behind the stopped answer are dropped with it; marked so, the next
        # start does not take them for messages a restart left unanswered.
        session = await self.store.active_session(key)
        skipped = session is not None and await self.store.skip_unanswered(session.id, "dropped by /stop")
        if children:
            subagents = f"{children} sub-agent{'s' if children > 1 else ''}"
            return f"Stopped the answer in progress and {subagents}." if stopped else f"Stopped {subagents}."
        if stopped:
            return "Stopped the answer in progress."
        return "Dropped the messages that were waiting." if skipped else "Nothing is running."

    async def send(self, key: str, args: str, *, surface: str, is_owner: bool) -> str:
        """/send on|off|inherit: the session's override of the send policy (owners only)."""
        if not is_owner:
            return "Only an owner of this bot can change where it may speak."
        choice = args.strip().lower()
        if choice not in _SEND_CHOICES:
            return (
                "Usage: /send on|off|inherit (on: speak here, off: stay silent, inherit: follow the config)."
            )
        session = await self.sessions.active_for_key(key)
        if choice:
            await self.store.set_send_policy(session.id, _SEND_CHOICES[choice])
        decision = await self.gate.decide(key, surface)
        return f"Send policy for this session: {send_state(decision)}"

    async def model(self, key: str, args: str, *, is_owner: bool) -> str:
        """/model lists the profiles; /model NAME (owners only) switches the chat to one until changed."""
        llm = self.settings.llm
        session = await self.sessions.active_for_key(key)
        name = args.strip().lower()
        if not name:
            current = self.agents.profile_of(session)
            lines = [
                f"{'▶' if profile == current else '•'} {profile}: {_describe_profile(self.settings, profile)}"
                for profile in llm.profile_names()
            ]
            hint = "Owners switch with /model NAME." if len(lines) > 1 else "No other profile is configured."
            if session.model_profile is None and current != DEFAULT_PROFILE:
                hint = f"This chat's agent {self.agents.of(session).name} picks {current}. {hint}"
            return "\n".join(["Model profiles (▶ this chat):", *lines, hint])
        if not is_owner:
            return "Only an owner of this bot can change the model of a chat."
        if name not in llm.profile_names():
            return f"There is no model profile {name!r}. Profiles: {', '.join(llm.profile_names())}."
        # "default" is stored as no choice: the chat follows [llm] as the config changes. Where the chat's
        # agent picks a profile of its own, it is stored as said: /model wins over the agent's.
        own = self.agents.of(session).agent
        follows = name == DEFAULT_PROFILE and (own is None or own.model_profile in (None, DEFAULT_PROFILE))
        await self.store.set_model_profile(session.id, None if follows else name)
        return (
            f"This chat now uses the model profile {name}: {_describe_profile(self.settings, name)}. "
            "It stays for this chat, across /clear, until /model changes it."
        )

    async def agent(self, key: str, args: str, *, is_owner: bool) -> str:
        """/agent says the chat's agent and why; /agent NAME (owners only) sets it for the chat, kept
        across /clear; /agent default goes back to [[agents.bindings]]. main keeps the default agent."""
        session = await self.sessions.active_for_key(key)
        names = self.agents.agents.names
        name = args.strip().lower()
        if not name:
            hint = (
                "Owners switch with /agent NAME; /agent default follows the bindings of the config."
                if len(names) > 1
                else "No agent is configured ([agents.NAME] in the config)."
            )
            return "\n".join(
                [f"Agent: {agent_state(self.agents.of(session))}", f"Agents: {', '.join(names)}.", hint]
            )
        if not is_owner:
            return "Only an owner of this bot can change the agent of a chat."
        if self.agents.of(session).source == "main":
            return "main keeps the default agent: /agent NAME changes the agent of another chat."
        if name not in names:
            return f"There is no agent {name!r}. Agents: {', '.join(names)}."
        # "default" is stored as no choice: the chat follows the bindings as the config changes.
        await self.store.set_agent(session.id, None if name == DEFAULT_AGENT else name)
        choice = self.agents.of(await self.sessions.active_for_key(key))
        if name == DEFAULT_AGENT:
            return f"This chat follows the bindings of the config: agent {agent_state(choice)}"
        return (
            f"This chat now uses the agent {name}. It stays for this chat, across /clear, until /agent "
            "changes it (/agent default follows the bindings of the config)."
        )

    async def voice(self, key: str, args: str, *, sender: str | None) -> str:
        """/voice shows whether answers here are also spoken; /voice on|off|auto changes it (owners,
        and anyone in their own DM: Authority.may_choose_voice). Kept across /clear."""
        session = await self.sessions.active_for_key(key)
        choice = args.strip().lower()
        if choice:
            if not self.sessions.authority(key, sender).may_choose_voice:
                return (
                    "Only an owner of this bot can change spoken replies here; in your own direct chat "
                    "with the bot, you can."
                )
            if choice not in VOICE_CHOICES:
                return (
                    "Usage: /voice on|off|auto (on: speak every answer, off: never, auto: answer voice "
                    "messages with voice)."
                )
            await self.store.set_voice_replies(session.id, VOICE_CHOICES[choice])
            session = await self.sessions.active_for_key(key)
        said = f"Spoken replies in this chat: {voice_state(session.voice_replies)}."
        if not self.settings.tts.speaks:
            said += " ([tts] is not set up in the config, so nothing is spoken until it is.)"
        return said

    async def pair(self, key: str, args: str, *, is_owner: bool, sender: str | None) -> str:
        """/pair CODE approves a stranger's code; /pair alone lists the codes waiting. Owners only, in
        their own DM (main): a code said in a group would be seen by everyone there."""
        if not is_owner:
            return "Only an owner of this bot can approve pairing codes."
        if self.pairing is None:
            return "DM pairing is not available here."
        if not self.sessions.authority(key, sender).may_approve_pairing:
            return "Send /pair in your direct chat with the bot."
        if not args.strip():
            waiting = await self.pairing.pending()
            if not waiting:
                return "No pairing codes are waiting."
            now = self.pairing.now()
            lines = [
                f"• {code.code}: {who(code.surface, code.user_id, code.display_name)}, expires in "
                f"{minutes_left(code.expires_at, now)} min"
                for code in waiting
            ]
            return "\n".join(["Pairing codes waiting:", *lines, "Approve one with /pair CODE."])
        try:
            user = await self.pairing.approve(args, by=sender or "owner")
        except PairingLimited as exc:
            return exc.user_message or str(exc)
        if user is None:
            return "No such code: it is wrong, or it expired. /pair lists the codes waiting."
        return (
            f"Approved {who(user.surface, user.user_id, user.display_name)}: they can talk to the bot now. "
            f"`bridge pair revoke {user.surface}:{user.user_id}` takes it back."
        )

    async def task_list(self, key: str, args: str, *, sender: str | None) -> str:
        """/tasks lists the chat's scheduled tasks (made here or posting here) with their next run;
        /tasks cancel ID cancels one, under the same rule as cancel_task: its maker and the owners
        (and in someone's own DM, that person)."""
        if self.tasks is None:
            return "Scheduled tasks are not available here."
        words = args.split()
        if words and words[0].lower() == "cancel":
            if len(words) != 2:
                return "Usage: /tasks cancel ID (/tasks lists the ids)."
            try:
                task = await self.tasks.cancel(words[1], self.sessions.authority(key, sender))
            except TaskError as exc:
                return str(exc).replace("list_tasks", "/tasks")
            return f"Cancelled task {task.id}: {task.prompt[:80]}"
        if words:
            return "Usage: /tasks, or /tasks cancel ID."
        found = await self.tasks.tasks_of(key)
        if not found:
            return 'No scheduled tasks here. Ask the bot, e.g. "remind me tomorrow at 9 to call Sam".'
        lines = ["Scheduled tasks:"]
        for task in found:
            nxt = "paused" if task.state == "paused" else f"next {when_text(task.next_due, task.zone)}"
            where = "" if task.deliver_to == key else f", posts to {task.deliver_to}"
            lines.append(f"• {task.id}: {_short(task.prompt)} ({self.tasks.describe(task)}; {nxt}{where})")
        lines.append("Cancel one with /tasks cancel ID.")
        return "\n".join(lines)

    def _model_line(self, session: SessionRow) -> str:
        profile = self.agents.profile_of(session)
        line = f"{profile} ({self.settings.llm.for_profile(profile).model})"
        if session.model_profile is not None and profile != session.model_profile:
            line += f"; the profile {session.model_profile} chosen here is no longer configured"
        return line

    async def status(self, key: str, surface: str) -> str:
        session = await self.sessions.active_for_key(key)
        restored = await self.store.loaded(session.id)
        # What the next run restores: the groups and skills the chat's agent may use.
        agent = self.agents.for_run(session)
        loaded = sorted(agent.registry.known_groups(restored.groups))
        skills = agent.skills
        loaded_skills = sorted(skills.known(restored.skills))
        count = await self.store.count_messages(session.id)
        suppressed = await self.store.count_outbox(session, "suppressed")
        summaries = await self.store.summaries(session.id)
        decision = await self.gate.decide(key, surface)
        runs = await self.store.list_runs(session_key=session.key, limit=1)
        started = datetime.fromtimestamp(session.created_at, UTC).strftime("%Y-%m-%d %H:%M UTC")
        return "\n".join(
            [
                f"Session: {session.id} (key {session.key}, started {started})",
                f"Messages: {count}",
                f"Loaded tool groups: {', '.join(loaded) if loaded else 'none'}",
                # Only where skills are configured: elsewhere the line could only ever say "none".
                *([f"Loaded skills: {', '.join(loaded_skills) or 'none'}"] if skills else []),
                f"Model: {self._model_line(session)}",
                f"Agent: {agent_state(agent.choice)}",
                # Only where [tts] is set up: elsewhere nothing is ever spoken.
                *(
                    [f"Spoken replies: {voice_state(session.voice_replies)}"]
                    if self.settings.tts.speaks
                    else []
                ),
                f"State: {'answering' if self.lanes.busy(key) else 'idle'}",
                # A run a loop rule cut short answered from what it had; the rule is said here, and
                # in its trace, not in the chat.
                *(
                    [f"Last answer: cut short, {runs[0][0].error}"]
                    if runs and runs[0][0].status == "stopped" and runs[0][0].error
                    else []
                ),
                f"Send policy: {send_state(decision)}",
                f"Suppressed by the send policy: {suppressed}",
                f"Summaries of older turns: {len(summaries)}"
                + (
                    f" (replacing {sum(x.replaced_chars for x in summaries):,} characters of "
                    f"{sum(x.turns for x in summaries)} turns)"
                    if summaries
                    else ""
                ),
            ]
        )


def _short(text: str, limit: int = 60) -> str:
    line = " ".join(text.split())
    return f'"{line if len(line) <= limit else line[: limit - 1] + "…"}"'


def agent_state(choice: AgentChoice) -> str:
    """`support (bound by binding 1 (chat_type=group))`, as /agent and /status say it."""
    return f"{choice.name} ({choice.reason})"


def _describe_profile(settings: Settings, name: str) -> str:
    llm = settings.llm.for_profile(name)
    return f"model {llm.model}, {llm.tool_mode} tool calls"


# /send's argument → the stored override ("" shows the current state without changing it).
_SEND_CHOICES: dict[str, str | None] = {"on": "allow", "off": "deny", "inherit": None, "": None}


def send_state(decision: Decision) -> str:
    """`off, decided by session override (/send off); shadow mode: ...` as /send and /status show it."""
    effect = {
        "allow": "the bot speaks here",
        "deny": "shadow mode: the bot reads and answers in its history but sends nothing here",
        "ignore": "the bot does not read this chat",
    }[decision.action]
    word = {"allow": "on", "deny": "off", "ignore": "ignore"}[decision.action]
    return f"{word}, decided by {decision.reason}; {effect}."
