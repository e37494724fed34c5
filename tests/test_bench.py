"""The benchmarks still run: `python -m bench --smoke` on tiny sizes, every result file written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
NAMES = ["schema_tokens", "restore_cost", "throughput", "http_throughput", "memory", "round_trips", "scale"]


def test_every_benchmark_runs_in_smoke_mode_and_writes_its_figures(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke"],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "BRIDGE_BENCH_RESULTS": str(tmp_path), "NO_PROXY": "127.0.0.1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for name in NAMES:
        data = json.loads((tmp_path / f"{name}.smoke.json").read_text())
        assert data["benchmark"] == name and data["machine"]["cpus"]
    tokens = json.loads((tmp_path / "schema_tokens.smoke.json").read_text())
    assert "bpe-openai" in json.dumps(tokens)
    trips = json.loads((tmp_path / "round_trips.smoke.json").read_text())
    on, off = trips["results"]
    assert on["not_available_errors"] == 0 and off["not_available_errors"] > 0
    assert "all done in" in done.stdout
