"""The agent: one run of a session, from its stored history to a stored answer.

`runner.py` is the loop (history window, restored groups and skills, tools, the answer and its reply
rows in one transaction); `asking.py` makes its model requests (and the fallback); `toolcalls.py`
checks each call against the loaded tools and the run's authority and stores it with its result;
`loops.py` ends runs that go in circles; `prompt.py`, `history.py` and `compaction.py` make what the
model reads; `attachments.py` reads a message's media; `trace.py` keeps what a run did; `runstate.py`
is what a run carries; `chat_agents.py` says which agent ([agents.NAME]) a chat has and what its runs
use.

May import tools, MCP, tasks' catalogue, media, llm, sessions, the store, config and the base modules;
never the gateway, jobs or anything above.
"""
