"""How the real-model bench scores a chat: facts found, call-shaped replies, and counts from the traces."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Sequence
from pathlib import Path
from statistics import mean
from typing import Any

from bench.common import table
from bench.real_model.scenarios import Fact
from bridge.store.base import RunRow
from bridge.tools.registry import normalize_group_name

SUMMED = ("model_calls", "reloads", "not_loaded", "unknown_tool", "loop_stops", "call_replies", "failed_runs")


def is_call_shaped(reply: str, names: Collection[str]) -> bool:
    """A reply that writes out a tool call (fenced JSON, `name(...)`) instead of answering.

    Small models do this; such a reply scores no answer facts even when it happens to hold one
    (`search_history(query: "main")` is not an answer that lists the session main).
    """
    if "```" in reply or re.search(r'"(tool_)?name"\s*:', reply):
        return True
    return any(re.search(rf"\b{re.escape(name)}\s*\(", reply) for name in names)


def check_fact(
    fact: Fact, reply: str, workspace: Path, call_shaped: bool = False, memories: Sequence[str] = ()
) -> dict[str, Any]:
    if fact.memory:
        found = any(re.search(fact.pattern, memory, re.IGNORECASE) for memory in memories)
    elif fact.file is None:
        found = not call_shaped and re.search(fact.pattern, reply, re.IGNORECASE) is not None
    else:
        path = workspace / fact.file
        text = path.read_text(errors="replace") if path.is_file() else ""
        found = re.search(fact.pattern, text, re.IGNORECASE) is not None
    return {"fact": fact.label, "found": found}


def _group_named(arguments: Any) -> str:
    if not isinstance(arguments, dict):
        return ""
    return normalize_group_name(str(arguments.get("group_name", "")))


def tally(runs: list[tuple[RunRow, dict[str, Any]]]) -> dict[str, Any]:
    """Model calls, reloads of a loaded group, unavailable tools and loop stops, from the traces."""
    counts: Counter[str] = Counter()
    rules: Counter[str] = Counter()
    loaded: set[str] = set()
    calls: list[str] = []
    for run, trace in runs:
        for step in trace.get("steps", []):
            if step.get("type") == "model":
                counts["model_calls"] += 1
                continue
            calls.append(f"{step.get('name')}:{step.get('status')}")
            counts[str(step.get("code"))] += step.get("status") == "error"
            if step.get("name") == "load_tool_group":
                group = _group_named(step.get("parsed_arguments"))
                counts["reloads"] += group in loaded
                if step.get("status") == "success":
                    loaded.add(group)
        rule = trace.get("stop_rule") or ("stopped" if run.status == "stopped" else None)
        if rule:
            rules[rule] += 1
        counts["failed_runs"] += run.status not in ("ok", "stopped")
    return {
        "model_calls": counts["model_calls"],
        "reloads": counts["reloads"],
        "not_loaded": counts["not_loaded"],
        "unknown_tool": counts["unknown_tool"],
        "loop_stops": sum(rules.values()),
        "stop_rules": dict(rules),
        "failed_runs": counts["failed_runs"],
        "tool_calls": calls,
    }


def totals(mode: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    row: dict[str, Any] = {"scenario": "total", "mode": mode}
    for key in (*SUMMED, "facts_found", "facts_expected", "seconds"):
        row[key] = sum(r[key] for r in results)
    row["seconds"] = round(row["seconds"], 1)
    return row


def print_table(title: str, rows: list[dict[str, Any]]) -> None:
    headers = ["mode", "scenario", "model calls", "reloads", "not loaded", "unknown tool", "loop stops"]
    headers += ["call replies", "facts", "seconds"]
    cells = [
        [
            r["mode"],
            r["scenario"],
            *(r[k] for k in SUMMED[:6]),
            f"{r['facts_found']}/{r['facts_expected']}",
            r["seconds"],
        ]
        for r in rows
    ]
    print(table(title, headers, cells))


def by_question(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The labelled turns of every repeat, one row a question: how often it was answered right, and
    how (call-shaped, stopped by a rule), with its model calls and seconds."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for result in results:
        for turn in result["turns"]:
            if turn.get("label"):
                grouped.setdefault(turn["label"], []).append(turn)
    rows = []
    for label, turns in grouped.items():
        calls = [t["model_calls"] for t in turns]
        rows.append(
            {
                "question": label,
                "repeats": len(turns),
                "answered_right": sum(all(f["found"] for f in t["facts"]) for t in turns),
                "call_shaped": sum(t["call_shaped"] for t in turns),
                "rule_stopped": sum(t["stop_rule"] is not None for t in turns),
                "bridge_worded": sum(t.get("answered_from") in ("tool_result", "rule") for t in turns),
                "model_calls_mean": round(mean(calls), 2),
                "model_calls_max": max(calls),
                "seconds_mean": round(mean(t["seconds"] for t in turns), 1),
            }
        )
    return rows


def print_questions(title: str, rows: list[dict[str, Any]]) -> None:
    headers = ["question", "answered right", "call-shaped", "stopped by a rule", "in Bridge's words"]
    headers += ["model calls (max)", "seconds"]
    cells = [
        [
            r["question"],
            f"{r['answered_right']}/{r['repeats']}",
            r["call_shaped"],
            r["rule_stopped"],
            r["bridge_worded"],
            f"{r['model_calls_mean']:g} ({r['model_calls_max']})",
            r["seconds_mean"],
        ]
        for r in rows
    ]
    print(table(title, headers, cells))
