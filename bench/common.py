"""What every benchmark shares: percentiles, a printed table, and results written as JSON."""

from __future__ import annotations

import json
import math
import os
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# Tests point this elsewhere, so a smoke run never writes into the checkout.
RESULTS = Path(os.environ.get("BRIDGE_BENCH_RESULTS") or Path(__file__).parent / "results")


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (nearest rank) of values; 0.0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def status_mb(pid: int | str, field: str) -> float | None:
    """A size from /proc/<pid>/status in MB (`VmRSS`: resident now, `VmHWM`: its peak); None where
    that cannot be read (not Linux, or the process is gone). `pid` "self" is this process."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def machine() -> dict[str, Any]:
    """The facts a figure needs to be read against."""
    return {
        "python": platform.python_version(),
        "system": f"{platform.system()} {platform.machine()}",
        "cpus": os.cpu_count(),
        "processor": _cpu_model(),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table, numbers right-aligned, as the benchmarks print them."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    lines = [title, "  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def write_results(name: str, data: dict[str, Any], *, smoke: bool = False) -> Path:
    """bench/results/<name>.json (or <name>.smoke.json, so a smoke run never overwrites real figures)."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}{'.smoke' if smoke else ''}.json"
    path.write_text(json.dumps({"benchmark": name, "machine": machine(), **data}, indent=2) + "\n")
    return path
