"""Bytes the media tests pass around: the leading bytes of each image format, a voice note, and text."""

from __future__ import annotations

JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + b"fake jpeg body"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR fake png body"
GIF87 = b"GIF87a" + b"fake gif body"
GIF89 = b"GIF89a" + b"fake gif body"
WEBP = b"RIFF\x24\x00\x00\x00WEBPVP8 " + b"fake webp body"
VOICE = b"OggS\x00\x02" + b"fake opus voice note"
NOT_AN_IMAGE = b"%PDF-1.7\n% not an image at all"
