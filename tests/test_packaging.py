"""pyproject.toml: metadata that today's setuptools reads without warnings, and a wheel with every file."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

PYPROJECT = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_license_is_an_spdx_expression() -> None:
    # A { text = ... } table makes setuptools print a page of warnings on every install, and it is
    # an error for builds after 2027-02-18.
    assert PYPROJECT["project"]["license"] == "MIT"


def test_the_build_asks_for_a_setuptools_that_reads_spdx_expressions() -> None:
    # setuptools 77 is the first to accept a license string (PEP 639); older ones reject it.
    assert PYPROJECT["build-system"]["requires"] == ["setuptools>=77"]


def test_the_wheel_ships_the_dashboards_templates_and_static_files(tmp_path: Path) -> None:
    # The image installs the package itself (not an editable checkout): a file left out of
    # package-data would be a dashboard that fails only in production.
    root = Path(__file__).parent.parent
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path), str(root)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("bridge-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    wanted = [
        path.relative_to(root).as_posix()
        for folder in ("bridge/http/templates", "bridge/http/static", "bridge/data")
        for path in (root / folder).iterdir()
        if path.is_file()
    ]
    assert wanted
    # PEP 561's marker: a third-party adapter type-checks against bridge.platform's declared types.
    wanted += ["bridge/py.typed", "adapters/py.typed"]
    assert sorted(set(wanted) - shipped) == []
