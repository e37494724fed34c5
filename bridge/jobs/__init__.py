"""Runs nobody typed, above the gateway and the agent: scheduled tasks' firings (`tasks.py`), webhook
events (`hooks.py`), the prompt-into-a-session-of-its-own they share (`headless.py`) and the loop that
wakes when something is due (`loop.py`).

May import the agent, the gateway's lanes and delivery, and everything below them. Nothing in `tools/`,
`agent/` or `tasks/` imports this package: the tools see the task catalogue (bridge.tasks.catalog).
"""
