"""Chats and whom a run acts for: `keys.py` (session keys, a grammar that imports nothing, so config
checks keys with it), `service.py` (a message's key and its one active session) and `authority.py`
(every "may this run see, message, post in, schedule or cancel that?").

`keys.py` sits below config; `authority.py` imports only keys; `service.py` also the store.
"""
