"""Attachments: what a platform message carries besides its text, as stored with it and shown to the model."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Literal

from bridge.llm.base import Image

# image: shown to vision models; audio: transcribed; file: named to the model, never opened.
MediaKind = Literal["image", "audio", "file"]
_KINDS = ("image", "audio", "file")


def megabytes(size: int) -> str:
    """A size as people read it: "20 MB", "1.5 MB", "300 KB", "100 bytes"."""
    for unit, scale in (("MB", 1024 * 1024), ("KB", 1024)):
        if size >= scale:
            return f"{size / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{size} bytes"


@dataclass(frozen=True, slots=True)
class Attachment:
    """One attachment of a message: where the platform keeps it, and what became of it.

    An adapter fills the first fields; the run that answers the message fills the rest (`sha256`
    once the bytes are in the media store, `problem` when they could not be used), so a message is
    fetched and transcribed once, whichever run or restart gets to it.
    """

    kind: MediaKind
    name: str
    # The platform's handle to fetch it with: a Telegram file_id, a Discord attachment URL.
    ref: str
    mime: str | None = None
    # As the platform announced it; None when it did not say.
    size: int | None = None
    # A voice note recorded in the app, rather than an audio file.
    voice: bool = False
    sha256: str | None = None
    # The message's text holds its transcript (audio).
    transcribed: bool = False
    # Why it could not be used: too large, the download failed, voice is not set up.
    problem: str | None = None

    @property
    def pending(self) -> bool:
        """Still to fetch (and transcribe): not stored yet, and nothing has ruled it out."""
        return self.kind != "file" and self.sha256 is None and self.problem is None

    def label(self) -> str:
        """How the attachment reads in text: to a model that cannot see it, and in sessions_history."""
        if self.kind == "audio":
            what = "voice message" if self.voice else f"audio: {self.name}"
            state = ", transcribed" if self.transcribed else ""
        else:
            what, state = f"{self.kind}: {self.name}", ""
        if self.problem:
            state = f" ({self.problem})"
        return f"[{what}{state}]"

    def to_dict(self) -> dict[str, Any]:
        # Defaults are left out: rows stay small and older rows read the same.
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != f.default
        }

    @classmethod
    def from_dict(cls, data: Any) -> Attachment | None:
        """The attachment a stored object describes; None for one that is not (a damaged row)."""
        if not isinstance(data, dict) or data.get("kind") not in _KINDS:
            return None
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        for name, value in values.items():
            # A damaged row must not reach a request as, say, a hash that is a number.
            expected = _TYPES[name]
            if not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected):
                return None
        try:
            return cls(**values)
        except TypeError:
            return None


# The types a stored attachment's fields may have (JSON gives no guarantee).
_TYPES: dict[str, tuple[type, ...]] = {
    "kind": (str,),
    "name": (str,),
    "ref": (str,),
    "mime": (str, type(None)),
    "size": (int, type(None)),
    "voice": (bool,),
    "sha256": (str, type(None)),
    "transcribed": (bool,),
    "problem": (str, type(None)),
}


def dumps(attachments: tuple[Attachment, ...] | list[Attachment]) -> str | None:
    """The attachments as stored in a message's media column; None when there are none."""
    return json.dumps([a.to_dict() for a in attachments], ensure_ascii=False) if attachments else None


def loads(text: str | None) -> tuple[Attachment, ...]:
    """A media column back as attachments; damaged entries are skipped, never fatal to a run."""
    if not text:
        return ()
    try:
        data = json.loads(text)
    except ValueError:
        return ()
    if not isinstance(data, list):
        return ()
    return tuple(a for item in data if (a := Attachment.from_dict(item)) is not None)


def framed(content: str, media: str | None) -> str:
    """A message's text with its attachments named first, as a text-only reader sees it."""
    labels = " ".join(a.label() for a in loads(media))
    if not labels:
        return content
    return f"{labels}\n{content}" if content else labels


@dataclass(frozen=True, slots=True)
class OutFile:
    """A file the bot sends (send_file): a copy in the media store, so a resend after a crash sends
    the same bytes whatever became of the workspace file since."""

    name: str
    path: str
    size: int
    mime: str | None = None
    # Sent as a photo where the platform shows one inline; else as a document.
    photo: bool = False

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str | None) -> OutFile | None:
        if not text:
            return None
        try:
            data = json.loads(text)
            return cls(
                str(data["name"]),
                str(data["path"]),
                int(data["size"]),
                data.get("mime"),
                bool(data.get("photo")),
            )
        except (ValueError, KeyError, TypeError, OverflowError):
            return None


def images_of(media: str | None) -> tuple[Image, ...]:
    """The stored images of a media column, as references a request may fill with their bytes."""
    return tuple(
        Image(a.name, a.mime or "image/jpeg", a.sha256)
        for a in loads(media)
        if a.kind == "image" and a.sha256 is not None and a.problem is None
    )
