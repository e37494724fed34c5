"""The benchmarks still run: `python -m bench --smoke` on tiny sizes, every result file written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.versus.compare import missing_note, nanobot_python

ROOT = Path(__file__).parent.parent
NAMES = [
    "schema_tokens",
    "restore_cost",
    "throughput",
    "http_throughput",
    "memory",
    "round_trips",
    "scale",
    "telegram_turn",
    "idle_worker",
]


def run(results: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python ARGS` in the project, with the figures written to `results` and a bare environment."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "BRIDGE_BENCH_RESULTS": str(results), "NO_PROXY": "127.0.0.1"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_benchmark_runs_in_smoke_mode_and_writes_its_figures(tmp_path: Path) -> None:
    done = run(tmp_path, "-m", "bench", "--smoke")
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


# `python -m bench` in a process where these cannot be imported, as in a venv with only the `bench` extra.
WITHOUT = """
import runpy, sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
sys.argv = ["bench", *sys.argv[2:]]
runpy.run_module("bench", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize(
    "missing",
    [
        # The `bench` extra alone: neither psycopg nor pytest.
        "psycopg,psycopg_pool,pytest",
        # pytest there (say, from another project) but not psycopg: this one crashed with
        # ModuleNotFoundError on a machine with PostgreSQL's server programs.
        "psycopg,psycopg_pool",
    ],
)
def test_without_psycopg_the_postgresql_figures_are_skipped_with_a_note(tmp_path: Path, missing: str) -> None:
    done = run(tmp_path, "-c", WITHOUT, missing, "--smoke", "--only", "http_throughput", "scale")
    assert done.returncode == 0, done.stderr[-3000:]
    notes = [line for line in done.stdout.splitlines() if "PostgreSQL figures skipped" in line]
    assert len(notes) == 2 and all("pip install -e '.[bench,postgresql]'" in note for note in notes), notes
    # The SQLite figures are taken all the same, the several-workers one included.
    for name in ("http_throughput", "scale"):
        data = json.loads((tmp_path / f"{name}.smoke.json").read_text())
        assert [r["store"] for r in data["results"]] == ["sqlite"]


def test_the_memory_search_benchmark_runs_at_a_small_size_and_writes_its_figures(tmp_path: Path) -> None:
    done = run(tmp_path, "-m", "bench", "memory-search", "--smoke")
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((tmp_path / "memory_search.smoke.json").read_text())
    assert [(r["store"], r["scope"]) for r in data["results"]] == [
        ("sqlite", "session"),
        ("sqlite", "chat"),
        ("sqlite", "all"),
    ]
    assert all(r["p99_ms"] >= r["p50_ms"] > 0 for r in data["results"])


def test_bridge_and_nanobot_run_the_same_closed_loop_side_by_side(tmp_path: Path) -> None:
    python = nanobot_python()
    if python is None:
        # `.ci/run` installs nanobot and sets BRIDGE_REQUIRE_NANOBOT, so in CI this runs or fails.
        if os.environ.get("BRIDGE_REQUIRE_NANOBOT"):
            pytest.fail(missing_note())
        pytest.skip(missing_note())
    done = run(tmp_path, "-m", "bench", "nanobot", "--smoke", "--nanobot", python)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((tmp_path / "versus_nanobot.smoke.json").read_text())
    [round_] = data["rounds"]
    # Each side answered turns in its window (a wrong answer fails the side), and the ratio is theirs.
    bridge, nanobot = round_["bridge"], round_["nanobot"]
    assert bridge["turns"] > 0 and nanobot["turns"] > 0
    assert bridge["cpu_ms_per_turn"] > 0 and nanobot["cpu_ms_per_turn"] > 0
    assert round_["ratio"] == round(bridge["turns_per_s"] / nanobot["turns_per_s"], 1)
    assert data["median_ratio"] == round_["ratio"]


def test_without_nanobot_only_bridges_side_is_measured_with_a_note_saying_how_to_install_it(
    tmp_path: Path,
) -> None:
    done = run(tmp_path, "-m", "bench", "nanobot", "--smoke", "--nanobot", str(tmp_path / "no-such-python"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "pip install 'nanobot-ai==0.3.5'" in done.stdout
    data = json.loads((tmp_path / "versus_nanobot.smoke.json").read_text())
    [round_] = data["rounds"]
    assert round_["bridge"]["turns"] > 0 and round_["nanobot"] is None and data["median_ratio"] is None


def test_nanobots_environment_may_be_named_by_its_folder_or_its_python(tmp_path: Path) -> None:
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    assert nanobot_python(str(tmp_path / "venv")) == str(python)
    assert nanobot_python(str(python)) == str(python)
    # A folder without a python in it is no environment: Bridge's side alone, with the note.
    assert nanobot_python(str(tmp_path)) is None
