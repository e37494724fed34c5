"""[matrix] as the operator writes it: a missing or misplaced key is named by its key; owners and
pairing take Matrix user ids, colon and all."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.app.platforms import exclusive, holding, platform_lock
from bridge.cli import main
from bridge.config import Settings
from bridge.config.io import load_settings
from bridge.errors import ConfigError

pytestmark = pytest.mark.usefixtures("isolated_config")

HOME = 'homeserver = "https://matrix.example.org"'


@pytest.mark.parametrize(
    ("section", "said"),
    [
        (
            'user_id = "@bridge:example.org"\naccess_token = "syt_1"',
            "matrix: homeserver is required when enabled",
        ),
        (f'{HOME}\naccess_token = "syt_1"', "matrix: user_id is required when enabled"),
        (f'{HOME}\nuser_id = "bridge"\naccess_token = "syt_1"', "is not a Matrix user id"),
        (f'{HOME}\nuser_id = "@bridge:example.org"', "matrix: access_token is required when enabled"),
        (
            f'{HOME}\nuser_id = "@bridge:example.org"\npassword = "pw"',
            "matrix: device_id is required with password",
        ),
        (
            f'{HOME}\nuser_id = "@bridge:example.org"\npassword = "pw"\naccess_token = "syt_1"',
            "give access_token or password",
        ),
        (
            f'{HOME}\nuser_id = "@b:x"\naccess_token = "syt_1"\nallowed_rooms = ["#general:example.org"]',
            "is not a room id",
        ),
        ('homeserver = "matrix.example.org"\nuser_id = "@b:x"\naccess_token = "t"', "must be a URL"),
        (f'{HOME}\nuser_id = "@b:x"\naccess_token = "t"\nallowed_room = ["!a"]', "allowed_room"),
    ],
)
def test_a_wrong_matrix_section_is_one_error_naming_the_key(tmp_path: Path, section: str, said: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f"[matrix]\nenabled = true\n{section}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_settings(config)
    assert said in str(info.value)


def test_check_config_names_the_missing_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        f'[matrix]\nenabled = true\n{HOME}\nuser_id = "@bridge:example.org"\n', encoding="utf-8"
    )
    assert main(["check-config", "--config", str(config)]) != 0
    assert "access_token is required when enabled" in capsys.readouterr().err


def test_owners_and_allowed_users_take_matrix_user_ids_with_their_colon() -> None:
    settings = Settings(
        owners=["matrix:@ann:example.org", "matrix:@bob:localhost:8448"],
        matrix={"allowed_users": ["@eve:example.org"], "allowed_rooms": ["!abc:example.org", "!v12roomid"]},
    )
    assert settings.owners[0] == "matrix:@ann:example.org"
    with pytest.raises(ValueError, match="is not of the form surface:user_id"):
        Settings(owners=["matrix:@ann:example.org:x:y"])


def test_matrix_is_one_listening_connection_locked_by_its_account() -> None:
    one = Settings(
        matrix={"enabled": True, "homeserver": "https://m.org", "user_id": "@a:m.org", "access_token": "t"}
    )
    other = Settings(
        matrix={"enabled": True, "homeserver": "https://m.org", "user_id": "@b:m.org", "access_token": "t"}
    )
    assert exclusive("matrix", one) and holding("matrix", one) == "matrix sync"
    assert platform_lock("matrix", one) != platform_lock("matrix", other)


def test_bridge_pair_takes_a_matrix_user_written_as_owners_are() -> None:
    from bridge.cli.pair import _person

    assert _person(["matrix:@eve:example.org"]) == ("matrix", "@eve:example.org")
    assert _person(["matrix", "@eve:localhost:8448"]) == ("matrix", "@eve:localhost:8448")
    assert _person(["telegram:1:2"]) is None
