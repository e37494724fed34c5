"""[media] and [stt]: defaults, what is refused (named by its key), and the STT key kept secret."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from bridge.config import Settings
from bridge.config.base import REDACTED
from bridge.config.io import load_settings, render_settings
from bridge.errors import ConfigError
from bridge.logs import secret_values

SECRET = "sk-stt-DO-NOT-PRINT-4242"


# No BRIDGE_* variable of the outer environment and no ./config.toml of the repo leaks in.
pytestmark = pytest.mark.usefixtures("isolated_config")


def config_error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    return str(info.value)


def error_locations(error: ValidationError) -> list[str]:
    return [".".join(str(part) for part in detail["loc"]) for detail in error.errors()]


def test_defaults_take_20_mb_four_images_and_no_voice() -> None:
    settings = Settings()
    assert settings.media.max_bytes == 20 * 1024 * 1024
    assert settings.media.history_images == 4
    assert settings.media.path is None
    assert settings.stt.base_url is None and not settings.stt.enabled
    assert settings.stt.model == "whisper-1"
    assert settings.stt.api_key.get_secret_value() == ""
    assert settings.stt.language is None


def test_a_stt_base_url_turns_voice_on_without_its_trailing_slash() -> None:
    settings = Settings(stt={"base_url": "http://127.0.0.1:8080/v1/"})
    assert settings.stt.enabled
    assert settings.stt.base_url == "http://127.0.0.1:8080/v1"


def test_an_empty_stt_base_url_is_voice_off() -> None:
    assert not Settings(stt={"base_url": ""}).stt.enabled


@pytest.mark.parametrize(
    "url", ["not a url", "127.0.0.1:8080/v1", "ftp://host/v1", "http://", "http:// host"]
)
def test_a_stt_base_url_that_is_not_an_http_url_is_refused(url: str) -> None:
    with pytest.raises(ValidationError) as info:
        Settings(stt={"base_url": url})
    assert error_locations(info.value) == ["stt.base_url"]
    assert "must be a URL such as http://" in str(info.value)


def test_a_bad_stt_base_url_in_the_file_is_named(tmp_path: Path) -> None:
    message = config_error(tmp_path, '[stt]\nbase_url = "not a url"\n')
    assert "stt.base_url" in message
    assert "http://" in message


@pytest.mark.parametrize("value", [0, -1])
def test_max_bytes_must_be_positive(value: int) -> None:
    with pytest.raises(ValidationError) as info:
        Settings(media={"max_bytes": value})
    assert error_locations(info.value) == ["media.max_bytes"]


def test_a_bad_max_bytes_in_the_file_is_named(tmp_path: Path) -> None:
    message = config_error(tmp_path, "[media]\nmax_bytes = 0\n")
    assert "media.max_bytes" in message
    assert "greater than 0" in message


@pytest.mark.parametrize(("value", "ok"), [(0, True), (50, True), (-1, False), (51, False)])
def test_history_images_is_between_0_and_50(value: int, ok: bool) -> None:
    if ok:
        assert Settings(media={"history_images": value}).media.history_images == value
    else:
        with pytest.raises(ValidationError) as info:
            Settings(media={"history_images": value})
        assert error_locations(info.value) == ["media.history_images"]


@pytest.mark.parametrize("value", [0, -5])
def test_stt_timeout_must_be_positive(value: float) -> None:
    with pytest.raises(ValidationError) as info:
        Settings(stt={"timeout_s": value})
    assert error_locations(info.value) == ["stt.timeout_s"]


def test_an_unknown_key_in_media_or_stt_is_named(tmp_path: Path) -> None:
    message = config_error(tmp_path, "[media]\nmax_byte = 5\n[stt]\nurl = 'http://x'\n")
    assert "media.max_byte" in message and "stt.url" in message


def test_the_sections_are_read_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        "[media]\nmax_bytes = 1048576\nhistory_images = 2\npath = 'files'\n"
        "[stt]\nbase_url = 'http://127.0.0.1:9000/v1'\nmodel = 'small'\nlanguage = 'en'\ntimeout_s = 30\n",
        encoding="utf-8",
    )
    settings = load_settings(path)
    assert (settings.media.max_bytes, settings.media.history_images) == (1048576, 2)
    assert settings.media.path == tmp_path / "files"  # relative: from the config file's folder
    assert (settings.stt.base_url, settings.stt.model, settings.stt.language, settings.stt.timeout_s) == (
        "http://127.0.0.1:9000/v1",
        "small",
        "en",
        30.0,
    )


def test_the_stt_key_from_the_environment_is_redacted_in_the_printed_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BRIDGE_STT__API_KEY", SECRET)
    settings = load_settings()
    assert settings.stt.api_key.get_secret_value() == SECRET

    rendered = render_settings(settings)

    assert SECRET not in rendered
    assert f'api_key = "{REDACTED}"' in rendered.split("[stt]", 1)[1]


def test_the_stt_key_is_one_of_the_secrets_logs_hide() -> None:
    assert SECRET in set(secret_values(Settings(stt={"api_key": SECRET})))


def test_a_transcript_is_cut_at_20000_characters_unless_the_key_says_otherwise(tmp_path: Path) -> None:
    assert Settings().stt.max_transcript_chars == 20_000
    assert Settings(stt={"max_transcript_chars": 500}).stt.max_transcript_chars == 500
    message = config_error(tmp_path, "[stt]\nmax_transcript_chars = 10\n")
    assert "max_transcript_chars" in message and "100" in message
