"""Prometheus metrics of one Bridge: runs, model requests, tool calls, tokens, queues, the outbox, task
firings and webhook events; the process (memory, CPU, open files), Python's garbage collector, and the
version that runs."""

from __future__ import annotations

import platform
from collections.abc import Callable, Mapping
from importlib import metadata

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from bridge.store.base import OutboxState
from bridge.store.hooks import HookState
from bridge.store.tasks import FiringState

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]

OUTBOX_STATES: tuple[OutboxState, ...] = ("pending", "sending", "sent", "suppressed", "failed", "uncertain")
# How a task's firing can end (bridge.store.tasks): each shown from the start, at 0, so a rate of
# errors or misses is defined before the first one.
FIRING_ENDS: tuple[FiringState, ...] = ("ok", "error", "missed", "interrupted")
# A run takes from a few milliseconds (an instant model) to minutes (a slow model and many tools).
RUN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
MODEL_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


def bridge_version() -> str:
    """The installed package's version; "unknown" where it runs from a checkout that was never installed."""
    try:
        return metadata.version("bridge")
    except metadata.PackageNotFoundError:
        return "unknown"


class Metrics:
    """The metrics of one process, in a registry of its own (so two Bridges in one test don't mix).

    Counters are bumped where things happen (the runner); gauges that describe state (queue depth,
    runs in progress, outbox rows) are read when /metrics is scraped, from the functions given.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.runs = Counter("bridge_runs", "Runs finished, by status.", ["status"], registry=r)
        self.run_seconds = Histogram(
            "bridge_run_duration_seconds",
            "Time from a run's start to its end.",
            buckets=RUN_BUCKETS,
            registry=r,
        )
        self.model_seconds = Histogram(
            "bridge_model_request_duration_seconds",
            "Time of one model request, retries included, by provider.",
            ["provider"],
            buckets=MODEL_BUCKETS,
            registry=r,
        )
        self.model_errors = Counter(
            "bridge_model_request_errors",
            "Model requests that failed after their retries.",
            ["provider"],
            registry=r,
        )
        self.tool_calls = Counter(
            "bridge_tool_calls", "Tool calls, by tool and status.", ["tool", "status"], registry=r
        )
        self.tokens = Counter("bridge_tokens", "Tokens the model reported, by kind.", ["kind"], registry=r)
        self.attachments = Counter(
            "bridge_attachments",
            "Attachments users sent, by kind (image, audio, file) and what became of them (stored, "
            "transcribed, refused at intake, failed).",
            ["kind", "outcome"],
            registry=r,
        )
        self.task_firings = Counter(
            "bridge_task_firings",
            "Scheduled tasks' firings that ended, by state (ok, error, missed, interrupted).",
            ["state"],
            registry=r,
        )
        for state in FIRING_ENDS:
            self.task_firings.labels(state)
        self.hook_events = Counter(
            "bridge_hook_events",
            "Webhook events whose run ended, by hook and state (ok, error, interrupted).",
            ["hook", "state"],
            registry=r,
        )
        self.running = Gauge("bridge_runs_in_progress", "Runs in progress in this process.", registry=r)
        self.queued = Gauge("bridge_queue_depth", "Messages waiting for a run in this process.", registry=r)
        self.outbox = Gauge("bridge_outbox_rows", "Outbox rows, by state.", ["state"], registry=r)
        # prometheus_client's collectors of the process (process_*: memory, CPU, open files, from /proc,
        # so Linux only), the garbage collector (python_gc_*) and the interpreter (python_info), on this
        # registry: the default one, where they usually live, is never served.
        ProcessCollector(registry=r)
        GCCollector(registry=r)
        PlatformCollector(registry=r)
        build = Info("bridge_build", "The Bridge that runs: its version and Python's.", registry=r)
        build.info({"version": bridge_version(), "python": platform.python_version()})

    def run_finished(self, status: str, seconds: float, prompt_tokens: int, completion_tokens: int) -> None:
        self.runs.labels(status).inc()
        self.run_seconds.observe(seconds)
        self.tokens.labels("prompt").inc(prompt_tokens)
        self.tokens.labels("completion").inc(completion_tokens)

    def model_request(self, provider: str, seconds: float, *, failed: bool) -> None:
        self.model_seconds.labels(provider).observe(seconds)
        if failed:
            self.model_errors.labels(provider).inc()

    def tool_call(self, tool: str, status: str) -> None:
        self.tool_calls.labels(tool, status).inc()

    def attachment(self, kind: str, outcome: str) -> None:
        self.attachments.labels(kind, outcome).inc()

    def task_firing(self, state: FiringState) -> None:
        self.task_firings.labels(state).inc()

    def hook_event(self, hook: str, state: HookState) -> None:
        self.hook_events.labels(hook, state).inc()

    def watch(self, running: Callable[[], int], queued: Callable[[], int]) -> None:
        """Where the gauges of runs in progress and of the queue read their values at a scrape."""
        self.running.set_function(running)
        self.queued.set_function(queued)

    def set_outbox(self, counts: Mapping[str, int]) -> None:
        for state in OUTBOX_STATES:
            self.outbox.labels(state).set(counts.get(state, 0))

    def render(self) -> bytes:
        """The text exposition format, as Prometheus scrapes it."""
        return generate_latest(self.registry)
