"""The Slack surface: one Slack app over Socket Mode (`adapter.py`, which the `bridge.adapters` entry
point names), its message events (`events.py`), the connection and its acknowledgements
(`socket.py`), Markdown as mrkdwn (`format.py`), files in and out (`media.py`) and what a failed Web
API call means (`retrying.py`). slack_sdk comes with the `slack` extra.
"""

try:
    import slack_sdk  # noqa: F401  (only to say what is missing)
except ModuleNotFoundError as exc:  # pragma: no cover - the test extra installs it
    from bridge.errors import ConfigError

    raise ConfigError(
        "[slack] enabled needs slack_sdk, which comes with the slack extra: pip install 'bridge[slack]'"
    ) from exc

from adapters.slack.adapter import SlackAdapter

__all__ = ["SlackAdapter"]
