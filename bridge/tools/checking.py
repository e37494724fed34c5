"""The one validation of a tool call's JSON arguments, and the words its error uses: against the
tool's pydantic model for built-in tools, against its JSON schema for manifest and MCP tools. It
knows nothing of Tool itself (bridge.tools.base asks it through Tool.check)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from pydantic import BaseModel, TypeAdapter, ValidationError
from referencing.exceptions import Unresolvable

from bridge.tools.result import ToolResult

# A pydantic error of this type carries a message written for the model ("must not be empty"); any
# other error is described from the field's JSON schema, the same words the model was shown.
SAID = "tool_argument"
# A shown value longer than this is cut: the model needs a reminder of what it sent, not a copy.
SHOWN_MAX = 40


# --- validation --------------------------------------------------------------------------------


def checked_arguments(
    name: str, model: type[BaseModel] | None, schema: dict[str, Any], raw: dict[str, Any]
) -> BaseModel | dict[str, Any] | ToolResult:
    """What the tool `name` receives for these JSON arguments, or the one invalid_arguments result
    instead (Tool.check asks with its own fields).

    A built-in tool gets an instance of its arguments `model`. A manifest tool gets the dict, checked
    against its JSON `schema` after the same lax readings ("5" for an integer, null for left out).
    """
    if model is not None:
        try:
            return model.model_validate(raw)
        except ValidationError as exc:
            problems = _model_problems(exc, schema, raw)
    else:
        try:
            args, problems = _schema_check(schema, raw)
        except Unresolvable as exc:
            # check_parameters refused these at load time; this is the net under it.
            return ToolResult.error("tool_failed", f"{name} has an unusable parameter schema: {exc}")
        if not problems:
            return args
    return ToolResult.error("invalid_arguments", f"Invalid arguments for {name}: {_join(problems)}.")


@dataclass(frozen=True, slots=True)
class _Problem:
    where: str  # 'limit', 'kinds[0]'; empty for the arguments object as a whole
    text: str  # "is required", "must be an integer ≥ 1 (got \"abc\")"


def _join(problems: list[_Problem]) -> str:
    seen: dict[str, str] = {}
    for problem in problems:
        # One complaint per top-level argument: the first is enough to fix it, and a short answer
        # is what a small model can act on.
        field = re.split(r"[.\[]", problem.where, maxsplit=1)[0]
        seen.setdefault(field, f"'{problem.where}' {problem.text}" if problem.where else problem.text)
    return "; ".join(seen.values())


def _model_problems(exc: ValidationError, schema: dict[str, Any], raw: Any) -> list[_Problem]:
    problems: list[_Problem] = []
    unknown = [str(e["loc"][-1]) for e in exc.errors() if e["type"] == "extra_forbidden" and e["loc"]]
    if unknown:
        # Named, with what the tool does take: a small model passing a result back as the next call's
        # arguments is told plainly, and the failure rule counts it (a stray key was ignored before).
        known = ", ".join(schema.get("properties", {})) or "no arguments"
        listed = ", ".join(f"'{key}'" for key in unknown)
        problems.append(
            _Problem("", f"unknown argument{'s' if len(unknown) > 1 else ''} {listed} (it takes: {known})")
        )
    for error in exc.errors():
        if error["type"] == "extra_forbidden":
            continue
        where, spec, value = _locate(schema, raw, error["loc"])
        if error["type"] == "missing":
            problems.append(_Problem(where, "is required"))
        elif error["type"] == SAID:
            problems.append(_Problem(where, f"{error['msg']} (got {_shown(value)})"))
        else:
            problems.append(_Problem(where, _mismatch(spec, value, error["msg"])))
    return problems


def _locate(schema: Any, raw: Any, loc: Sequence[int | str]) -> tuple[str, Any, Any]:
    """(display path, schema, value) at a pydantic error location, as deep as the schema goes."""
    where = ""
    for step in loc:
        if isinstance(step, str) and isinstance(schema, dict) and step in schema.get("properties", {}):
            schema = schema["properties"][step]
            raw = raw.get(step) if isinstance(raw, dict) else None
            where = f"{where}.{step}" if where else step
        elif isinstance(step, int) and isinstance(schema, dict) and "items" in schema:
            schema = schema["items"]
            raw = raw[step] if isinstance(raw, list) and step < len(raw) else None
            where = f"{where}[{step}]"
        else:
            # pydantic's own steps (union branches, validator names) have no place in the schema.
            break
    return where, schema, raw


def _schema_check(schema: dict[str, Any], raw: dict[str, Any]) -> tuple[dict[str, Any], list[_Problem]]:
    validator = validator_for(schema, default=Draft202012Validator)(schema)
    args = _loosened(validator, schema, raw)
    problems: list[_Problem] = []
    for error in validator.iter_errors(args):
        path = list(error.absolute_path)
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
        if error.validator == "required":
            have = error.instance if isinstance(error.instance, dict) else {}
            wanted = error.validator_value if isinstance(error.validator_value, list) else []
            for name in wanted:
                if name not in have:
                    problems.append(_Problem(f"{where}.{name}" if where else str(name), "is required"))
        elif where:
            problems.append(_Problem(where, _mismatch(error.schema, error.instance, error.message)))
        else:
            # About the object as a whole, e.g. additionalProperties: jsonschema's words name the key.
            problems.append(_Problem("", error.message))
    return args, problems


def _loosened(validator: Validator, schema: dict[str, Any], raw: dict[str, Any]) -> dict[str, Any]:
    """raw with the built-ins' lax readings applied to top-level values the schema would refuse."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return raw
    required = schema.get("required") or ()
    args: dict[str, Any] = {}
    for key, value in raw.items():
        spec = properties.get(key)
        if spec is None:
            args[key] = value
            continue
        check = validator.evolve(schema=spec)
        if check.is_valid(value):
            args[key] = value
        elif value is None and key not in required:
            continue
        else:
            args[key] = next((v for v in _lax_readings(value) if check.is_valid(v)), value)
    return args


