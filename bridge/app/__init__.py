"""The composition root, under the CLI and the HTTP server: `Bridge` builds every service from
Settings, runs it and shuts it down (`root.py`); `registry.py` builds the tool registry from the
settings (the built-in groups, manifests, MCP servers, skills); `platforms.py` starts the platform
connections where workers share the chats (one listener at a time).

May import everything below it: the gateway, jobs, the agent, tools, MCP, and what they build on.
Only the CLI and the HTTP server (which serves a running Bridge) import it; adapters never do.
"""

from bridge.app.root import Bridge

__all__ = ["Bridge"]
