"""Skills: folders with a SKILL.md whose front matter names and describes the instructions below it."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

SKILL_FILE = "SKILL.md"
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
DESCRIPTION_MAX = 1024
# The files beside a SKILL.md that load_skill names; past this it says how many more there are.
MAX_LISTED_FILES = 50
# Where the files tools find a skill's folder: .skills/<name>/<path inside the folder>.
FILES_PREFIX = ".skills"
_FENCE = "---"


class SkillError(ValueError):
    """Skill folders or SKILL.md files that cannot be used; each problem names the path and why."""

    def __init__(self, *problems: str) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class Skill:
    """One skill, read once at start: what the prompt lists, and what load_skill returns."""

    name: str
    description: str
    folder: Path
    body: str
    # The other files of the folder, relative to it, as load_skill lists them.
    files: tuple[str, ...] = ()
    # How many files were left out of `files` past MAX_LISTED_FILES.
    more_files: int = 0


class SkillCatalog:
    """The configured skills by name, in the order their folders were found."""

    def __init__(self, skills: Iterable[Skill] = ()) -> None:
        self._by_name = {skill.name: skill for skill in skills}

    def __eq__(self, other: object) -> bool:
        # Settings compare equal when they would run the same: the same skills, read the same.
        return isinstance(other, SkillCatalog) and self._by_name == other._by_name

    __hash__ = None  # type: ignore[assignment]  # mutable-looking equality: not a dict key

    def __bool__(self) -> bool:
        return bool(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def __iter__(self) -> Iterator[Skill]:
        return iter(self._by_name.values())

    def names(self) -> list[str]:
        return list(self._by_name)

    def get(self, name: str) -> Skill | None:
        return self._by_name.get(normalize_name(name))

    def known(self, names: Iterable[str]) -> set[str]:
        """The names that are configured skills; skills since removed from the config are dropped."""
        return {normalize_name(n) for n in names if normalize_name(n) in self._by_name}

    @classmethod
    def load(cls, paths: Iterable[Path]) -> SkillCatalog:
        """Every skill under `paths`, or SkillError listing every problem found (one a line)."""
        skills: list[Skill] = []
        problems: list[str] = []
        seen: dict[str, Path] = {}
        for path in paths:
            try:
                files = skill_files(path)
            except SkillError as exc:
                problems.extend(exc.problems)
                continue
            for file in files:
                try:
                    skill = parse_skill(file)
                except SkillError as exc:
                    problems.extend(exc.problems)
                    continue
                if skill.name in seen:
                    problems.append(f"{file}: the name {skill.name!r} is taken by {seen[skill.name]}")
                    continue
                seen[skill.name] = file
                skills.append(skill)
        if problems:
            raise SkillError(*problems)
        return cls(skills)


def normalize_name(name: str) -> str:
    # Small models write "PDF-Forms " for pdf-forms; names are lowercase by the pattern.
    return name.strip().lower()


def skill_files(path: Path) -> list[Path]:
    """The SKILL.md files a configured path holds: its own, or those of its subfolders."""
    if not path.exists():
        raise SkillError(f"{path}: no such folder")
    if not path.is_dir():
        raise SkillError(f"{path}: not a folder; list folders of skills, each with a {SKILL_FILE}")
    own = path / SKILL_FILE
    if own.is_file():
        return [own]
    # Subfolders without a SKILL.md are not skills (assets, a .git folder): they are skipped.
    return sorted(sub / SKILL_FILE for sub in path.iterdir() if (sub / SKILL_FILE).is_file())


def parse_skill(file: Path) -> Skill:
    """The skill a SKILL.md describes, or SkillError naming the file and what is wrong."""
    try:
        text = file.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise SkillError(f"{file}: not UTF-8 text") from None
    except OSError as exc:
        raise SkillError(f"{file}: cannot read: {exc.strerror}") from None
    front, body = split_front_matter(file, text)
    try:
        data = yaml.safe_load(front)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 2})" if where is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SkillError(f"{file}: the front matter is not valid YAML{line}: {problem}") from None
    if not isinstance(data, dict):
        raise SkillError(f"{file}: the front matter must be YAML keys, e.g. 'name: my-skill'")
    name, description = data.get("name"), data.get("description")
    if not isinstance(name, str) or not name:
        raise SkillError(f"{file}: the front matter has no name")
    if not NAME_PATTERN.match(name):
        raise SkillError(f"{file}: {name!r} is not a skill name: a-z, 0-9, _ and - (up to 64)")
    if not isinstance(description, str) or not description.strip():
        raise SkillError(f"{file}: the front matter has no description; it tells the model when to use it")
    description = " ".join(description.split())
    if len(description) > DESCRIPTION_MAX:
        raise SkillError(
            f"{file}: the description has {len(description)} characters; at most {DESCRIPTION_MAX}"
        )
    files, more = _other_files(file.parent)
    return Skill(name, description, file.parent.resolve(), body.strip(), files, more)


def split_front_matter(file: Path, text: str) -> tuple[str, str]:
    """The YAML between the opening and closing '---' lines, and the body after them."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != _FENCE:
        raise SkillError(
            f"{file}: no front matter; start the file with a '---' line, then name and description"
        )
    for index, line in enumerate(lines[1:], start=1):
        if line.strip() == _FENCE:
            return "".join(lines[1:index]), "".join(lines[index + 1 :])
    raise SkillError(f"{file}: the front matter is not closed by a '---' line")


def _other_files(folder: Path) -> tuple[tuple[str, ...], int]:
    """The folder's files besides SKILL.md, relative to it, hidden ones and links left out."""
    found: list[str] = []
    for current, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            path = Path(current, name)
            if name.startswith(".") or path.is_symlink() or path == folder / SKILL_FILE:
                continue
            found.append(path.relative_to(folder).as_posix())
    return tuple(found[:MAX_LISTED_FILES]), max(0, len(found) - MAX_LISTED_FILES)


__all__ = [
    "DESCRIPTION_MAX",
    "FILES_PREFIX",
    "SKILL_FILE",
    "Skill",
    "SkillCatalog",
    "SkillError",
    "normalize_name",
    "parse_skill",
    "skill_files",
]
