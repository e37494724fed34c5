"""Tool arguments as types: the lax coercions, the trimmed JSON schemas and the one validation of a call."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic_core import CoreSchema, PydanticCustomError, PydanticUseDefault, core_schema
from referencing.exceptions import Unresolvable

from bridge.errors import ManifestError
from bridge.tools.base import Tool, ToolContext, ToolResult

__all__ = [
    "Arguments",
    "Count",
    "NonNegative",
    "PathText",
    "Positive",
    "Seconds",
    "Text",
    "arguments_schema",
    "check_parameters",
    "typed_tool",
    "validate_arguments",
]

A = TypeVar("A", bound=BaseModel)

# A pydantic error of this type carries a message written for the model ("must not be empty"); any
# other error is described from the field's JSON schema, the same words the model was shown.
_SAID = "tool_argument"
# A shown value longer than this is cut: the model needs a reminder of what it sent, not a copy.
SHOWN_MAX = 40


# --- the lax types -----------------------------------------------------------------------------
# Small local models send "5" for 5, "true" for true and null for "left out". pydantic's lax mode
# already reads numeric strings as numbers and "true"/"false"/"yes"/"no"/1/0 as booleans, so a plain
# `bool` field is the lenient bool; what it lacks is below.


def _not_a_bool(value: object) -> object:
    # bool is an int subclass and lax mode reads true as 1, but a count or a position is never yes/no.
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number")
    return value


def _non_blank(value: str) -> str:
    value = value.strip()
    if not value:
        raise PydanticCustomError(_SAID, "must not be empty")
    return value


def _path(value: str) -> str:
    # Not stripped: a file name may start or end with a space.
    if not value:
        raise PydanticCustomError(_SAID, "must not be empty")
    # The OS would raise ValueError deep inside resolve(); say it plainly instead.
    if "\x00" in value:
        raise PydanticCustomError(_SAID, "must not contain a NUL byte")
    return value


# The bound comes before the bool check: pydantic writes it into the schema as "minimum" only
# while it sits directly on the int; outside the check it would be a bare, non-standard "ge".
NonNegative = Annotated[int, Field(ge=0), BeforeValidator(_not_a_bool)]
"""An integer ≥ 0; "7" reads as 7, true is refused."""
Positive = Annotated[int, Field(ge=1), BeforeValidator(_not_a_bool)]
"""An integer ≥ 1; "7" reads as 7, true is refused."""
Seconds = Annotated[float, Field(ge=0), BeforeValidator(_not_a_bool)]
"""A number of seconds ≥ 0; "2.5" reads as 2.5, true is refused."""
Text = Annotated[str, AfterValidator(_non_blank)]
"""A string with its surrounding whitespace stripped, refused when nothing is left."""
PathText = Annotated[str, AfterValidator(_path)]
"""A path as given (not stripped): not empty and without NUL bytes."""


@dataclass(frozen=True, slots=True)
class Count:
    """`Annotated[int, Count(low, high)] = default`: a count the model may get wrong without harm.

    A number (or numeric string) is truncated and forced into [low, high]; anything unreadable
    gives the field's default. Any count is better than an error for "how many rows", and small
    models ask for 1000 rows or "all".
    """

    low: int = 1
    high: int | None = None

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_before_validator_function(self.clamp, handler(source))

    def clamp(self, value: object) -> int:
        number = _reading(value)
        if number is None:
            raise PydanticUseDefault()
        count = max(self.low, int(number))
        return count if self.high is None else min(self.high, count)


def _reading(value: object) -> float | None:
    """The finite number a model meant by value, or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, int):
        # Before isfinite, which overflows on an int too big for a float.
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    return None


