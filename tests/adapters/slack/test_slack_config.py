"""[slack] as the operator writes it: a missing or misplaced token is named by its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.app.platforms import exclusive, holding, platform_lock
from bridge.config import Settings
from bridge.config.io import load_settings
from bridge.errors import ConfigError

pytestmark = pytest.mark.usefixtures("isolated_config")


@pytest.mark.parametrize(
    ("section", "said"),
    [
        ('app_token = "xapp-1"', "slack: bot_token is required when enabled"),
        ('bot_token = "xoxb-1"', "slack: app_token is required when enabled"),
        (
            'bot_token = "xapp-1"\napp_token = "xapp-2"',
            "slack: bot_token must be the bot token, which starts with xoxb-",
        ),
        ('bot_token = "xoxb-1"\napp_token = "xoxb-2"', "slack: app_token must be an app-level token"),
        ('bot_token = "xoxb-1"\napp_token = "xapp-2"\nallowed_channel = ["C1"]', "allowed_channel"),
    ],
)
def test_a_wrong_slack_section_is_one_error_naming_the_key(tmp_path: Path, section: str, said: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f"[slack]\nenabled = true\n{section}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_settings(config)
    assert said in str(info.value)


def test_slack_is_one_listening_connection_locked_by_its_app_token() -> None:
    one = Settings(slack={"enabled": True, "bot_token": "xoxb-1", "app_token": "xapp-1"})
    other = Settings(slack={"enabled": True, "bot_token": "xoxb-1", "app_token": "xapp-2"})
    assert exclusive("slack", one) and holding("slack", one) == "slack socket mode"
    assert platform_lock("slack", one) != platform_lock("slack", other)
