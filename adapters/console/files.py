"""`bridge chat` attachments: `/attach PATH [caption]` sends a local image, voice or audio file."""

from __future__ import annotations

import mimetypes
import re
from pathlib import Path

from bridge.errors import MediaError
from bridge.events import Attachment, MediaKind
from bridge.media.bounded import too_large

# A line the console turns into a message with a file instead of text.
ATTACH = re.compile(r"^/attach(\s|$)")
USAGE = "Usage: /attach PATH [caption], e.g. /attach ~/photos/cat.jpg what breed is this?"


def local_attachment(line: str) -> tuple[tuple[Attachment, ...], str] | str:
    """(the attachment, the caption) of an /attach line; a message saying what is wrong otherwise.

    A path with spaces is quoted ('/attach "my photo.jpg" what is this?'); ~ is the home folder.
    """
    rest = line[len("/attach") :].strip()
    found = re.match(r'"([^"]+)"|\'([^\']+)\'|(\S+)', rest)
    if found is None:
        return USAGE
    name = next(group for group in found.groups() if group is not None)
    caption = rest[found.end() :].strip()
    path = Path(name).expanduser().resolve()
    if not path.is_file():
        return f"No file at {path}."
    mime = mimetypes.guess_type(path.name)[0] or ""
    kind: MediaKind = "file"
    if mime.startswith("image/"):
        kind = "image"
    elif mime.startswith("audio/") or path.suffix.lower() in (".ogg", ".oga", ".opus"):
        kind = "audio"
    return (Attachment(kind, path.name, str(path), mime or None, path.stat().st_size),), caption


def read_local(attachment: Attachment, max_bytes: int) -> bytes:
    """The bytes of a file /attach named; MediaError when it is gone or too large.

    At most max_bytes + 1 are read, whatever its size said when it was attached: it may have grown
    since, or be a pipe or device that never ends."""
    path = Path(attachment.ref)
    try:
        with path.open("rb") as file:
            data = file.read(max_bytes + 1)
    except OSError as exc:
        raise MediaError(f"it can't be read ({exc.strerror or type(exc).__name__})") from exc
    if len(data) > max_bytes:
        raise too_large(max_bytes)
    return data
