"""Config of [runs] (how turns are scheduled) and [delivery] (a send in flight at a crash)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from bridge.config.base import Section


class RunsSettings(Section):
    """How turns are scheduled: concurrency, what happens to messages sent while busy, shutdown."""

    max_concurrent_runs: int = Field(8, ge=1, le=1000)
    # "collect": messages sent during a run are answered together in one follow-up turn;
    # "followup": each gets a turn of its own, in order.
    queue_mode: Literal["followup", "collect"] = "collect"
    # Messages one chat may have waiting; past it, a message is refused with a notice (not stored).
    max_queued: int = Field(20, ge=1, le=1000)
    shutdown_grace_s: float = Field(8.0, ge=0, le=600)
    # Runs whose traces (model requests, tool calls, timings) are kept; older ones are pruned and
    # their run rows stay. 0 records no traces.
    keep_traces: int = Field(1000, ge=0, le=1_000_000)


class DeliverySettings(Section):
    """What happens to a message that was being sent when Bridge was killed."""

    # Telegram and Slack have no idempotency key: a send in flight at a crash may or may not have arrived.
    # true: send it again at the next start (at least once); false: record it as 'uncertain' and
    # send nothing (at most once). Discord needs neither: its nonces make a resend safe.
    resend_uncertain: bool = True