class Arguments(BaseModel):
    """The base of every built-in tool's arguments model.

    Unknown keys are ignored, as they always were: a stray key is no reason to refuse a call.
    """

    model_config = ConfigDict(frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_left_out(cls, data: Any) -> Any:
        # Small models send `"limit": null` for an argument they mean to leave out; for a required
        # one that then reads as missing, which is what it is.
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data


# --- schemas -----------------------------------------------------------------------------------

# pydantic's words that tell the model nothing: titles repeat the name, defaults are in descriptions.
_NOISE = frozenset({"title", "default"})


def arguments_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema the model is sent for `model`: no titles or defaults, $defs inlined."""
    raw = model.model_json_schema()
    defs: dict[str, Any] = raw.get("$defs", {})
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {name: _tidy(spec, defs) for name, spec in raw.get("properties", {}).items()},
    }
    if raw.get("required"):
        schema["required"] = list(raw["required"])
    return schema


def _tidy(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_tidy(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        # Local refs only: pydantic writes "#/$defs/Name" for enums and nested models.
        target = defs[str(node["$ref"]).rsplit("/", 1)[-1]]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    branches = node.get("anyOf")
    if isinstance(branches, list):
        # `X | None = None` is pydantic's way to say "optional"; the schema's `required` says that.
        kept = [b for b in branches if b != {"type": "null"}]
        if len(kept) == 1:
            node = {**{k: v for k, v in node.items() if k != "anyOf"}, **kept[0]}
        else:
            node = {**node, "anyOf": kept}
    out: dict[str, Any] = {}
    # type first and description last, like hand-written schemas; an easier read for small models.
    for key in ("type", *sorted(node, key=lambda k: k == "description")):
        if key in node and key not in _NOISE and key not in out:
            value = node[key]
            if key == "properties" and isinstance(value, dict):
                out[key] = {name: _tidy(spec, defs) for name, spec in value.items()}
            else:
                out[key] = _tidy(value, defs)
    return out


def typed_tool(
    name: str,
    description: str,
    arguments: type[A],
    run: Callable[[A, ToolContext], Awaitable[ToolResult]],
    *,
    timeout_s: float | None = None,
) -> Tool:
    """A tool whose arguments are `arguments`: its schema is made from the model, `run` gets an instance."""
    return Tool(name, description, arguments_schema(arguments), run, timeout_s, arguments)


def check_parameters(schema: dict[str, Any]) -> None:
    """Raise ManifestError unless `schema` is a valid JSON schema whose $refs all resolve."""
    cls = validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        where = "".join(f"[{p!r}]" for p in exc.absolute_path)
        raise ManifestError(f"{exc.message}{f' (at {where})' if where else ''}") from None
    validator = cls(schema)
    for ref in _refs(schema):
        try:
            validator.evolve(schema={"$ref": ref}).is_valid(None)
        except Unresolvable as exc:
            raise ManifestError(f"$ref {ref!r} cannot be resolved: {exc}") from None


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


# --- validation --------------------------------------------------------------------------------


def validate_arguments(tool: Tool, raw: dict[str, Any]) -> BaseModel | dict[str, Any] | ToolResult:
    """What tool.run receives for these JSON arguments, or the one invalid_arguments result instead.

    A built-in tool gets an instance of its `arguments` model. A manifest tool gets the dict, checked
    against its JSON schema after the same lax readings ("5" for an integer, null for left out).
    """
    if tool.arguments is not None:
        try:
            return tool.arguments.model_validate(raw)
        except ValidationError as exc:
            problems = _model_problems(exc, tool.parameters, raw)
    else:
        try:
            args, problems = _schema_check(tool.parameters, raw)
        except Unresolvable as exc:
            # check_parameters refused these at load time; this is the net under it.
            return ToolResult.error("tool_failed", f"{tool.name} has an unusable parameter schema: {exc}")
        if not problems:
            return args
    return ToolResult.error("invalid_arguments", f"Invalid arguments for {tool.name}: {_join(problems)}.")


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
    for error in exc.errors():
        where, spec, value = _locate(schema, raw, error["loc"])
        if error["type"] == "missing":
            problems.append(_Problem(where, "is required"))
        elif error["type"] == _SAID:
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
