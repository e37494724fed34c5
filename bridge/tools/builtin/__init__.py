"""The built-in tools: core tools sent on every turn (`core.py`, `skills.py`), and the groups
`sessions` (with `spawn.py`, spawn_agent), `files` (with `send_file.py` and the `workspace.py` they
are confined to), `web` and `scheduled_tasks` (`tasks.py`).
"""
