"""The dashboard: HTML pages for the operator, rendered by bridge.http.pages from what views.py reads.

`site.py` is the dashboard itself (its static files, the overview, sessions, a session as a chat, run
timelines, the outbox and the send policy); `logs.py`, `tasks.py` and `tools.py` are a page each,
each a DashboardPart the server mounts beside it.
"""

from bridge.http.dashboard.site import Dashboard, chat_of, timeline

__all__ = ["Dashboard", "chat_of", "timeline"]
