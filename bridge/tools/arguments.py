"""Tool arguments as types: the lax coercions, the trimmed JSON schemas and the one validation of a call."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    model_validator,
)
from pydantic_core import CoreSchema, PydanticCustomError, PydanticUseDefault, core_schema
from referencing.exceptions import Unresolvable

from bridge.errors import ManifestError
from bridge.tools.base import Tool, ToolContext, ToolResult
from bridge.tools.checking import SAID

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
        raise PydanticCustomError(SAID, "must not be empty")
    return value


def _path(value: str) -> str:
    # Not stripped: a file name may start or end with a space.
    if not value:
        raise PydanticCustomError(SAID, "must not be empty")
    # The OS would raise ValueError deep inside resolve(); say it plainly instead.
    if "\x00" in value:
        raise PydanticCustomError(SAID, "must not contain a NUL byte")
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

    Unknown keys are an error that names them: a small model that passes a result back as the next
    call's arguments (get_current_time({"iso": …})) ran 12 calls to max_iterations when they were
    ignored, each call different and each a success.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

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
    plain: Callable[[str], str | None] | None = None,
) -> Tool:
    """A tool whose arguments are `arguments`: its schema is made from the model, `run` gets an instance."""
    return Tool(name, description, arguments_schema(arguments), run, timeout_s, arguments, plain=plain)


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


def validate_arguments(tool: Tool, raw: dict[str, Any]) -> BaseModel | dict[str, Any] | ToolResult:
    """What tool.run receives for these JSON arguments, or the one invalid_arguments result instead
    (bridge.tools.checking does the checking)."""
    return tool.check(raw)
