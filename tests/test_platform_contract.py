"""The core asks a platform through bridge.platform's typed contract, never by probing a name."""

from __future__ import annotations

import ast
from pathlib import Path

BRIDGE = Path(__file__).parent.parent / "bridge"


def _platform_object(node: ast.expr) -> bool:
    """`sender`, `self.adapter`, `adapter`...: what the core calls a platform object."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return "sender" in name.lower() or "adapter" in name.lower()


def test_no_module_of_the_core_probes_a_platform_object_by_name() -> None:
    probes = []
    for path in sorted(BRIDGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and node.args
                and _platform_object(node.args[0])
            ):
                probes.append(f"{path.relative_to(BRIDGE.parent)}:{node.lineno}")
            if isinstance(node, ast.FunctionDef) and node.name == "__getattr__" and "gateway" in path.parts:
                probes.append(f"{path.relative_to(BRIDGE.parent)}:{node.lineno} __getattr__")
    # Declare the capability or operation in bridge/platform.py and read it as an attribute instead.
    assert probes == []
