"""Tools: `base.py` (Tool, ToolGroup, the context a tool runs in), `result.py` (ToolResult),
`checking.py` (the one validation of a call's arguments), `arguments.py` (arguments as types, and
built-in tools made from them), `registry.py` (core tools, groups, a run's active set and the group
listing), `manifest.py` (groups from JSON manifests), `tokens.py` (what schemas cost in tokens) and
`builtin/` (the built-in tools).

May import tasks' catalogue, media, sessions, the store, config and the base modules; bridge.mcp builds
on it, and bridge.app assembles the registry.
"""
