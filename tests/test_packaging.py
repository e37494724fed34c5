"""pyproject.toml: metadata that today's setuptools reads without deprecation warnings."""

from __future__ import annotations

import tomllib
from pathlib import Path

PYPROJECT = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_license_is_an_spdx_expression() -> None:
    # A { text = ... } table makes setuptools print a page of warnings on every install, and it is
    # an error for builds after 2027-02-18.
    assert PYPROJECT["project"]["license"] == "MIT"


def test_the_build_asks_for_a_setuptools_that_reads_spdx_expressions() -> None:
    # setuptools 77 is the first to accept a license string (PEP 639); older ones reject it.
    assert PYPROJECT["build-system"]["requires"] == ["setuptools>=77"]
