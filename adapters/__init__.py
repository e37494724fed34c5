"""Platform adapters, each a plugin found through the `bridge.adapters` entry point: `telegram/` (a
package: the adapter, its updates, format, media and retries), `slack/` (likewise, over Socket Mode),
`matrix/`, `discord/` and `console/`, each a package with its adapter in `adapter.py`. `base.py` is
the plugin API's guide.

Each implements bridge.platform's Adapter and may import only the core's public vocabulary (bridge.events,
bridge.platform, bridge.errors and the base utilities, config sections, bridge.media's bounded read);
no platform imports another, and the core imports none of them (contracts in pyproject.toml).
"""
