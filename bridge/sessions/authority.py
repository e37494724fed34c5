"""Authority: whom a run acts for, and every "may it see, message, deliver to, schedule in, cancel or
read that?" answered in one place.

Every run carries an `Authority`:

- an **owner** (or the **operator**, from the dashboard or the CLI) acting in a chat. In `main`, the
  owners' own thread, that is all of the bot: every session may be seen, messaged and delivered to.
  Anywhere else an owner acts only in that chat, so an owner talking in a group never makes the group's
  agent read `main` into the group; there an owner may still cancel any of the chat's tasks, and the
  members' caps do not apply to them.
- a **member** of one chat (a DM of someone who is not an owner, a group, a topic, a channel): that
  chat alone.
- a **hook**: the chat its config delivers to, and no more, whatever its untrusted body says.

Runs nobody typed get the authority of whoever caused them: a task's firing that of the person who made
the task, recorded at creation (`TaskRow.authority`); a run another session's agent started
(sessions_send) its sender's, narrowed to the chat it runs in; a sub-agent (spawn_agent) its parent
run's, narrowed to its own session (`spawned`). Authority never widens down a chain (`narrowed`), and
caps count against `origin`, the chat where the chain began.

An owner's own DM key (`telegram:dm:<owner id>`) names `main` everywhere (`Authorities.canonical`): a
task or hook delivering there must not open a second session beside `main`, with its own history and
send policy.

No other module decides these questions from a session key's prefix; they ask here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Final, Literal, TypeAlias, get_args

from bridge.errors import SessionKeyError
from bridge.sessions import keys

Principal: TypeAlias = Literal["owner", "operator", "member", "hook"]
PRINCIPALS: Final[frozenset[str]] = frozenset(get_args(Principal))
# How many steps of a chain ("task:ab12cd34", "agent:main") an authority keeps, newest last: enough
# for a trace to say how a run came about, bounded for a task made by a task made by a task.
MAX_CHAIN: Final = 8
# The chain step of a sub-agent's run: "spawn:<the parent run's chat>".
SPAWN_STEP: Final = "spawn:"


@dataclass(frozen=True, slots=True)
class Authority:
    """Whom a run acts for. Immutable; `narrowed` and `via` make the authority of a run it causes."""

    principal: Principal
    # The chat it acts in (a canonical session key): what a member may see and post in.
    chat: str
    # The person it acts for, as `owners` writes them ("telegram:123"), "hook:<name>" for a hook, or
    # None where nobody is known (a task made before authority was recorded).
    person: str | None = None
    # The chat where the chain of runs began: caps (tasks per chat, per member) count here.
    origin: str = ""
    # How the run came about, oldest first ("task:ab12cd34", "agent:main"): for traces and messages.
    chain: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.principal not in PRINCIPALS:
            raise ValueError(f"unknown principal {self.principal!r}")
        if not self.origin:
            object.__setattr__(self, "origin", self.chat)

    # ------------------------------------------------------------------ what it may do

    @property
    def is_owner(self) -> bool:
        """An owner or the operator, wherever it acts (caps and cancelling), not what it may see."""
        return self.principal in ("owner", "operator")

    @property
    def sees_all(self) -> bool:
        """May see, message and deliver to every session: an owner in `main`, and the operator."""
        return self.principal == "operator" or (self.principal == "owner" and self.chat == keys.MAIN)

    @property
    def may_search_everywhere(self) -> bool:
        """Search every chat's history and memories at once (search_history's scope "all"): whoever
        sees all, so an owner in `main`, a task an owner made there, and the operator; never a run in
        any other chat, an owner's there included."""
        return self.sees_all

    @property
    def may_approve_pairing(self) -> bool:
        """Approve a stranger's pairing code: an owner in their own DM (main), where nobody else reads
        the code, or the operator."""
        return self.is_owner and self.chat == keys.MAIN

    @property
    def may_choose_voice(self) -> bool:
        """Switch spoken replies in its chat (/voice on|off|auto): an owner anywhere, and a member in
        their own DM, which nobody else hears. Not a member in a group: every answer there spoken
        (or none) is the whole group's, and "on" spends the operator's speech server on each one."""
        return self.is_owner or (self.principal == "member" and self.is_own_dm(self.chat))

    def may_see(self, key: str, *, own: str | None = None) -> bool:
        """May read that session's history, list it, or search it. `own` is the session the run is in
        (a task's cron:<id>, a hook's hook:<name>), which it may always read."""
        return self.sees_all or key == self.chat or (own is not None and key == own)

    def may_message(self, key: str) -> bool:
        """May start a run in that session's agent (sessions_send)."""
        return self.sees_all

    def may_deliver_to(self, key: str) -> bool:
        """May post in that chat: a task's deliver_to, a file, an answer."""
        return self.sees_all or key == self.chat

    def may_see_task(self, chat: str, deliver_to: str) -> bool:
        """May list a task made in `chat` (its origin) that posts in `deliver_to`."""
        return self.sees_all or self.chat in (chat, deliver_to)

    def may_cancel(self, *, maker: str | None, chat: str, deliver_to: str) -> bool:
        """May cancel a task made by `maker` in `chat` (its origin) posting in `deliver_to`: its maker
        and the owners, and in someone's own DM that person, whom nobody else's task may then pester."""
        if self.sees_all:
            return True
        if self.chat not in (chat, deliver_to):
            return False
        if self.is_owner:
            return True
        if self.person is not None and self.person == maker:
            return True
        return self.principal == "member" and self.person is not None and self.is_own_dm(self.chat)

    @property
    def may_run_code(self) -> bool:
        """May run commands and programs (the `exec` group): an owner or the operator, and the runs
        they cause. The sandbox keeps the code off Bridge's files, but the workspace it writes is
        every chat's, and its CPU and memory are the bot's, so a member, a hook or a member's task
        may not."""
        return self.is_owner

    def is_own_dm(self, key: str) -> bool:
        """Whether `key` is the DM of the person this acts for (their own chat, shared with nobody)."""
        try:
            parsed = keys.parse(key)
        except SessionKeyError:
            return False
        return parsed.scope == "dm" and f"{parsed.surface}:{parsed.id}" == self.person

    @property
    def member_rules(self) -> bool:
        """Whether the members' task rules apply: to anyone but an owner, outside their own DM."""
        return not self.is_owner and not (self.principal == "member" and self.is_own_dm(self.chat))

    # ------------------------------------------------------------------ down a chain

    def via(self, step: str) -> Authority:
        """The same rights one step further down a chain (a task's firing: "task:<id>")."""
        return replace(self, chain=(*self.chain, step)[-MAX_CHAIN:])

    def narrowed(self, chat: str, step: str) -> Authority:
        """The authority of a run this one causes in `chat` (sessions_send): at most this one's
        rights, and only that chat's unless this one sees all and the chat is `main`."""
        principal: Principal = self.principal
        if principal == "operator" and chat != keys.MAIN:
            principal = "owner"
        return Authority(principal, chat, self.person, self.origin, (*self.chain, step)[-MAX_CHAIN:])

    def spawned(self, child: str) -> Authority:
        """The authority of a sub-agent this run starts in the session `child` (spawn_agent): at most
        this one's rights, narrowed to the child's own session, so even an owner's sub-agent reads
        no other chat (it gets what it needs in its task). A member's sub-agent is a member's."""
        return self.narrowed(child, f"{SPAWN_STEP}{self.chat}")

    @property
    def is_subagent(self) -> bool:
        """A sub-agent's run, or a run one caused (a task it scheduled): its chain has a spawn step."""
        return any(step.startswith(SPAWN_STEP) for step in self.chain)

    @property
    def may_choose_agent(self) -> bool:
        """Run a sub-agent as another agent ([agents.NAME]) than its chat's: an owner, as /agent. Anyone
        else's sub-agent is their chat's own agent, so a binding that keeps a group's agent to a few
        tool groups and its own workspace cannot be stepped around."""
        return self.is_owner

    @property
    def may_spawn(self) -> bool:
        """May start a sub-agent: any run that is not one itself. Depth 1, so a sub-agent never
        starts another and a chain of them cannot grow."""
        return not self.is_subagent

    def describe(self) -> str:
        """`owner telegram:1 in main`, `member telegram:7 in telegram:group:-100 via task:ab12`."""
        who = self.principal + (f" {self.person}" if self.person else "")
        via = f" via {' → '.join(self.chain)}" if self.chain else ""
        return f"{who} in {self.chat}{via}"

    # ------------------------------------------------------------------ stored with a task

    def to_json(self) -> str:
        return json.dumps(
            {
                "principal": self.principal,
                "chat": self.chat,
                "person": self.person,
                "origin": self.origin,
                "chain": list(self.chain),
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> Authority:
        """The authority stored with a task; ValueError when it is not one (never a wider one)."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("an authority is a JSON object")
        principal, chat = data.get("principal"), data.get("chat")
        person, origin, chain = data.get("person"), data.get("origin") or chat, data.get("chain") or []
        if principal not in PRINCIPALS or not isinstance(chat, str) or not isinstance(origin, str):
            raise ValueError(f"not an authority: {text[:200]!r}")
        if person is not None and not isinstance(person, str):
            raise ValueError(f"not an authority: {text[:200]!r}")
        return cls(principal, chat, person, origin, tuple(str(step) for step in chain))


class Authorities:
    """Makes the authority of each kind of run; the one place that knows who the owners are for it."""

    def __init__(self, owners: Iterable[str]) -> None:
        self.owners = frozenset(owners)

    def canonical(self, key: str) -> str:
        """The key a chat's session has: an owner's DM is `main` (on every surface), anything else is
        itself. Invalid keys are returned as they are, for the caller's own error."""
        try:
            parsed = keys.parse(key)
        except SessionKeyError:
            return key
        if parsed.scope == "dm" and f"{parsed.surface}:{parsed.id}" in self.owners:
            return keys.MAIN
        return key

    def is_owner(self, person: str | None) -> bool:
        return person is not None and person in self.owners

    def for_chat(self, key: str, person: str | None) -> Authority:
        """A run (or a command) in a chat, for the person who wrote the newest message it answers.
        Only owners write in `main`, so a run there is an owner's whoever is named."""
        key = self.canonical(key)
        if key == keys.MAIN or self.is_owner(person):
            return Authority("owner", key, person)
        return Authority("member", key, person)

    def for_hook(self, name: str, deliver_to: str) -> Authority:
        """A webhook's run: its configured chat and nothing else (its body is a stranger's words)."""
        return Authority("hook", self.canonical(deliver_to), f"hook:{name}")

    def operator(self) -> Authority:
        """The operator: the admin API and the CLI, who already hold the bot's token or its files."""
        return Authority("operator", keys.MAIN, "operator")

    def of_task(self, stored: str | None, *, chat_key: str, deliver_to: str, task_id: str) -> Authority:
        """A task's firing: the authority recorded when it was made, one step further down the chain.

        A task made before authority was recorded (or whose record is unreadable) gets no more than a
        member of the chat it posts in, or the owners' if it was made in `main`: never a wider one."""
        step = f"task:{task_id}"
        if stored:
            try:
                return Authority.from_json(stored).via(step)
            except (ValueError, TypeError):
                pass
        if chat_key == keys.MAIN:
            return Authority("owner", keys.MAIN, None, chain=(step,))
        return Authority("member", self.canonical(deliver_to), None, chain=(step,))


__all__ = ["PRINCIPALS", "Authorities", "Authority", "Principal"]
