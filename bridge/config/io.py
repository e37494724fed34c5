"""Config in and out: TOML and environment into Settings naming any bad key, Settings out as redacted TOML."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any, get_origin

from pydantic import BaseModel, SecretStr, ValidationError
from pydantic_settings import SettingsError

from bridge.config.base import REDACTED, mask_url, relative_to
from bridge.config.llm import LLMProfile
from bridge.config.settings import Settings
from bridge.errors import ConfigError

DEFAULT_CONFIG_PATH = Path("config.toml")


def resolve_config_path(path: Path | None) -> Path | None:
    """--config PATH if given, else ./config.toml if present, else None (defaults)."""
    if path is not None:
        return path
    return DEFAULT_CONFIG_PATH if DEFAULT_CONFIG_PATH.is_file() else None


def load_settings(path: Path | None = None) -> Settings:
    """Read the effective settings, raising ConfigError that names the bad key and why."""
    path = resolve_config_path(path)
    if path is None:
        return settings_from_toml("", None)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); "
            "save the file as UTF-8"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    return settings_from_toml(text, path)


def settings_from_toml(text: str, path: Path | None) -> Settings:
    """The settings a config file's text (and the environment) make; ConfigError naming the bad key
    and why. One check for every way a config arrives: a start, a reload, check-config, the editor.
    A relative path in it (or in a BRIDGE_* variable) is taken from the file's folder, not the working
    directory (bridge.config.base.rebase); with no file, from the working directory."""
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path or 'config'}: invalid TOML: {exc}") from None
    try:
        with relative_to(path):
            return Settings(**data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, path)) from None
    except SettingsError:
        # pydantic-settings could not JSON-decode a list or table given in an environment variable.
        raise ConfigError(_describe_env_json()) from None


def _describe_env_json() -> str:
    bad = []
    for name, value in os.environ.items():
        parts = name.lower().removeprefix("bridge_").split("__") if name.lower().startswith("bridge_") else []
        if parts and _is_complex(parts):
            try:
                json.loads(value)
            except ValueError:
                bad.append(name)
    names = ", ".join(sorted(bad)) or "a BRIDGE_* environment variable"
    return (
        f"{names}: not valid JSON; lists and tables in environment variables are written as JSON, "
        "e.g. BRIDGE_OWNERS='[\"telegram:42\"]' or BRIDGE_TOOLS__TIMEOUTS='{\"webfetch\": 20}'"
    )


def _is_complex(parts: list[str]) -> bool:
    """True when the setting at this path is a list, a table or a whole section (given as JSON)."""
    annotation: Any = Settings
    for part in parts:
        fields = (
            annotation.model_fields
            if isinstance(annotation, type) and issubclass(annotation, BaseModel)
            else {}
        )
        if part not in fields:
            return False
        annotation = fields[part].annotation
    return get_origin(annotation) in (list, dict) or (
        isinstance(annotation, type) and issubclass(annotation, BaseModel)
    )


def _describe(exc: ValidationError, path: Path | None) -> str:
    env = {name.upper() for name in os.environ}
    lines = []
    for err in exc.errors():
        parts = [str(part) for part in err["loc"]]
        key = "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in parts).lstrip(".") or "(root)"
        reason = (
            "unknown key" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        )
        # Blame the variable when the environment supplied the value: the file may be fine.
        variables = [_env_name(parts[:n]) for n in range(len(parts), 0, -1)]
        variable = next((v for v in variables if v in env), None)
        where = f"environment variable {variable}" if variable else str(path or "configuration")
        lines.append(f"{where}: {key}: {reason}")
    return "\n".join(lines)


def _env_name(parts: list[str]) -> str:
    return "BRIDGE_" + "__".join(parts).upper()


def render_settings(settings: Settings) -> str:
    """The effective settings as TOML, with every secret (and any user and password in a URL) redacted."""
    top: list[str] = []
    sections: list[str] = []
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if isinstance(value, BaseModel):
            sections.extend(_render_section(name, value))
        else:
            top.append(f"{name} = {_toml_value(value)}")
    return "\n".join(top) + "\n\n" + "\n\n".join(sections) + "\n"


def _render_section(name: str, section: BaseModel) -> list[str]:
    """[name] with its keys, then a [name.sub] table for each nested section."""
    lines = [f"[{name}]"]
    nested: list[str] = []
    for sub_name in type(section).model_fields:
        sub = getattr(section, sub_name)
        if isinstance(sub, BaseModel):
            nested.extend(_render_section(f"{name}.{sub_name}", sub))
        elif isinstance(sub, dict) and sub and all(isinstance(v, BaseModel) for v in sub.values()):
            # A table of sections ([llm.profiles.NAME]), each a table of its own, as it is written.
            for key, item in sub.items():
                nested.extend(_render_section(f"{name}.{sub_name}.{key}", item))
        elif sub is None:
            # A profile's unset keys are not unset: they say nothing, and [llm] decides (see below).
            if not isinstance(section, LLMProfile):
                lines.append(f"# {sub_name} is unset")
        else:
            lines.append(f"{sub_name} = {_toml_value(sub)}")
    # A table whose other keys are named tables ([agents.NAME]): each rendered as it is written.
    for key, item in (section.model_extra or {}).items():
        if isinstance(item, BaseModel):
            nested.extend(_render_section(f"{name}.{key}", item))
    if isinstance(section, LLMProfile):
        lines.insert(1, "# keys not shown come from [llm] (its key only when the server is the same)")
    # A section holding only sub-tables (e.g. [session]) needs no header of its own.
    return ["\n".join(lines), *nested] if len(lines) > 1 else nested


def _toml_value(value: Any) -> str:
    if isinstance(value, SecretStr):
        return _toml_value(REDACTED if value.get_secret_value() else "")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Path):
        return _toml_value(str(value))
    if isinstance(value, str):
        # A JSON string is a valid TOML basic string (same escapes), except that TOML also forbids
        # a raw DEL character, which JSON leaves unescaped.
        return json.dumps(mask_url(value), ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, BaseModel):
        # An inline table of the fields that are set, e.g. a send-policy rule.
        return _toml_value({k: v for k, v in value if v is not None})
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot render {type(value).__name__} as TOML")
