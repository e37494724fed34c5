"""The gateway: between the platforms and the agent, the way in and the way out of every chat.

The way in:
- `dispatcher.py`: an Inbound becomes a command's answer, or a stored message and a run in its lane.
- `access.py`: who may talk (owners, allowlists, paired people, mention gating) and `pairing.py`:
  strangers' codes and the people owners approved.
- `commands.py`: /clear, /status, /send, /model, /voice, /pair, /tasks and the rest.
- `lanes.py`: one run at a time per chat, none held up by another; `sharing.py`: the same across
  workers on PostgreSQL (claims, leases, taking over a dead worker's chats).
- `a2a.py`: sessions_send's run in another chat, and the exchange that follows.

The way out:
- `delivery.py`: an answer planned into outbox rows under the send policy (`policy.py`), then sent
  by `courier.py`, one chat at a time and in order.
- `activity.py` (tool activity, one message edited in place) and `streaming.py` (an answer shown as
  it streams) write through delivery, typed by the `Outlet` they use.
- `files_out.py`: a file send_file sends, copied and queued like any reply; `voice_out.py`: an answer
  spoken ([tts], /voice) and queued the same way after its text.

Around the platforms: `lifecycle.py` guards each adapter (start once, send only while running, stop
once); `presence.py` keeps this process's row in the workers table.

May import the agent, tools, sessions, the store, config and the base modules (bridge.platform is
how it speaks to adapters); never bridge.app, bridge.jobs, the HTTP server or an adapter.
"""
