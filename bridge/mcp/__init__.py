"""MCP servers as lazily loaded tool groups: `group.py` (a server as a group, listed from config
alone), `connection.py` (the client connection: opened on first use, reopened with back-off, closed
when idle), `state.py` (what a server is doing, as the dashboard shows it), `results.py` (a result
as the model reads it), `cache.py` (a listing kept between processes).

Sits above bridge.tools, whose Tool and ToolGroup it builds; bridge.app puts the groups into the
registry.
"""