# pydantic's lax readings, as the built-in tools get them, so "5" means 5 for every tool.
Lax = int | float | bool
_LAX_TYPES: tuple[TypeAdapter[Lax], ...] = (TypeAdapter(int), TypeAdapter(float), TypeAdapter(bool))


def _lax_readings(value: object) -> Iterator[Lax]:
    """The values a string may stand for, as pydantic's lax mode reads them: int, then float, then bool."""
    if not isinstance(value, str):
        return
    for adapter in _LAX_TYPES:
        try:
            yield adapter.validate_python(value)
        except ValidationError:
            continue


# --- describing what was expected --------------------------------------------------------------

_NOUNS = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "object": "an object",
    "array": "a list",
    "null": "null",
}
_PLURALS = {"string": "strings", "integer": "integers", "number": "numbers", "object": "objects"}


def _mismatch(spec: Any, value: Any, fallback: str) -> str:
    expected = _expected(spec)
    if expected is None:
        # A rule the schema words cannot say (a pattern, a custom check): the validator's own words.
        return f"is invalid: {fallback[:1].lower()}{fallback[1:]} (got {_shown(value)})"
    return f"must be {expected} (got {_shown(value)})"


def _expected(spec: Any) -> str | None:
    """What a JSON schema asks for, in a few words: "an integer ≥ 1", "one of: a, b"."""
    if not isinstance(spec, dict):
        return None
    if "const" in spec:
        return f"exactly {_plain(spec['const'])}"
    if isinstance(spec.get("enum"), list):
        return "one of: " + ", ".join(_plain(v) for v in spec["enum"])
    for key in ("anyOf", "oneOf"):
        if isinstance(spec.get(key), list):
            parts = [_expected(branch) for branch in spec[key]]
            return " or ".join(p for p in parts if p) if all(parts) else None
    kinds = spec.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    phrases = [_kind(str(kind), spec) for kind in kinds if kind is not None]
    return " or ".join(phrases) if phrases else None


def _kind(kind: str, spec: dict[str, Any]) -> str:
    noun = _NOUNS.get(kind, kind)
    if kind in ("integer", "number"):
        return " ".join([noun, *_bounds(spec)])
    if kind == "string":
        if spec.get("minLength") == 1 and "maxLength" not in spec:
            return "a non-empty string"
        if "maxLength" in spec:
            return f"a string of at most {spec['maxLength']} characters"
        if "pattern" in spec:
            return f"a string matching {spec['pattern']}"
    if kind == "array":
        items = spec.get("items")
        if isinstance(items, dict) and isinstance(items.get("enum"), list):
            return "a list of: " + ", ".join(_plain(v) for v in items["enum"])
        if isinstance(items, dict) and items.get("type") in _PLURALS:
            return f"a list of {_PLURALS[items['type']]}"
    return noun


def _bounds(spec: dict[str, Any]) -> list[str]:
    low, high = spec.get("minimum"), spec.get("maximum")
    if low is not None and high is not None:
        return [f"from {_plain(low)} to {_plain(high)}"]
    words = []
    if low is not None:
        words.append(f"≥ {_plain(low)}")
    if spec.get("exclusiveMinimum") is not None:
        words.append(f"> {_plain(spec['exclusiveMinimum'])}")
    if high is not None:
        words.append(f"≤ {_plain(high)}")
    if spec.get("exclusiveMaximum") is not None:
        words.append(f"< {_plain(spec['exclusiveMaximum'])}")
    return words


def _plain(value: Any) -> str:
    """A schema value as the model would write it, strings without quotes."""
    return value if isinstance(value, str) else json.dumps(value)


def _shown(value: Any) -> str:
    """What the model sent, as JSON, cut short."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= SHOWN_MAX else text[: SHOWN_MAX - 1] + "…"
