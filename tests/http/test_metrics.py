"""/metrics beside Bridge's own figures: the process, Python's garbage collector, and the build that runs."""

from __future__ import annotations

import importlib.metadata
import platform
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from devkit.fakes.openai_server import FakeOpenAI
from tests.http.conftest import admin_bridge, client_of


async def test_metrics_show_the_process_the_garbage_collector_and_the_build(tmp_path: Path) -> None:
    async with FakeOpenAI() as llm, admin_bridge(tmp_path, llm) as (_, _, base), client_of(base) as client:
        answer = await client.get("/metrics")
    assert answer.status_code == 200
    found = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }
    if sys.platform == "linux":  # prometheus_client reads the process's figures from /proc
        assert found[("process_resident_memory_bytes", ())] > 0
        assert ("process_open_fds", ()) in found
    assert ("python_gc_objects_collected_total", (("generation", "0"),)) in found
    assert "bridge_build_info{" in answer.text
    build = {labels: value for (name, labels), value in found.items() if name == "bridge_build_info"}
    assert build == {
        (("python", platform.python_version()), ("version", importlib.metadata.version("bridge"))): 1.0
    }
