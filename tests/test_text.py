"""Tests for bridge.text: UTF-16 measuring and fence-aware message splitting."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bridge.text import MIN_LIMIT, split_message, utf16_len

# An independent reading of CommonMark fences, so the tests do not trust the module's own parser.
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")


def _open_fence_after(chunk: str) -> tuple[str, int] | None:
    """The fence (character, length) still open at the end of chunk, or None."""
    state: tuple[str, int] | None = None
    for line in chunk.split("\n"):
        match = _FENCE.fullmatch(line)
        if match is None:
            continue
        char, size, rest = match[1][0], len(match[1]), match[2]
        if state is None:
            if not (char == "`" and "`" in rest):
                state = (char, size)
        elif char == state[0] and size >= state[1] and not rest.strip():
            state = None
    return state


def _non_ws(text: str) -> str:
    return "".join(text.split())


def _rejoins(text: str, chunks: list[str]) -> bool:
    """Whether the chunks, minus added close/reopen fence lines, hold text's non-whitespace in order.

    Which fence lines were added is ambiguous once whitespace is gone, so every chunk may or may
    not drop its first line (if it is a fence line and not the first chunk) and its last line (if
    a fence line); the set of positions reachable in the original must include its end.
    """
    original = _non_ws(text)
    reachable = {0}
    for index, chunk in enumerate(chunks):
        lines = chunk.split("\n")
        content = _non_ws(chunk)
        heads = [""]
        if index > 0 and _FENCE.fullmatch(lines[0]):
            heads.append(_non_ws(lines[0]))
        tails = [""]
        if len(lines) > 1 and _FENCE.fullmatch(lines[-1]):
            tails.append(_non_ws(lines[-1]))
        middles = {content[len(head) : len(content) - len(tail)] for head in heads for tail in tails}
        reachable = {
            at + len(middle) for at in reachable for middle in middles if original.startswith(middle, at)
        }
        if not reachable:
            return False
    return len(original) in reachable


def _check_split(text: str, limit: int, measure: Callable[[str], int]) -> list[str]:
    chunks = split_message(text, limit, measure)
    if not text.strip():
        assert chunks == []
        return chunks
    if measure(text) <= limit:
        assert chunks == [text]
        return chunks
    # (Text over the limit only by leading/trailing whitespace comes back as one trimmed chunk.)
    assert chunks
    for chunk in chunks:
        assert chunk.strip(), chunks
        assert measure(chunk) <= limit, (chunk, measure(chunk))
        assert len(chunk) <= limit
        if measure is utf16_len:
            assert utf16_len(chunk) <= limit
        # A split never leaves a fence open; each chunk renders on its own.
        assert _open_fence_after(chunk) is None, chunk
        # No chunk starts or ends halfway through a surrogate pair.
        assert not "\udc00" <= chunk[0] <= "\udfff"
        assert not "\ud800" <= chunk[-1] <= "\udbff"
    assert _rejoins(text, chunks), chunks
    return chunks


# --- utf16_len -----------------------------------------------------------------------------------


def test_utf16_len_counts_astral_characters_twice() -> None:
    assert utf16_len("") == 0
    assert utf16_len("abc") == 3
    assert utf16_len("中文") == 2
    assert utf16_len("😀") == 2
    assert utf16_len("a😀b") == 4
    assert utf16_len("👍🏽") == 4  # thumbs up plus a skin-tone modifier, both astral


def test_utf16_len_accepts_surrogate_code_units() -> None:
    assert utf16_len("\ud83d\ude00") == 2


# --- examples ------------------------------------------------------------------------------------


def test_text_that_fits_is_returned_unchanged() -> None:
    text = "  hello\n\nworld  \n"
    assert split_message(text, 100) == [text]


def test_blank_text_gives_no_chunks() -> None:
    assert split_message("", 100) == []
    assert split_message(" \n\n\t ", 100) == []


def test_limit_below_minimum_is_rejected() -> None:
    with pytest.raises(ValueError, match="at least"):
        split_message("hello", MIN_LIMIT - 1)
    assert split_message("x" * 40, MIN_LIMIT) == ["x" * 16, "x" * 16, "x" * 8]


def test_paragraph_boundary_is_preferred_over_line_boundary() -> None:
    first = "\n".join(["alpha beta gamma delta"] * 3)
    second = "\n".join(["epsilon zeta eta theta"] * 3)
    text = f"{first}\n\n{second}"
    # A line cut would fit four lines into the first chunk; the blank line wins.
    chunks = split_message(text, 100)
    assert chunks == [first, second]


def test_line_boundary_is_preferred_over_whitespace() -> None:
    text = "one two three four five\nsix seven eight nine ten eleven"
    assert split_message(text, 40) == ["one two three four five", "six seven eight nine ten eleven"]


def test_whitespace_is_preferred_over_a_hard_cut() -> None:
    words = " ".join(f"word{i}" for i in range(40))
    chunks = split_message(words, 50)
    assert all(re.fullmatch(r"(word\d+ )*word\d+", chunk) for chunk in chunks)
    assert " ".join(chunks) == words


def test_an_early_blank_line_does_not_make_a_tiny_first_chunk() -> None:
    text = "Intro:\n\n" + "\n".join(f"line {i}" for i in range(30))
    chunks = split_message(text, 100)
    assert chunks[0].startswith("Intro:\n\nline 0\n")
    assert len(chunks[0]) > 50


def test_long_code_block_is_closed_and_reopened_in_every_chunk() -> None:
    body = "".join(f"print('line {i}')\n" for i in range(200))
    text = f"Here you go:\n\n```python\n{body}```\n\nDone."
    chunks = _check_split(text, 500, len)
    assert len(chunks) > 3
    inner = chunks[1:-1]
    assert inner
    for chunk in inner:
        assert chunk.startswith("```python\n")
        assert chunk.endswith("\n```")
    assert chunks[0].startswith("Here you go:")
    assert chunks[0].endswith("\n```")
    assert chunks[-1].startswith("```python\n")
    assert chunks[-1].endswith("Done.")
    # Code lines are never broken: each chunk holds whole lines of the original.
    lines = [line for chunk in chunks for line in chunk.split("\n") if line.startswith("print")]
    assert lines == [f"print('line {i}')" for i in range(200)]


def test_tilde_fence_is_reopened_with_tildes() -> None:
    text = "~~~~ text\n" + "```\n" * 30 + "~~~~"
    chunks = _check_split(text, 40, len)
    # The ``` lines are content of the ~~~~ block, so they must not close anything.
    for chunk in chunks:
        assert chunk.startswith("~~~~")
        assert chunk.endswith("~~~~")


def test_unclosed_fence_is_closed_in_the_last_chunk_of_a_split() -> None:
    text = "```\n" + "x = 1\n" * 20
    chunks = _check_split(text, 50, len)
    assert chunks[-1].endswith("\n```")


def test_emoji_heavy_text_is_measured_in_utf16_units() -> None:
    text = "😀" * 3000
    assert split_message(text, 4096) == [text]  # 3000 code points fit by len
    chunks = _check_split(text, 4096, utf16_len)
    assert [utf16_len(chunk) for chunk in chunks] == [4096, 1904]
    assert "".join(chunks) == text


def test_mixed_emoji_text_never_exceeds_the_utf16_budget() -> None:
    text = " ".join(["héllo 😀👍🏽 世界"] * 400)
    chunks = _check_split(text, 4096, utf16_len)
    assert all(utf16_len(chunk) <= 4096 for chunk in chunks)


def test_skin_tone_sequence_is_not_separated_when_avoidable() -> None:
    text = "👍🏽" * 30
    chunks = _check_split(text, 17, utf16_len)
    assert all(not chunk.startswith("🏽") for chunk in chunks)


def test_surrogate_pairs_held_as_code_units_are_not_cut() -> None:
    pair = "\ud83d\ude00"
    text = "a" + pair * 40
    chunks = _check_split(text, 17, utf16_len)
    assert "".join(chunks) == text


def test_a_single_huge_word_is_hard_cut() -> None:
    word = "x" * 10_000
    chunks = _check_split(word, 2000, len)
    assert chunks == ["x" * 2000] * 5


def test_hard_cut_respects_the_utf16_budget_with_an_odd_limit() -> None:
    chunks = _check_split("😀" * 50, 17, utf16_len)
    assert all(utf16_len(chunk) == 16 for chunk in chunks[:-1])


def test_cut_does_not_turn_inline_backticks_into_a_fence() -> None:
    text = "see the value ```x``` here and there and everywhere"
    chunks = _check_split(text, 20, len)
    assert not any(chunk.startswith("```") for chunk in chunks)


def test_over_long_backtick_run_still_splits_into_balanced_chunks() -> None:
    _check_split("`" * 40, MIN_LIMIT, len)
    _check_split("a" + "`" * 40 + "b", MIN_LIMIT, len)


def test_indentation_of_the_next_line_is_kept() -> None:
    text = "- item one\n" + "\n".join(f"    - nested {i}" for i in range(10))
    chunks = _check_split(text, 60, len)
    assert chunks[1].startswith("    - nested")


# --- properties ----------------------------------------------------------------------------------

_SPECIAL = [*"\n\n  ``~#*-\t", "```", "~~~", "😀", "👍🏽", "中文", "é", "\u200d"]
# st.text only takes single characters; a list of pieces lets multi-character runs like ``` and
# emoji sequences appear often enough to matter.
_mixed_text = st.lists(
    st.one_of(st.sampled_from(list("abcxyz0")), st.sampled_from(_SPECIAL), st.characters()), max_size=200
).map("".join)
_limits = st.integers(min_value=MIN_LIMIT, max_value=120)
_measures = st.sampled_from([len, utf16_len])

_words = st.text(alphabet=st.sampled_from([*"abcdefgh😀中é*_` "]), min_size=1, max_size=12)
_prose_line = st.lists(_words, min_size=1, max_size=12).map(" ".join)
_paragraph = st.lists(_prose_line, min_size=1, max_size=4).map("\n".join)
_code_line = st.text(alphabet=st.sampled_from(list("ab(){}=;  \t`~😀")), max_size=40)
_fence = st.sampled_from(["```", "````", "~~~", "~~~~~"])


@st.composite
def _code_block(draw: st.DrawFn) -> str:
    fence = draw(_fence)
    info = draw(st.sampled_from(["", "python", "js", " rust", "c++ title=x"]))
    body = "\n".join(draw(st.lists(_code_line, max_size=15)))
    closed = draw(st.booleans()) or draw(st.booleans())
    return f"{fence}{info}\n{body}\n{fence}" if closed else f"{fence}{info}\n{body}"


_list_block = st.lists(_prose_line.map(lambda line: f"- {line}"), min_size=1, max_size=5).map("\n".join)
_markdown = st.lists(st.one_of(_paragraph, _code_block(), _list_block), min_size=1, max_size=8).flatmap(
    lambda blocks: st.lists(st.sampled_from(["\n\n", "\n"]), min_size=len(blocks), max_size=len(blocks)).map(
        lambda seps: "".join(block + sep for block, sep in zip(blocks, seps, strict=True))
    )
)


@settings(max_examples=300, deadline=None)
@given(text=_mixed_text, limit=_limits, measure=_measures)
@example(text="`" * 7 + "\n" + "x" * 30, limit=MIN_LIMIT, measure=len)
@example(text="~~~ " + "info" * 10 + "\ncode\n~~~", limit=MIN_LIMIT, measure=utf16_len)
@example(text="a ~~~ ~~~~ b\n" * 5, limit=MIN_LIMIT, measure=len)
def test_split_properties_on_arbitrary_text(text: str, limit: int, measure: Callable[[str], int]) -> None:
    _check_split(text, limit, measure)


@settings(max_examples=300, deadline=None)
@given(text=_markdown, limit=_limits, measure=_measures)
def test_split_properties_on_markdown(text: str, limit: int, measure: Callable[[str], int]) -> None:
    _check_split(text, limit, measure)


@settings(max_examples=50, deadline=None)
@given(text=_markdown, measure=_measures)
def test_split_at_platform_limits(text: str, measure: Callable[[str], int]) -> None:
    _check_split(text * 40, 2000, measure)
