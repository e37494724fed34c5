"""Bridge: a self-hosted messaging bridge bot with durable sessions and on-demand tool groups.

The packages, top to bottom (a module imports only from its own layer or below; `lint-imports` holds
it, and docs/layout.md draws it): cli, http, app (with adapters beside it), jobs, gateway, agent, mcp,
tools, tasks and media, sessions and llm, metrics, store, logs, config, and the base modules (events,
platform, errors, retry, text, markup, jsonutil, live, serving, localmodel).
"""

__version__ = "0.1.0"
