"""The exception tree: one root, its drawing kept true, each error's words for the chat and the operator."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import bridge.errors as errors
from bridge.cli.exits import EXIT_CONFIG, EXIT_RUNTIME, fail
from bridge.errors import (
    BlockedAddressError,
    BridgeError,
    ConfigError,
    IntakeUnavailable,
    ProviderError,
    SessionKeyError,
    StoreError,
)
from tests.harness import make_settings

CLASSES = [
    cls
    for _, cls in inspect.getmembers(errors, inspect.isclass)
    if issubclass(cls, Exception) and cls.__module__ == errors.__name__
]


def test_every_error_bridge_raises_on_purpose_is_a_bridge_error() -> None:
    assert len(CLASSES) >= 14
    assert all(issubclass(cls, BridgeError) for cls in CLASSES)


def test_the_tree_drawn_in_the_module_docstring_names_every_class_under_its_parent() -> None:
    drawing = errors.__doc__ or ""
    depth: dict[str, int] = {}
    for line in drawing.splitlines():
        for cls in CLASSES:
            marker = line.find(f"── {cls.__name__} ")
            if marker >= 0 or line.strip().startswith(f"{cls.__name__} "):
                depth[cls.__name__] = marker
    assert sorted(depth) == sorted(cls.__name__ for cls in CLASSES)
    for cls in CLASSES:
        if cls is not BridgeError:
            # Drawn one level deeper than the class it derives from within the tree.
            parent = next(base for base in cls.__mro__[1:] if base in CLASSES)
            assert depth[cls.__name__] > depth[parent.__name__], cls.__name__


def test_the_remedy_follows_the_message_for_the_log_and_the_cli() -> None:
    error = StoreError("database x.db is full", remedy="free some disk space")
    assert error.for_log() == "database x.db is full; free some disk space"
    assert ConfigError("owners: not a list").for_log() == "owners: not a list"
    assert IntakeUnavailable().for_log() == "IntakeUnavailable"


def test_only_what_is_fit_for_a_chat_is_a_user_message() -> None:
    assert StoreError("database /srv/bot.db is locked").user_message is None
    provider = ProviderError("The model server kept failing (HTTP 500).", detail="<html>trace</html>")
    assert provider.user_message == "The model server kept failing (HTTP 500)."
    assert BlockedAddressError("10.0.0.1", "10.0.0.1").remedy is not None


def test_errors_that_were_value_errors_still_are() -> None:
    # Callers (and pydantic validators) that catch ValueError keep working.
    assert issubclass(SessionKeyError, ValueError) and issubclass(errors.ManifestError, ValueError)


def test_the_cli_prints_an_error_on_one_line_with_its_remedy_and_secrets_masked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = make_settings(tmp_path, "http://127.0.0.1:9/v1", telegram={"token": "123:SECRET-TOKEN"})
    error = StoreError("cannot open https://api.telegram.org/bot123:SECRET-TOKEN", remedy="check the path")
    assert fail(error, settings) == EXIT_RUNTIME
    printed = capsys.readouterr().err
    assert printed.startswith("bridge: storage error: cannot open ")
    assert printed.endswith("; check the path\n") and printed.count("\n") == 1
    assert "SECRET-TOKEN" not in printed


def test_a_config_error_exits_with_the_config_status(capsys: pytest.CaptureFixture[str]) -> None:
    assert fail(ConfigError("llm.model: must not be empty")) == EXIT_CONFIG
    assert capsys.readouterr().err == "bridge: config error:\nllm.model: must not be empty\n"
