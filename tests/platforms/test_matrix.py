"""docs/platforms.md's matrix is the one the conformance suite's rigs declare, so it can't drift."""

from __future__ import annotations

from tests.platforms.matrix import PAGE, in_page, render


def test_the_docs_platform_matrix_is_the_one_the_suite_declares_and_tests() -> None:
    # Out of date: python -m tests.platforms.matrix --write
    assert in_page(PAGE.read_text(encoding="utf-8")) == render()
