"""Attachments as stored with a message and as a model that reads only text sees them."""

from __future__ import annotations

import json

import pytest

from bridge.events import Attachment, OutFile, dumps, framed, loads
from bridge.llm.base import Image
from bridge.media.parts import images_of

SHA = "ab" * 32
PHOTO = Attachment("image", "photo.jpg", "file-1", "image/jpeg", 1234)
STORED_PHOTO = Attachment("image", "photo.jpg", "file-1", "image/jpeg", 1234, sha256=SHA)
VOICE = Attachment("audio", "voice.ogg", "file-2", "audio/ogg", 900, voice=True)
SONG = Attachment("audio", "song.mp3", "file-3", "audio/mpeg")
REPORT = Attachment("file", "report.pdf", "file-4", "application/pdf", 5000)


# -- labels -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attachment", "label"),
    [
        (PHOTO, "[image: photo.jpg]"),
        (REPORT, "[file: report.pdf]"),
        (VOICE, "[voice message]"),
        (SONG, "[audio: song.mp3]"),
        (Attachment("audio", "v.ogg", "r", voice=True, transcribed=True), "[voice message, transcribed]"),
        (Attachment("audio", "song.mp3", "r", transcribed=True), "[audio: song.mp3, transcribed]"),
    ],
)
def test_each_kind_of_attachment_is_labelled_by_what_it_is(attachment: Attachment, label: str) -> None:
    assert attachment.label() == label


PROBLEMS = [
    (Attachment("image", "big.png", "r", problem="too large: 30 MB"), "[image: big.png (too large: 30 MB)]"),
    (
        Attachment("audio", "v.ogg", "r", voice=True, problem="voice is not set up"),
        "[voice message (voice is not set up)]",
    ),
    # A problem replaces ", transcribed": the transcript did not make it.
    (
        Attachment("audio", "v.ogg", "r", voice=True, transcribed=True, problem="no speech was heard"),
        "[voice message (no speech was heard)]",
    ),
]


@pytest.mark.parametrize(("attachment", "label"), PROBLEMS)
def test_a_problem_is_named_in_the_label(attachment: Attachment, label: str) -> None:
    assert attachment.label() == label


def test_pending_means_still_to_fetch_and_never_for_a_file() -> None:
    assert PHOTO.pending and VOICE.pending
    assert not STORED_PHOTO.pending
    assert not Attachment("image", "x.png", "r", problem="the download failed").pending
    assert not REPORT.pending


# -- the media column -------------------------------------------------------------------------


def test_attachments_round_trip_through_the_media_column() -> None:
    every_field = Attachment(
        "audio", "vöice.ogg", "file-9", "audio/ogg", 77, voice=True, sha256=SHA, transcribed=True
    )
    attachments = (PHOTO, STORED_PHOTO, VOICE, SONG, REPORT, every_field)
    assert loads(dumps(attachments)) == attachments
    assert loads(dumps(list(attachments))) == attachments


def test_defaults_are_left_out_of_the_stored_form() -> None:
    stored = json.loads(dumps([Attachment("image", "p.jpg", "r")]) or "")
    assert stored == [{"kind": "image", "name": "p.jpg", "ref": "r"}]


def test_non_ascii_names_are_stored_as_written() -> None:
    assert "фото.jpg" in (dumps([Attachment("image", "фото.jpg", "r")]) or "")


def test_no_attachments_store_as_null_and_read_back_as_none() -> None:
    assert dumps([]) is None and dumps(()) is None
    assert loads(None) == () and loads("") == ()


@pytest.mark.parametrize(
    "column",
    ["not json", "{", '{"kind": "image"}', "3", '"image"', "null", "[]"],
)
def test_a_damaged_media_column_reads_as_no_attachments(column: str) -> None:
    assert loads(column) == ()


def test_damaged_entries_are_skipped_and_the_rest_kept() -> None:
    column = json.dumps(
        [
            PHOTO.to_dict(),
            {"kind": "hologram", "name": "x", "ref": "r"},  # unknown kind
            {"kind": "image", "name": "x"},  # no ref
            {"name": "x", "ref": "r"},  # no kind
            3,
            "image",
            None,
            [PHOTO.to_dict()],
            REPORT.to_dict(),
        ]
    )
    assert loads(column) == (PHOTO, REPORT)


def test_unknown_keys_of_a_newer_version_are_ignored() -> None:
    column = json.dumps([{**PHOTO.to_dict(), "thumbnail": "t-1", "width": 640}])
    assert loads(column) == (PHOTO,)


# -- framed -----------------------------------------------------------------------------------


def test_framed_names_the_attachments_before_the_text() -> None:
    assert (
        framed("look at this", dumps([PHOTO, REPORT]))
        == "[image: photo.jpg] [file: report.pdf]\nlook at this"
    )


def test_framed_without_text_is_the_labels_alone() -> None:
    assert framed("", dumps([VOICE])) == "[voice message]"


def test_framed_without_attachments_is_the_text_unchanged() -> None:
    assert framed("hello", None) == "hello"
    assert framed("hello", "damaged") == "hello"
    assert framed("", None) == ""


# -- images_of --------------------------------------------------------------------------------


def test_images_of_gives_the_stored_images_in_order() -> None:
    second = Attachment("image", "b.png", "r2", "image/png", sha256="cd" * 32)
    assert images_of(dumps([STORED_PHOTO, second])) == (
        Image("photo.jpg", "image/jpeg", SHA),
        Image("b.png", "image/png", "cd" * 32),
    )


def test_images_of_skips_unfetched_images_problems_and_other_kinds() -> None:
    media = dumps(
        [
            PHOTO,  # not fetched yet
            Attachment("image", "bad.png", "r", sha256=SHA, problem="not an image format I can read"),
            Attachment("audio", "v.ogg", "r", voice=True, sha256=SHA, transcribed=True),
            Attachment("file", "f.pdf", "r", sha256=SHA),
        ]
    )
    assert images_of(media) == ()
    assert images_of(None) == ()


def test_an_image_stored_without_a_mime_type_is_taken_for_jpeg() -> None:
    [image] = images_of(dumps([Attachment("image", "p", "r", sha256=SHA)]))
    assert image.mime == "image/jpeg"


def test_an_image_never_shows_its_bytes_in_its_repr() -> None:
    image = Image("p.png", "image/png", SHA, data=b"secret-bytes" * 10)
    assert "secret-bytes" not in repr(image)
    assert "120 bytes" in repr(image)


# -- OutFile ----------------------------------------------------------------------------------


def test_an_out_file_round_trips_through_json() -> None:
    out = OutFile("chart.png", "/data/media/ab/" + SHA, 2048, "image/png", photo=True)
    assert OutFile.from_json(out.to_json()) == out
    plain = OutFile("notes.txt", "/x", 3)
    assert OutFile.from_json(plain.to_json()) == plain


@pytest.mark.parametrize(
    "text",
    [None, "", "not json", "[1, 2]", "3", '{"name": "x"}', '{"name": "x", "path": "p", "size": "big"}'],
)
def test_a_damaged_out_file_reads_as_none(text: str | None) -> None:
    assert OutFile.from_json(text) is None
