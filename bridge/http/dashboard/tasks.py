"""The dashboard's tasks page: scheduled tasks and hook events, their firings, and the owner's actions.

Every action goes through the task catalogue (bridge.tasks.catalog), acting as the operator, so the
dashboard, the chat commands, the tools and the CLI share one rule of who may change a task."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web

from bridge.http.pages import DashboardPart
from bridge.http.replies import bad_request, conflict, forbidden, not_found
from bridge.sessions.authority import Authority
from bridge.sessions.keys import cron
from bridge.store.hooks import HookEvent
from bridge.store.tasks import FiringRow, TaskRow
from bridge.tasks.catalog import TaskCatalog, TaskError
from bridge.tasks.when import when_text

if TYPE_CHECKING:
    pass

# The newest firings shown with each task: enough to see a task failing or being missed.
FIRINGS_SHOWN: Final = 5
# The newest webhook events the page and the API show by default (the API takes ?limit= up to MAX).
EVENTS_SHOWN: Final = 50
MAX_EVENTS: Final = 500
# How an ended task's state reads in a refusal: "Task ab12cd34 was cancelled, so it can't be resumed."
_ENDED: Final = {"cancelled": "was cancelled", "done": "has run its last time"}

Action = Callable[[TaskCatalog, str, Authority], Awaitable[TaskRow]]


@dataclasses.dataclass(frozen=True, slots=True)
class _Act:
    run: Action
    # "Task ab12 was cancelled, so it can't be <verb>."
    verb: str
    said: Callable[[TaskRow], str]


def _next_run(task: TaskRow) -> str:
    return when_text(task.next_due, task.zone) if task.next_due is not None else "none"


ACTIONS: Final[dict[str, _Act]] = {
    "pause": _Act(
        TaskCatalog.pause,
        "paused",
        lambda t: f"Paused task {t.id}: it fires nothing until it is resumed.",
    ),
    "resume": _Act(
        TaskCatalog.resume,
        "resumed",
        lambda t: f"Resumed task {t.id}: next run {_next_run(t)}.",
    ),
    "run": _Act(
        TaskCatalog.request_run,
        "run now",
        lambda t: f"Task {t.id} fires now, once; its schedule stays as it is.",
    ),
    "cancel": _Act(
        TaskCatalog.cancel,
        "cancelled",
        lambda t: f"Cancelled task {t.id}: it never fires again.",
    ),
}


class TasksPage(DashboardPart):
    """GET /tasks (the page), GET /api/tasks, POST /api/tasks/{id}/pause|resume|run|cancel and GET
    /api/hooks/events."""

    def routes(self, app: web.Application) -> None:
        add = app.router
        add.add_get("/tasks", self.page)
        add.add_get("/api/tasks", self.listing)
        add.add_post("/api/tasks/{task_id}/{action}", self.act)
        add.add_get("/api/hooks/events", self.hook_events)

    # ------------------------------------------------------------------ reads

    async def page(self, request: web.Request) -> web.Response:
        ended = _flag(request, "ended")
        return self.render(
            "tasks.html",
            "tasks",
            tasks=await self._tasks(ended=ended),
            ended=ended,
            # Each hook's name and the chat it answers in, by the key its session has (an owner's DM
            # is main), so the link finds it.
            hooks=[
                (name, self.bridge.authorities.canonical(hook.deliver_to))
                for name, hook in sorted(self.bridge.hooks.hooks.items())
            ],
            events=[event_json(e) for e in await self.bridge.store.recent_hook_events(EVENTS_SHOWN)],
        )

    async def listing(self, request: web.Request) -> web.Response:
        """{"tasks": [...]}: the live tasks (?ended=1: ended ones too), soonest due first, each with
        its schedule in words, whom it acts for and its newest firings."""
        return web.json_response({"tasks": await self._tasks(ended=_flag(request, "ended"))})

    async def hook_events(self, request: web.Request) -> web.Response:
        """{"events": [...]}: the newest webhook events of every hook, newest first (?limit=)."""
        raw = request.query.get("limit") or str(EVENTS_SHOWN)
        try:
            limit = int(raw)
        except ValueError:
            raise bad_request("limit must be a whole number") from None
        limit = max(1, min(limit, MAX_EVENTS))
        events = await self.bridge.store.recent_hook_events(limit)
        return web.json_response({"events": [event_json(e) for e in events]})

    async def _tasks(self, *, ended: bool) -> list[dict[str, Any]]:
        store = self.bridge.store
        listed = []
        for task in await store.list_tasks(None, live_only=not ended):
            firings = await store.firings(task.id, FIRINGS_SHOWN)
            listed.append(self.task_json(task, firings))
        return listed

    def task_json(self, task: TaskRow, firings: list[FiringRow]) -> dict[str, Any]:
        # The authority its firings act with, as they get it (a task made before makers were recorded
        # gets a narrow one); without the chain, which only repeats the task's own id.
        acts = self.bridge.authorities.of_task(
            task.authority, chat_key=task.chat_key, deliver_to=task.deliver_to, task_id=task.id
        )
        shown = dataclasses.asdict(task)
        # The stored route and authority are internal JSON; what they mean is given instead.
        del shown["route"], shown["authority"]
        return {
            **shown,
            "schedule": TaskCatalog.describe(task),
            "acts_as": dataclasses.replace(acts, chain=()).describe(),
            # The session its firings run in.
            "session_key": str(cron(task.id)),
            "firings": [dataclasses.asdict(firing) for firing in firings],
        }

    # ------------------------------------------------------------------ actions

    async def act(self, request: web.Request) -> web.Response:
        """Pause, resume, run now or cancel, as the operator, under the same rule as /tasks cancel and
        cancel_task: 404 for an unknown task, 409 for one that has ended, 403 where it may not."""
        task_id, name = request.match_info["task_id"], request.match_info["action"]
        action = ACTIONS.get(name)
        if action is None:
            raise not_found(f"no action {name!r} on a task: pause, resume, run or cancel")
        try:
            task = await action.run(self.bridge.tasks, task_id, self.bridge.authorities.operator())
        except TaskError as exc:
            raise _refusal(exc, task_id, action.verb) from None
        firings = await self.bridge.store.firings(task.id, FIRINGS_SHOWN)
        return web.json_response(
            {"ok": True, "said": action.said(task), "task": self.task_json(task, firings)}
        )


def event_json(event: HookEvent) -> dict[str, Any]:
    return dataclasses.asdict(event)


def _refusal(exc: TaskError, task_id: str, verb: str) -> web.HTTPException:
    if exc.reason == "unknown":
        return not_found(f"No scheduled task {task_id}.")
    if exc.reason == "ended":
        task = exc.task
        if task is not None and task.state in _ENDED:
            return conflict(f"Task {task.id} {_ENDED[task.state]}, so it can't be {verb}.")
        return conflict(str(exc))
    if exc.reason == "refused":
        return forbidden(str(exc))
    return bad_request(str(exc))


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "").lower() in ("1", "true", "yes", "on")
