"""A webhook's prompt template: its placeholders, one-pass rendering, refused names and body lookups."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bridge.tasks.template import NAMES, lookup, problem, render

BODY: dict[str, Any] = {
    "ref": "refs/heads/main",
    "release": {"id": 42, "name": "v1.2", "draft": False},
    "items": [{"name": "first"}, {"name": "second"}],
    "author": "Zoë",
}


def rendered(text: str, body: Any = BODY, *, hook: str = "deploys", event_id: str = "ev-7") -> str:
    return render(text, body=body, hook=hook, event_id=event_id)


# -- rendering ---------------------------------------------------------------------------------


def test_hook_and_event_id_render_as_the_hook_name_and_the_event_id() -> None:
    assert rendered("{{hook}} / {{event_id}}") == "deploys / ev-7"


def test_a_body_field_renders_its_text_and_a_nested_field_follows_the_dots() -> None:
    assert rendered("Pushed {{body.ref}} as {{body.release.name}}") == "Pushed refs/heads/main as v1.2"


def test_a_list_item_is_reached_by_its_number_and_the_path_goes_on_inside_it() -> None:
    assert rendered("{{body.items.0.name}}, then {{body.items.1.name}}") == "first, then second"


def test_a_field_the_body_lacks_renders_empty_whatever_stops_the_path() -> None:
    text = "[{{body.missing}}|{{body.release.missing}}|{{body.items.2.name}}|{{body.ref.deeper}}]"
    assert rendered(text) == "[|||]"


def test_whitespace_inside_the_braces_is_ignored() -> None:
    assert rendered("{{ hook }}:{{  body.release.id\t}}:{{\nevent_id }}") == "deploys:42:ev-7"


def test_numbers_booleans_and_null_render_as_json_and_null_as_nothing() -> None:
    body = {"n": 3, "x": 1.5, "yes": True, "no": False, "none": None}
    assert rendered("{{body.n}} {{body.x}} {{body.yes}} {{body.no}} [{{body.none}}]", body) == (
        "3 1.5 true false []"
    )


def test_an_object_or_list_field_renders_as_compact_json() -> None:
    assert rendered("{{body.release}}") == '{"id": 42, "name": "v1.2", "draft": false}'
    assert rendered("{{body.items}}") == '[{"name": "first"}, {"name": "second"}]'


def test_the_whole_body_renders_as_pretty_json_that_keeps_non_ascii_text() -> None:
    text = rendered("Event:\n{{body}}")
    assert text == "Event:\n" + json.dumps(BODY, ensure_ascii=False, indent=2)
    assert "Zoë" in text and "\\u" not in text
    assert json.loads(text.removeprefix("Event:\n")) == BODY


def test_a_body_that_is_a_string_renders_as_that_string_and_a_missing_body_as_nothing() -> None:
    assert rendered("<{{body}}>", "plain text") == "<plain text>"
    assert rendered("<{{body}}>", None) == "<>"
    assert rendered("<{{body.a}}>", None) == "<>"


def test_a_body_that_is_a_list_is_indexed_from_the_top() -> None:
    assert rendered("{{body.1}}", ["a", "b"]) == "b"


def test_text_outside_placeholders_is_kept_as_written_even_lone_braces() -> None:
    text = "{ not } {{ nor this } {body} {{{body.release.id}}}"
    assert rendered(text) == "{ not } {{ nor this } {body} {42}"


def test_rendering_is_one_pass_so_placeholders_inside_body_values_stay_as_text() -> None:
    body = {"title": "{{hook}} {{event_id}} {{body.secret}}", "secret": "s3cret"}
    assert rendered("{{body.title}}", body) == "{{hook}} {{event_id}} {{body.secret}}"
    # The same in the whole body: its values are data, never expanded.
    whole = rendered("{{body}}", body)
    assert "{{hook}}" in whole and "deploys" not in whole
    # And a hook name or event id that looks like a placeholder is not expanded either.
    assert rendered("{{event_id}}", body, event_id="{{body.secret}}") == "{{body.secret}}"


def test_a_dunder_path_is_a_dict_lookup_and_never_reaches_python_attributes() -> None:
    assert problem("{{ body.__class__ }}") is None
    assert rendered("[{{ body.__class__ }}]") == "[]"
    assert rendered("[{{body.__class__.__name__}}]") == "[]"
    assert rendered("[{{body.ref.__len__}}|{{body.items.__class__}}]") == "[|]"
    # A key of that name in the body is an ordinary field.
    assert rendered("{{body.__class__}}", {"__class__": "just data"}) == "just data"


def test_a_placeholder_that_slipped_past_the_check_is_left_as_written() -> None:
    assert rendered("a {{x}} b {{ hook.x }}") == "a {{x}} b {{ hook.x }}"


# -- problem() ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "template",
    [
        "{{body}}",
        "{{ body }}",
        "{{body.a.b}}",
        "{{body.items.0.name}}",
        "{{body.snake_case-and-dash}}",
        "{{hook}} {{event_id}}",
        "{{ body.__class__ }}",
        "no placeholders at all",
        "{ single } and {{ unclosed",
    ],
)
def test_the_known_placeholders_and_plain_text_pass_the_check(template: str) -> None:
    assert problem(template) is None


@pytest.mark.parametrize(
    "placeholder",
    [
        "{{x}}",
        "{{hook.x}}",
        "{{event_id.x}}",
        "{{Body}}",
        "{{body.}}",
        "{{body..a}}",
        "{{body.a b}}",
        "{{ body .a }}",
        "{{body[0]}}",
        "{{body.a.0()}}",
        "{{}}",
        "{{ }}",
    ],
)
def test_an_unknown_placeholder_is_refused_naming_it_and_the_known_ones(placeholder: str) -> None:
    found = problem(f"Hello {{{{hook}}}}, {placeholder} and more")
    assert found == f"{placeholder} is not a placeholder; there are {NAMES}"


def test_the_first_bad_placeholder_is_the_one_named() -> None:
    found = problem("{{hook}} {{first}} {{second}}")
    assert found is not None and found.startswith("{{first}} is not a placeholder")


# -- lookup() ----------------------------------------------------------------------------------


def test_lookup_follows_dict_keys_and_list_numbers() -> None:
    assert lookup(BODY, "release.id") == 42
    assert lookup(BODY, "items.1") == {"name": "second"}
    assert lookup(BODY, "items.1.name") == "second"
    assert lookup([[1, 2], [3, 4]], "1.0") == 3


def test_lookup_keeps_falsy_values_apart_from_absent_ones() -> None:
    body = {"zero": 0, "empty": "", "no": False, "none": None, "list": []}
    assert lookup(body, "zero") == 0
    assert lookup(body, "empty") == ""
    assert lookup(body, "no") is False
    assert lookup(body, "list") == []
    assert lookup(body, "none") is None
    assert lookup(body, "absent") is None


@pytest.mark.parametrize(
    ("value", "path"),
    [
        (BODY, "items.2"),  # past the end
        (BODY, "items.-1"),  # no counting from the end
        (BODY, "items.name"),  # a list takes numbers only
        (BODY, "ref.0"),  # a string is no list
        (BODY, "release.id.x"),  # nor is a number a dict
        ("text", "upper"),  # and a string has no fields, methods least of all
        (None, "a"),
        (42, "real"),
        (BODY, "release.__class__"),
    ],
)
def test_lookup_finds_none_where_the_path_leads_nowhere(value: Any, path: str) -> None:
    assert lookup(value, path) is None


def test_lookup_reads_a_number_with_leading_zeros_as_that_index() -> None:
    assert lookup(["a", "b"], "01") == "b"


def test_lookup_matches_keys_exactly_including_an_empty_one() -> None:
    assert lookup({"": "blank", "A": 1}, "") == "blank"
    assert lookup({"A": 1}, "a") is None
    # A dict whose keys are numbers written as text is looked up by key, not by position.
    assert lookup({"1": "one", "0": "zero"}, "1") == "one"
