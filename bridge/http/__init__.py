"""The HTTP server of `bridge run`, which serves a running Bridge: `server.py` (login, /healthz,
/readyz, /metrics, the routes), `auth.py` and `throttle.py` (who may use it, what a wrong token costs),
`api.py`, `pairing_api.py` and `policy_edit.py` (the admin JSON API), `dashboard/` (the pages),
`pages.py` (rendering them) and `views.py` (what they and the API read), `webchat/` (chatting from the
browser), `hooks.py` (`POST /hooks/<name>`), `replies.py` (error
answers). Connection limits are bridge.serving's.

The layer under the CLI: may import bridge.app and everything below it; nothing imports it but the CLI
(and the Telegram webhook's server, which takes the hooks route through the platform contract).
"""
