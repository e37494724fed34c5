"""A fake Telegram Bot API on 127.0.0.1 that the real python-telegram-bot polls and sends to."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import inspect
import json
import re
import time
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import PurePosixPath
from typing import Any, Literal, NamedTuple

from aiohttp import BodyPartReader, hdrs, web

from devkit.fakes.loopback import LoopbackServer

FaultKind = Literal["429", "502", "drop", "400", "403", "hang"]

MAX_TEXT_UTF16 = 4096
MAX_CAPTION_UTF16 = 1024
MB = 1024 * 1024
# What the download route writes at a time when it streams a file (serve()).
FILE_CHUNK = 64 * 1024
# getFile refuses a bigger file ("file is too big"): the cloud Bot API lets bots download up to 20 MB.
MAX_DOWNLOAD_BYTES = 20 * MB
# A multipart upload: photos up to 10 MB, anything else up to 50 MB.
MAX_PHOTO_UPLOAD_BYTES = 10 * MB
MAX_UPLOAD_BYTES = 50 * MB
NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup are exactly "
    "the same as a current content and reply markup of the message"
)
# What a reverse proxy in front of the Bot API answers when the upstream is down.
BAD_GATEWAY_HTML = (
    b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    b"<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
)

# PTB sends every non-string value JSON-encoded inside a form field; these are decoded back.
_JSON_FIELDS = frozenset(
    {
        "allowed_updates",
        "caption_entities",
        "commands",
        "entities",
        "link_preview_options",
        "reply_markup",
        "reply_parameters",
        "scope",
    }
)
_INT_FIELDS = frozenset(
    {
        "chat_id",
        "duration",
        "from_chat_id",
        "limit",
        "max_connections",
        "message_id",
        "message_thread_id",
        "offset",
        "reply_to_message_id",
        "timeout",
        "user_id",
    }
)
_BOOL_FIELDS = frozenset(
    {
        "allow_sending_without_reply",
        "disable_content_type_detection",
        "disable_notification",
        "disable_web_page_preview",
        "drop_pending_updates",
        "has_spoiler",
        "protect_content",
        "show_caption_above_media",
    }
)
# Sent when allowed_updates is an empty list or was never given (Telegram's documented default).
_DEFAULT_ALLOWED = frozenset(
    {
        "message",
        "edited_message",
        "channel_post",
        "edited_channel_post",
        "business_connection",
        "business_message",
        "edited_business_message",
        "deleted_business_messages",
        "inline_query",
        "chosen_inline_result",
        "callback_query",
        "shipping_query",
        "pre_checkout_query",
        "purchased_paid_media",
        "poll",
        "poll_answer",
        "my_chat_member",
        "chat_join_request",
        "chat_boost",
        "removed_chat_boost",
    }
)
_CHAT_ACTIONS = frozenset(
    {
        "typing",
        "upload_photo",
        "record_video",
        "upload_video",
        "record_voice",
        "upload_voice",
        "upload_document",
        "choose_sticker",
        "find_location",
        "record_video_note",
        "upload_video_note",
    }
)
_COMMAND_NAME = re.compile(r"[a-z0-9_]{1,32}")
_BOT_COMMAND = re.compile(r"/[A-Za-z0-9_]+(?:@[A-Za-z0-9_]+)?")
_MENTION = re.compile(r"(?<![A-Za-z0-9_@/])@[A-Za-z0-9_]+")
_ENTITY = re.compile(r"&(?:#[0-9]+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);")
_NAMED_ENTITIES = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
_SIMPLE_TAGS = {
    "b": "bold",
    "strong": "bold",
    "i": "italic",
    "em": "italic",
    "u": "underline",
    "ins": "underline",
    "s": "strikethrough",
    "strike": "strikethrough",
    "del": "strikethrough",
    "code": "code",
    "pre": "pre",
    "tg-spoiler": "spoiler",
}
# The media a message can carry here, each with the folder and default extension of its file_path.
_MEDIA_FOLDERS = {
    "photo": ("photos", ".jpg"),
    "document": ("documents", ""),
    "voice": ("voice", ".oga"),
    "audio": ("music", ".mp3"),
}
_SEND_MEDIA = {f"send{kind}": kind for kind in _MEDIA_FOLDERS}
_EXTENSION = re.compile(r"\.[A-Za-z0-9]{1,10}")


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, the unit of Telegram's offsets and length limits."""
    return len(text.encode("utf-16-le")) // 2


class TelegramApiError(Exception):
    """An error answer: {"ok": false, "error_code": code, "description": ..., "parameters"?: ...}."""

    def __init__(self, code: int, description: str, parameters: dict[str, Any] | None = None) -> None:
        super().__init__(description)
        self.code = code
        self.description = description
        self.parameters = parameters

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"ok": False, "error_code": self.code, "description": self.description}
        if self.parameters:
            body["parameters"] = self.parameters
        return body


def _bad_request(reason: str) -> TelegramApiError:
    return TelegramApiError(400, f"Bad Request: {reason}")


@dataclass
class _StoredFile:
    """A file the fake can hand out through getFile and serve at /file/bot{token}/{file_path}."""

    file_id: str
    file_unique_id: str
    file_path: str
    data: bytes
    file_size: int  # what Telegram advertises; may exceed len(data) to stand for a big file
    file_name: str | None = None
    mime_type: str | None = None
    url: str | None = None  # sent by URL: Telegram would fetch it; the fake keeps the string
    served: int | None = None  # serve(): bytes the download route streams, whatever file_size says
    chunked: bool = False  # serve(): streamed without a Content-Length

    def fields(self) -> dict[str, Any]:
        """The file_id, file_unique_id and file_size every Bot API file object carries."""
        return {"file_id": self.file_id, "file_unique_id": self.file_unique_id, "file_size": self.file_size}


class _InputFile(NamedTuple):
    """The file a send named, stored, with the name and type it came with."""

    stored: _StoredFile
    source: Literal["upload", "file_id", "url"]
    filename: str | None
    content_type: str | None


def _extension(file_name: str | None, default: str) -> str:
    suffix = PurePosixPath(file_name or "").suffix
    return suffix.lower() if _EXTENSION.fullmatch(suffix) else default


class _TelegramHTML(HTMLParser):
    """Telegram's HTML parse mode: the supported tags, strictly nested; collects text and entities."""

    def __init__(self, raw: str) -> None:
        super().__init__(convert_charrefs=False)
        self._raw = raw
        self._line_starts = [0, *(m.end() for m in re.finditer("\n", raw))]
        self._parts: list[str] = []
        self._length = 0
        self._open: list[tuple[str, int, dict[str, Any] | None]] = []
        self.entities: list[dict[str, Any]] = []

    @classmethod
    def parse(cls, raw: str) -> tuple[str, list[dict[str, Any]]]:
        parser = cls(raw)
        for amp in re.finditer("&", raw):  # html.parser would swallow a bare "&" at the very end
            if not _ENTITY.match(raw, amp.start()):
                offset = len(raw[: amp.start()].encode())
                raise parser._fail(f'Character "&" must be escaped as "&amp;" at byte offset {offset}')
        parser.feed(raw)
        parser.close()
        entities = sorted(parser.entities, key=lambda e: (e["offset"], -e["length"]))
        return "".join(parser._parts), entities

    def _fail(self, reason: str) -> TelegramApiError:
        return _bad_request(f"can't parse entities: {reason}")

    def _byte_offset(self, extra: int = 0) -> int:
        line, column = self.getpos()
        index = self._line_starts[line - 1] + column + extra
        return len(self._raw[:index].encode())

    def _append(self, text: str) -> None:
        self._parts.append(text)
        self._length += utf16_len(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        at = f"at byte offset {self._byte_offset()}"
        entity: dict[str, Any] | None
        if tag in _SIMPLE_TAGS:
            entity = {"type": _SIMPLE_TAGS[tag]}
            language = attributes.get("class") or ""
            if tag == "code" and self._open and self._open[-1][0] == "pre":
                pre = self._open[-1][2]
                if pre is not None and self._open[-1][1] == self._length and language.startswith("language-"):
                    pre["language"] = language.removeprefix("language-")  # <pre><code class=...>
                    entity = None
        elif tag == "a":
            href = attributes.get("href") or ""
            entity = {"type": "text_link", "url": href} if href else None
        elif tag == "span":
            if attributes.get("class") != "tg-spoiler":
                raise self._fail(f'Tag "span" must have class "tg-spoiler" {at}')
            entity = {"type": "spoiler"}
        elif tag == "blockquote":
            entity = {"type": "expandable_blockquote" if "expandable" in attributes else "blockquote"}
        elif tag == "tg-emoji":
            emoji_id = attributes.get("emoji-id") or ""
            if not emoji_id.isdigit():
                raise self._fail(f"Custom emoji identifier must be non-empty {at}")
            entity = {"type": "custom_emoji", "custom_emoji_id": emoji_id}
        else:
            raise self._fail(f'Unsupported start tag "{tag}" {at}')
        self._open.append((tag, self._length, entity))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        raise self._fail(f'Unsupported start tag "{tag}/" at byte offset {self._byte_offset()}')

    def handle_endtag(self, tag: str) -> None:
        at = f"at byte offset {self._byte_offset()}"
        if not self._open:
            raise self._fail(f"Unexpected end tag {at}")
        open_tag, start, entity = self._open.pop()
        if tag != open_tag:
            raise self._fail(f'Unmatched end tag {at}, expected "</{open_tag}>", found "</{tag}>"')
        if entity is not None and self._length > start:
            self.entities.append({**entity, "offset": start, "length": self._length - start})

    def handle_data(self, data: str) -> None:
        if "<" in data:
            index = data.index("<")
            name = re.match(r"[^\s>]*", data[index + 1 :])
            tag = name.group() if name else ""
            raise self._fail(f'Unsupported start tag "{tag}" at byte offset {self._byte_offset(index)}')
        if "&" in data:
            index = data.index("&")
            raise self._fail(
                f'Character "&" must be escaped as "&amp;" at byte offset {self._byte_offset(index)}'
            )
        self._append(data)

    def handle_entityref(self, name: str) -> None:
        if name not in _NAMED_ENTITIES:
            raise self._fail(f'Unsupported HTML entity "&{name};" at byte offset {self._byte_offset()}')
        self._append(_NAMED_ENTITIES[name])

    def handle_charref(self, name: str) -> None:
        try:
            code = int(name[1:], 16) if name[:1] in ("x", "X") else int(name)
            char = chr(code)
            char.encode("utf-8")  # lone surrogates are not characters
        except (ValueError, OverflowError, UnicodeEncodeError):
            raise self._fail(
                f'Invalid HTML entity "&#{name};" at byte offset {self._byte_offset()}'
            ) from None
        if code == 0:
            raise self._fail(f'Invalid HTML entity "&#{name};" at byte offset {self._byte_offset()}')
        self._append(char)

    def _unsupported(self, data: str) -> None:
        raise self._fail(f'Unsupported start tag "!" at byte offset {self._byte_offset()}')

    handle_comment = handle_pi = unknown_decl = _unsupported

    def handle_decl(self, decl: str) -> None:  # its parameter has another name than the others'
        self._unsupported(decl)

    def close(self) -> None:
        super().close()
        if self._open:
            raise self._fail(f'Can\'t find end tag corresponding to start tag "{self._open[-1][0]}"')


def _trim(text: str, entities: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """Telegram strips leading and trailing whitespace; entities are shifted and clipped to match."""
    lead = utf16_len(text[: len(text) - len(text.lstrip())])
    text = text.strip()
    size = utf16_len(text)
    trimmed = []
    for entity in entities:
        start = max(entity["offset"] - lead, 0)
        end = min(entity["offset"] + entity["length"] - lead, size)
        if end > start:
            trimmed.append({**entity, "offset": start, "length": end - start})
    return text, trimmed


def _auto_entities(text: str) -> list[dict[str, Any]]:
    """What Telegram's clients attach: a bot_command for a leading /command, a mention for each @name."""
    entities: list[dict[str, Any]] = []
    command_end = 0
    if command := _BOT_COMMAND.match(text):
        command_end = command.end()
        entities.append({"type": "bot_command", "offset": 0, "length": utf16_len(command.group())})
    for mention in _MENTION.finditer(text, command_end):
        entities.append(
            {
                "type": "mention",
                "offset": utf16_len(text[: mention.start()]),
                "length": utf16_len(mention.group()),
            }
        )
    return entities


class FakeTelegram(LoopbackServer):
    """The Bot API on 127.0.0.1, random port: POST {api_base}/bot{token}/{method}.

    Point PTB at it with base_url=f"{api_base}/bot" and base_file_url=f"{api_base}/file/bot".
    Push user messages with dm()/group()/push_message(), any other shape with push_raw_update(); read
    what the bot did from sent, edits, chat_actions, commands, webhook, calls and get_updates_offsets,
    and what it has not confirmed yet from pending_updates. Only getUpdates long-polls; stop() ends
    open polls.

    Files, both ways, as the cloud Bot API does them:

    * Inbound media: push_message (so dm()/group()) takes photo=<bytes> (two PhotoSize entries, 90x90
      and 800x800, both downloading the bytes; the last, largest, has file_size=len(bytes)),
      document=(file_name, mime_type, data), voice=<bytes> (audio/ogg) or audio=(file_name, mime_type,
      data), duration= for voice and audio, and file_size= to advertise a size bigger than the data
      (the largest photo size, or the document/voice/audio), e.g. 30 * MB for a file getFile refuses,
      without allocating it. photo=True still makes photo sizes with no file behind them.
      register_file(data, file_size=, file_name=, mime_type=) stores a file with no message and returns
      its file_id (to send by file_id, or to getFile directly).
    * getFile → {file_id, file_unique_id, file_size, file_path}; an unknown file_id → 400 "Bad Request:
      invalid file_id", an advertised file_size over MAX_DOWNLOAD_BYTES (20 MB) → 400 "Bad Request:
      file is too big". GET {api_base}/file/bot{token}/{file_path} serves the bytes
      (application/octet-stream); a wrong token or unknown path → 404 "Not Found". Each file served is
      appended to `downloads` (its file_path). fail_next("file", kind) makes the next download fail.
      Every GET of the route is in `download_requests` (its file_path) as it arrives, faults included.
      serve(file_id, size=, chunked=) makes the route stream `size` bytes (the data padded with zero
      bytes) whatever getFile said, without a Content-Length when chunked: a file that lies about its
      size. `bytes_served[file_path]` is what the route had written when that download ended, the
      client gone or not (so a test sees a download the bot stopped reading).
    * Uploads: sendPhoto, sendDocument, sendVoice and sendAudio take the file as a multipart part (the
      field itself or attach://name), a known file_id or an http(s) URL (kept as a string, no bytes).
      An upload part over MAX_UPLOAD_BYTES (50 MB) → 413 "Request Entity Too Large"; a photo over
      MAX_PHOTO_UPLOAD_BYTES (10 MB) → 400 "Bad Request: PHOTO_SAVE_FILE_INVALID"; an empty part → 400
      "Bad Request: file must be non-empty"; no file → 400 "Bad Request: there is no photo in the
      request" (document, voice, audio likewise); any other string → 400 "Bad Request: wrong file
      identifier/HTTP URL specified". caption/parse_mode/caption_entities are validated like
      sendMessage's text, up to MAX_CAPTION_UTF16 → 400 "Bad Request: message caption is too long".
      Each lands in `sent` like a text message ("text" is the caption, "" when none, "raw_text" the
      caption as sent, "media" the kind, "file_id" its file) and in `sent_files`: {method, media,
      chat_id, message_id, file_id, filename, content_type, data, caption, source ("upload" |
      "file_id" | "url"), url}. The file it makes can be fetched back through getFile and the file URL.
    * editMessageText on a media message → 400 "Bad Request: there is no text in the message to
      edit"; editMessageCaption edits a media message's caption (on a text message → 400 "Bad Request:
      there is no caption in the message to edit") and is recorded in `edits` with a "media" key.
    """

    def __init__(self, token: str = "123456:TEST-TOKEN", bot_username: str = "bridge_test_bot") -> None:
        super().__init__()
        self.token = token
        self.bot_id = int(token.split(":", 1)[0])
        self.bot_username = bot_username
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.sent: list[dict[str, Any]] = []
        # Called with each record as it is added to `sent`: a benchmark's closed loop answers at once
        # instead of polling the list.
        self.on_sent: Callable[[dict[str, Any]], None] | None = None
        self.edits: list[dict[str, Any]] = []
        self.chat_actions: list[dict[str, Any]] = []
        self.commands: list[list[dict[str, Any]]] = []
        self.webhook: dict[str, Any] | None = None
        self._my_commands: list[dict[str, Any]] = []
        self._bot_user = {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": "Bridge Test",
            "username": bot_username,
        }
        self._updates: list[dict[str, Any]] = []
        self._confirmed_below = 1  # update ids below this have been confirmed through offset
        self._next_update_id = 1
        self._allowed_updates: frozenset[str] = _DEFAULT_ALLOWED
        self._poll_generation = 0
        self._open_polls = 0
        # getUpdates requests ended by a newer one: two pollers at once (one bot, two processes).
        self.conflicts = 0
        # When each getUpdates request arrived (the loop's clock), to time a takeover.
        self.poll_times: list[float] = []
        self._chats: dict[int, dict[str, Any]] = {}
        self._next_message_id: defaultdict[int, int] = defaultdict(lambda: 1)
        self._messages: dict[tuple[int, int], dict[str, Any]] = {}  # every message, pushed or sent
        self._current: dict[tuple[int, int], dict[str, Any]] = {}  # sent records, after edits
        self._faults: defaultdict[str, deque[tuple[FaultKind, int, str]]] = defaultdict(deque)
        self._files: dict[str, _StoredFile] = {}  # by file_id
        self._files_by_path: dict[str, _StoredFile] = {}
        self._file_counter = 0
        # The file_path of every file served by the download route, in order.
        self.downloads: list[str] = []
        self.download_requests: list[str] = []
        self.bytes_served: dict[str, int] = {}
        # Every file the bot sent (sendPhoto, sendDocument, ...), with the uploaded bytes.
        self.sent_files: list[dict[str, Any]] = []

    # -- lifecycle -------------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{file_path:.+}", self._download)
        app.router.add_route("*", "/{tail:.*}", self._not_found)

    @property
    def api_base(self) -> str:
        return self.origin

    async def stop(self) -> None:
        self._closing.set()
        self._notify()  # open long polls answer [] at once
        await super().stop()

    # -- updates for the bot ---------------------------------------------------------------

    def push_message(
        self,
        *,
        chat_id: int,
        user_id: int,
        text: str | None = None,
        chat_type: str = "private",
        username: str | None = None,
        first_name: str = "User",
        chat_title: str | None = None,
        message_thread_id: int | None = None,
        is_topic_message: bool = False,
        caption: str | None = None,
        photo: bool | bytes = False,
        sticker: bool = False,
        entities: list[dict[str, Any]] | None = None,
        reply_to_message: dict[str, Any] | None = None,
        from_bot: bool = False,
        document: tuple[str, str, bytes] | None = None,
        voice: bytes | None = None,
        audio: tuple[str, str, bytes] | None = None,
        duration: int = 1,
        file_size: int | None = None,
    ) -> dict[str, Any]:
        """Queue a `message` update from a user and return the Message dict.

        entities None → a bot_command entity for a leading "/command" and a mention for every
        "@name" (UTF-16 offsets); a list → exactly those entities.

        photo=True → photo sizes with no file behind them; photo=<bytes>, document=(file_name,
        mime_type, data), voice=<bytes> or audio=(file_name, mime_type, data) → media whose file_ids
        getFile and the file URL serve (one per message). file_size → the size advertised for it
        (the largest photo size) instead of len(data); duration → voice and audio duration (s).
        """
        with_bytes = [
            name
            for name, value in (("photo", photo), ("document", document), ("voice", voice), ("audio", audio))
            if value is not None and not isinstance(value, bool)
        ]
        if len(with_bytes) > 1:
            raise ValueError(f"one media per message, not {with_bytes}")
        if file_size is not None and not with_bytes:
            raise ValueError("file_size needs photo=<bytes>, document, voice or audio")
        sender: dict[str, Any] = {"id": user_id, "is_bot": from_bot, "first_name": first_name}
        if username is not None:
            sender["username"] = username
        chat: dict[str, Any] = {"id": chat_id, "type": chat_type}
        if chat_type == "private":
            chat["first_name"] = first_name
            if username is not None:
                chat["username"] = username
        else:
            chat["title"] = chat_title or f"Test chat {chat_id}"
            if is_topic_message:
                chat["is_forum"] = True
        self._chats[chat_id] = chat
        message: dict[str, Any] = {
            "message_id": self._take_message_id(chat_id),
            "date": int(time.time()),
            "chat": chat,
            "from": sender,
        }
        if message_thread_id is not None:
            message["message_thread_id"] = message_thread_id
        if is_topic_message:
            message["is_topic_message"] = True
        if reply_to_message is not None:
            message["reply_to_message"] = self._reply_target(reply_to_message)
        if text is not None:
            message["text"] = text
            found = _auto_entities(text) if entities is None else entities
            if found:
                message["entities"] = found
        if caption is not None:
            message["caption"] = caption
            found = _auto_entities(caption) if entities is None or text is not None else entities
            if found:
                message["caption_entities"] = found
        n = message["message_id"]
        if isinstance(photo, bytes):
            large = self._store("photo", photo, file_size=file_size, file_id=f"photo-{chat_id}-{n}-m")
            message["photo"] = self._photo_sizes(large, thumbnail_id=f"photo-{chat_id}-{n}-s")
        elif photo:
            message["photo"] = [
                {"file_id": f"photo-{chat_id}-{n}-s", "file_unique_id": f"ps{n}", "width": 90, "height": 90},
                {
                    "file_id": f"photo-{chat_id}-{n}-m",
                    "file_unique_id": f"pm{n}",
                    "width": 800,
                    "height": 800,
                },
            ]
        if document is not None:
            file_name, mime_type, data = document
            stored = self._store(
                "document", data, file_size=file_size, file_name=file_name, mime_type=mime_type
            )
            message["document"] = self._media_object("document", stored)
        if voice is not None:
            stored = self._store("voice", voice, file_size=file_size, mime_type="audio/ogg")
            message["voice"] = self._media_object("voice", stored, duration=duration)
        if audio is not None:
            file_name, mime_type, data = audio
            stored = self._store("audio", data, file_size=file_size, file_name=file_name, mime_type=mime_type)
            message["audio"] = self._media_object("audio", stored, duration=duration)
        if sticker:
            message["sticker"] = {
                "file_id": f"sticker-{chat_id}-{n}",
                "file_unique_id": f"st{n}",
                "type": "regular",
                "width": 512,
                "height": 512,
                "is_animated": False,
                "is_video": False,
                "emoji": "🙂",
            }
        self._messages[(chat_id, message["message_id"])] = message
        self._enqueue("message", message)
        return copy.deepcopy(message)

    def dm(self, user_id: int, text: str | None, **kw: Any) -> dict[str, Any]:
        """A private message: chat_id == user_id."""
        return self.push_message(chat_id=user_id, user_id=user_id, text=text, chat_type="private", **kw)

    def group(self, chat_id: int, user_id: int, text: str | None, **kw: Any) -> dict[str, Any]:
        """A message in a group; chat_type defaults to "supergroup" (ids like -100123)."""
        kw.setdefault("chat_type", "supergroup")
        return self.push_message(chat_id=chat_id, user_id=user_id, text=text, **kw)

    def push_edited(self, message: dict[str, Any], new_text: str) -> dict[str, Any]:
        """Queue an `edited_message` update: the user changed `message` to `new_text`."""
        key = (message["chat"]["id"], message["message_id"])
        edited = copy.deepcopy(self._messages.get(key, message))
        field, entities_field = (
            ("caption", "caption_entities") if "caption" in edited else ("text", "entities")
        )
        edited[field] = new_text
        edited.pop(entities_field, None)
        if found := _auto_entities(new_text):
            edited[entities_field] = found
        edited["edit_date"] = max(int(time.time()), edited["date"])
        self._messages[key] = edited
        self._enqueue("edited_message", edited)
        return copy.deepcopy(edited)

    def push_raw_update(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Queue an update exactly as given, with the next update_id: shapes push_message can't make.

        E.g. {"message": {...}} holding fields an older or newer Bot API server sends. Returns the update.
        """
        update = {"update_id": self._next_update_id, **{k: v for k, v in payload.items() if k != "update_id"}}
        self._next_update_id += 1
        self._updates.append(update)
        self._notify()
        return copy.deepcopy(update)

    def redeliver_all(self) -> None:
        """Forget every confirmation, as if the bot crashed before its offset reached Telegram."""
        self._confirmed_below = 1
        self._notify()

    @property
    def pending_updates(self) -> list[dict[str, Any]]:
        """Updates not yet confirmed through getUpdates' offset."""
        return [copy.deepcopy(u) for u in self._updates if u["update_id"] >= self._confirmed_below]

    @property
    def get_updates_offsets(self) -> list[int | None]:
        """The offset of every getUpdates request so far, in order (None when it carried none)."""
        return [params.get("offset") for method, params in self.calls if method == "getupdates"]

    @property
    def open_polls(self) -> int:
        """getUpdates requests currently waiting for an update."""
        return self._open_polls

    # -- files -----------------------------------------------------------------------------

    def register_file(
        self,
        data: bytes,
        *,
        file_size: int | None = None,
        file_name: str | None = None,
        mime_type: str | None = None,
    ) -> str:
        """Store `data` as a file of no message and return its file_id, for getFile or sending by id.

        file_size → the size Telegram advertises (getFile refuses one over MAX_DOWNLOAD_BYTES) while
        only `data` is kept and served.
        """
        stored = self._store("document", data, file_size=file_size, file_name=file_name, mime_type=mime_type)
        return stored.file_id

    def serve(self, file_id: str, *, size: int | None = None, chunked: bool = False) -> str:
        """Make the download route stream `size` bytes of the file (its data padded with zero bytes, or
        cut), whatever getFile advertises, with no Content-Length when `chunked`; returns its file_path."""
        stored = self._files[file_id]
        stored.served, stored.chunked = size, chunked
        return stored.file_path

    def _store(
        self,
        kind: str,
        data: bytes,
        *,
        file_size: int | None = None,
        file_name: str | None = None,
        mime_type: str | None = None,
        file_id: str | None = None,
        url: str | None = None,
    ) -> _StoredFile:
        self._file_counter += 1
        n = self._file_counter
        folder, default_extension = _MEDIA_FOLDERS[kind]
        stored = _StoredFile(
            file_id=file_id or f"{kind}-file-{n}",
            file_unique_id=f"fu{n}",
            file_path=f"{folder}/file_{n}{_extension(file_name, default_extension)}",
            data=bytes(data),
            file_size=len(data) if file_size is None else file_size,
            file_name=file_name,
            mime_type=mime_type,
            url=url,
        )
        self._files[stored.file_id] = stored
        self._files_by_path[stored.file_path] = stored
        return stored

    def _photo_sizes(
        self, large: _StoredFile, *, thumbnail: bool = True, thumbnail_id: str | None = None
    ) -> list[dict[str, Any]]:
        """The PhotoSize array of a photo: a 90x90 thumbnail serving the same bytes, then `large`."""
        sizes = [{**large.fields(), "width": 800, "height": 800}]
        if thumbnail:
            small = self._store("photo", large.data, file_id=thumbnail_id)
            sizes.insert(0, {**small.fields(), "width": 90, "height": 90})
        return sizes

    @staticmethod
    def _media_object(kind: str, stored: _StoredFile, *, duration: int = 1) -> dict[str, Any]:
        """The Document, Voice or Audio object of a stored file."""
        media = stored.fields()
        if kind in ("voice", "audio"):
            media["duration"] = duration
        if kind in ("document", "audio") and stored.file_name is not None:
            media["file_name"] = stored.file_name
        mime_type = "audio/ogg" if kind == "voice" else stored.mime_type
        if mime_type is not None:
            media["mime_type"] = mime_type
        return media

    # -- what the bot did ------------------------------------------------------------------

    def messages(self) -> list[dict[str, Any]]:
        """Every message the bot sent, in the order sent, with its text after edits."""
        return [copy.deepcopy(record) for record in self._current.values()]

    def messages_in(self, chat_id: int, thread_id: int | None = None) -> list[dict[str, Any]]:
        """Messages the bot sent to `chat_id` (thread_id None → every thread), with text after edits."""
        return [
            copy.deepcopy(record)
            for (chat, _), record in self._current.items()
            if chat == chat_id and (thread_id is None or record["message_thread_id"] == thread_id)
        ]

    def methods(self) -> list[str]:
        """The lowercased method names of every request so far, in order."""
        return [method for method, _ in self.calls]

    def describe_state(self) -> str:
        return (
            f"sent={[(m['chat_id'], _summary(m)) for m in self.sent[-5:]]}, "
            f"last calls={[method for method, _ in self.calls[-10:]]}"
        )

    # -- faults ----------------------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        kind: FaultKind,
        *,
        times: int = 1,
        retry_after: int = 1,
        description: str | None = None,
    ) -> None:
        """Make the next `times` calls of `method` fail before doing anything.

        "429" → flood control with parameters.retry_after; "502" → an HTML Bad Gateway page, as
        a proxy sends; "drop" → the connection closes with no response; "400" → `description`
        (by default "Bad Request: injected"); "403" → `description` (by default the user blocked the bot);
        "hang" → no answer at all until the server stops (a process can be killed mid-send).
        method "file" → the next downloads from the file URL fail the same way.
        """
        if kind not in ("429", "502", "drop", "400", "403", "hang"):
            raise ValueError(f"unknown fault kind {kind!r}")
        if kind == "400":
            detail = description or "Bad Request: injected"
        elif kind == "403":
            detail = description or "Forbidden: bot was blocked by the user"
        else:
            detail = str(retry_after)
        self._faults[method.lower()].extend([(kind, retry_after, detail)] * times)

    # -- serving ---------------------------------------------------------------------------

    async def _not_found(self, request: web.Request) -> web.Response:
        return self._json(404, TelegramApiError(404, "Not Found").body())

    @staticmethod
    def _json(status: int, body: dict[str, Any]) -> web.Response:
        return web.Response(status=status, body=json.dumps(body).encode(), content_type="application/json")

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"].lower()
        try:
            params = await _read_params(request)
        except TelegramApiError as exc:
            self.calls.append((method, {}))
            self._notify()
            return self._json(exc.code, exc.body())
        self.calls.append((method, params))
        self._notify()
        try:
            token = request.match_info["token"]
            if token != self.token:
                if re.fullmatch(r"\d+:[\w-]+", token):
                    raise TelegramApiError(401, "Unauthorized")
                raise TelegramApiError(404, "Not Found")
            if (faulted := await self._injected_fault(method, request)) is not None:
                return faulted
            handler = self._handlers().get(method)
            if handler is None:
                raise TelegramApiError(404, "Not Found")
            result = handler(params)
            if inspect.isawaitable(result):
                result = await result
            return self._json(200, {"ok": True, "result": result})
        except TelegramApiError as exc:
            return self._json(exc.code, exc.body())
        finally:
            self._notify()

    async def _injected_fault(self, key: str, request: web.Request) -> web.StreamResponse | None:
        """Play the next fault queued for `key`: a response to send, or a TelegramApiError raised."""
        if not self._faults[key]:
            return None
        kind, retry_after, detail = self._faults[key].popleft()
        if kind == "hang":
            await asyncio.Event().wait()
        if kind == "drop":
            if request.transport is not None:
                request.transport.close()
            return web.Response()  # never reaches the client: the connection is gone
        if kind == "502":
            return web.Response(status=502, body=BAD_GATEWAY_HTML, content_type="text/html")
        if kind == "429":
            raise TelegramApiError(
                429, f"Too Many Requests: retry after {retry_after}", {"retry_after": retry_after}
            )
        raise TelegramApiError(403 if kind == "403" else 400, detail)

    async def _download(self, request: web.Request) -> web.StreamResponse:
        """GET /file/bot{token}/{file_path}: the bytes of a file getFile handed out."""
        try:
            if request.match_info["token"] != self.token:
                raise TelegramApiError(404, "Not Found")
            self.download_requests.append(request.match_info["file_path"])
            self._notify()
            if (faulted := await self._injected_fault("file", request)) is not None:
                return faulted
            stored = self._files_by_path.get(request.match_info["file_path"])
            if stored is None:
                raise TelegramApiError(404, "Not Found")
            self.downloads.append(stored.file_path)
            if stored.served is None and not stored.chunked:
                self.bytes_served[stored.file_path] = len(stored.data)
                return web.Response(body=stored.data, content_type="application/octet-stream")
            return await self._stream_file(request, stored)
        except TelegramApiError as exc:
            return self._json(exc.code, exc.body())
        finally:
            self._notify()

    async def _stream_file(self, request: web.Request, stored: _StoredFile) -> web.StreamResponse:
        """A file as serve() set it, written a chunk at a time until it ends or the client goes."""
        size = len(stored.data) if stored.served is None else stored.served
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        if stored.chunked:
            response.enable_chunked_encoding()
        else:
            response.content_length = size
        written = 0
        try:
            await response.prepare(request)
            head = stored.data[:size]
            await response.write(head)
            written = len(head)
            zeros = bytes(FILE_CHUNK)
            while written < size:
                chunk = zeros[: min(FILE_CHUNK, size - written)]
                await response.write(chunk)
                written += len(chunk)
            await response.write_eof()
        except ConnectionError:
            pass  # the client stopped reading and closed the connection
        finally:
            self.bytes_served[stored.file_path] = written
            self._notify()
        return response

    def _handlers(self) -> Mapping[str, Callable[[dict[str, Any]], Any]]:
        return {
            "getme": lambda p: self._get_me(),
            "getupdates": self._get_updates,
            "deletewebhook": self._delete_webhook,
            "setwebhook": self._set_webhook,
            "getwebhookinfo": lambda p: self._webhook_info(),
            "logout": lambda p: True,
            "close": lambda p: True,
            "setmycommands": self._set_my_commands,
            "getmycommands": lambda p: self._my_commands,
            "deletemycommands": self._delete_my_commands,
            "sendchataction": self._send_chat_action,
            "sendmessage": self._send_message,
            "editmessagetext": self._edit_message_text,
            "editmessagecaption": self._edit_message_caption,
            "getfile": self._get_file,
            **{method: self._media_sender(kind) for method, kind in _SEND_MEDIA.items()},
        }

    # -- methods ---------------------------------------------------------------------------

    def _get_me(self) -> dict[str, Any]:
        return {
            **self._bot_user,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
            "can_connect_to_business": False,
            "has_main_web_app": False,
        }

    async def _get_updates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        if self.webhook is not None:
            raise TelegramApiError(
                409,
                "Conflict: can't use getUpdates method while webhook is active; "
                "use deleteWebhook to delete the webhook first",
            )
        offset = int(params.get("offset") or 0)
        limit = min(max(int(params.get("limit") or 100), 1), 100)
        timeout = max(float(params.get("timeout") or 0), 0.0)
        if "allowed_updates" in params:
            self._allowed_updates = frozenset(params["allowed_updates"] or ()) or _DEFAULT_ALLOWED
        if offset > 0:
            self._confirmed_below = max(self._confirmed_below, offset)
        elif offset < 0 and self._updates:
            # A negative offset keeps only the last -offset updates; everything before is forgotten.
            keep = self._updates[offset:]
            self._confirmed_below = max(self._confirmed_below, keep[0]["update_id"])
        self.poll_times.append(asyncio.get_running_loop().time())
        # Like Telegram, a newer getUpdates ends any older one still waiting with 409 Conflict.
        self._poll_generation += 1
        generation = self._poll_generation
        self._notify()
        deadline = asyncio.get_running_loop().time() + timeout
        self._open_polls += 1
        try:
            while True:
                ready = [
                    u
                    for u in self._updates
                    if u["update_id"] >= self._confirmed_below and self._allowed_updates & u.keys()
                ]
                if ready:
                    return ready[:limit]
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0 or self._closing.is_set():
                    return []
                changed = self._changed
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await changed.wait()
                if generation != self._poll_generation:
                    self.conflicts += 1
                    raise TelegramApiError(
                        409,
                        "Conflict: terminated by other getUpdates request; "
                        "make sure that only one bot instance is running",
                    )
        finally:
            self._open_polls -= 1

    def _set_webhook(self, params: dict[str, Any]) -> bool:
        if not params.get("url"):
            return self._delete_webhook(params)
        self.webhook = {k: v for k, v in params.items() if k != "certificate"}
        if params.get("drop_pending_updates"):
            self._drop_pending()
        return True

    def _delete_webhook(self, params: dict[str, Any]) -> bool:
        self.webhook = None
        if params.get("drop_pending_updates"):
            self._drop_pending()
        return True

    def _drop_pending(self) -> None:
        self._confirmed_below = self._next_update_id

    def _webhook_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "url": (self.webhook or {}).get("url", ""),
            "has_custom_certificate": False,
            "pending_update_count": len(self.pending_updates),
        }
        for key in ("max_connections", "allowed_updates", "ip_address"):
            if self.webhook and key in self.webhook:
                info[key] = self.webhook[key]
        return info

    def _set_my_commands(self, params: dict[str, Any]) -> bool:
        commands = params.get("commands")
        if not isinstance(commands, list) or len(commands) > 100:
            raise _bad_request("parameter commands must be an array of at most 100 BotCommand")
        for command in commands:
            if not isinstance(command, dict) or not _COMMAND_NAME.fullmatch(str(command.get("command", ""))):
                raise _bad_request("BOT_COMMAND_INVALID")
            if not 1 <= len(str(command.get("description", ""))) <= 256:
                raise _bad_request("BOT_COMMAND_DESCRIPTION_INVALID")
        self.commands.append(commands)
        self._my_commands = commands
        return True

    def _delete_my_commands(self, params: dict[str, Any]) -> bool:
        self._my_commands = []
        return True

    def _send_chat_action(self, params: dict[str, Any]) -> bool:
        chat_id = self._chat_id(params)
        action = params.get("action")
        if action not in _CHAT_ACTIONS:
            raise _bad_request("wrong parameter action in request")
        self.chat_actions.append(
            {"chat_id": chat_id, "action": action, "message_thread_id": params.get("message_thread_id")}
        )
        return True

    def _send_message(self, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = self._chat_id(params)
        text, entities = self._render(params, too_long="message is too long")
        thread_id, target = self._reply_context(params, chat_id)
        message = self._new_message(chat_id, params, thread_id, target)
        message["text"] = text
        if entities:
            message["entities"] = entities
        if isinstance(params.get("link_preview_options"), dict):
            message["link_preview_options"] = params["link_preview_options"]
        self._messages[(chat_id, message["message_id"])] = message
        self._record(message, params, text=text, raw_text=params.get("text"), entities=entities)
        return message

    def _media_sender(self, kind: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
        return lambda params: self._send_media(kind, params)

    def _caption(self, params: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        """A media message's caption, rendered and checked like a message's text (limit 1024)."""
        return self._render(
            params,
            field="caption",
            entities_field="caption_entities",
            limit=MAX_CAPTION_UTF16,
            too_long="message caption is too long",
            optional=True,
        )

    def _send_media(self, kind: str, params: dict[str, Any]) -> dict[str, Any]:
        """sendPhoto, sendDocument, sendVoice, sendAudio: the file in params[kind], an optional caption."""
        chat_id = self._chat_id(params)
        caption, entities = self._caption(params)
        thread_id, target = self._reply_context(params, chat_id)
        given = self._input_file(kind, params)  # last: a refused send stores no file
        stored = given.stored
        message = self._new_message(chat_id, params, thread_id, target)
        if kind == "photo":
            # An upload gets a thumbnail too; a photo sent again by file_id or URL just its one size.
            message["photo"] = self._photo_sizes(stored, thumbnail=given.source == "upload")
        else:
            duration = params.get("duration")
            duration = duration if isinstance(duration, int) and not isinstance(duration, bool) else 1
            message[kind] = self._media_object(kind, stored, duration=duration)
        if caption:
            message["caption"] = caption
        if entities:
            message["caption_entities"] = entities
        self._messages[(chat_id, message["message_id"])] = message
        self._record(
            message,
            params,
            text=caption,
            raw_text=params.get("caption") if isinstance(params.get("caption"), str) else None,
            entities=entities,
            media=kind,
            file_id=stored.file_id,
        )
        self.sent_files.append(
            {
                "method": f"send{kind}",
                "media": kind,
                "chat_id": chat_id,
                "message_id": message["message_id"],
                "file_id": stored.file_id,
                "filename": given.filename,
                "content_type": given.content_type,
                "data": stored.data,
                "caption": caption or None,
                "source": given.source,
                "url": stored.url,
            }
        )
        return message

    def _input_file(self, kind: str, params: dict[str, Any]) -> _InputFile:
        """The file params[kind] gives: an uploaded part, stored now, a known file_id or a URL."""
        value = params.get(kind)
        if isinstance(value, str) and value.startswith("attach://"):
            value = params.get(value.removeprefix("attach://"))
        if isinstance(value, dict) and "data" in value:  # a multipart part (see _read_multipart)
            if value["size"] == 0:
                raise _bad_request("file must be non-empty")
            if kind == "photo" and value["size"] > MAX_PHOTO_UPLOAD_BYTES:
                raise _bad_request("PHOTO_SAVE_FILE_INVALID")
            name, content_type = value["filename"], value["content_type"]
            if kind == "photo":  # Telegram recompresses a photo to JPEG; its sizes carry no name
                stored = self._store(kind, value["data"])
            else:
                stored = self._store(kind, value["data"], file_name=name, mime_type=content_type)
            return _InputFile(stored, "upload", name, content_type)
        if isinstance(value, str) and value:
            if value in self._files:
                known = self._files[value]
                return _InputFile(known, "file_id", known.file_name, known.mime_type)
            if re.match(r"https?://[^\s/]+", value):
                name = PurePosixPath(value.split("?", 1)[0]).name or None
                return _InputFile(self._store(kind, b"", file_name=name, url=value), "url", name, None)
            raise _bad_request("wrong file identifier/HTTP URL specified")
        raise _bad_request(f"there is no {kind} in the request")

    def _get_file(self, params: dict[str, Any]) -> dict[str, Any]:
        file_id = params.get("file_id")
        stored = self._files.get(file_id) if isinstance(file_id, str) else None
        if stored is None:
            raise _bad_request("invalid file_id")
        if stored.file_size > MAX_DOWNLOAD_BYTES:
            raise _bad_request("file is too big")
        return {**stored.fields(), "file_path": stored.file_path}

    def _edit_message_text(self, params: dict[str, Any]) -> dict[str, Any]:
        if "chat_id" not in params or "message_id" not in params:
            raise _bad_request("message to edit not found")
        chat_id = self._chat_id(params)
        message_id = params["message_id"]
        text, entities = self._render(params, too_long="MESSAGE_TOO_LONG")
        message = self._messages.get((chat_id, message_id))
        if message is None:
            raise _bad_request("message to edit not found")
        if message["from"]["id"] != self.bot_id:
            raise _bad_request("message can't be edited")
        if "text" not in message:
            if _media_kind(message) is not None:
                raise _bad_request("there is no text in the message to edit")
            raise _bad_request("message can't be edited")
        return self._apply_edit(message, params, ("text", "entities"), text, entities)

    def _edit_message_caption(self, params: dict[str, Any]) -> dict[str, Any]:
        if "chat_id" not in params or "message_id" not in params:
            raise _bad_request("message to edit not found")
        chat_id = self._chat_id(params)
        message_id = params["message_id"]
        caption, entities = self._caption(params)
        message = self._messages.get((chat_id, message_id))
        if message is None:
            raise _bad_request("message to edit not found")
        if message["from"]["id"] != self.bot_id:
            raise _bad_request("message can't be edited")
        if _media_kind(message) is None:
            raise _bad_request("there is no caption in the message to edit")
        return self._apply_edit(message, params, ("caption", "caption_entities"), caption, entities)

    def _apply_edit(
        self,
        message: dict[str, Any],
        params: dict[str, Any],
        fields: tuple[str, str],
        text: str,
        entities: list[dict[str, Any]],
    ) -> dict[str, Any]:
        """Set a message's text or caption (fields: it and its entities' key) as an edit records it."""
        field, entities_field = fields
        markup = params.get("reply_markup")
        new_markup = markup if isinstance(markup, dict) and "inline_keyboard" in markup else None
        if (text, entities, new_markup) == (
            message.get(field, ""),
            message.get(entities_field, []),
            message.get("reply_markup"),
        ):
            raise TelegramApiError(400, NOT_MODIFIED)
        message.pop(field, None)
        if text or field == "text":
            message[field] = text
        message.pop(entities_field, None)
        if entities:
            message[entities_field] = entities
        message.pop("reply_markup", None)
        if new_markup is not None:
            message["reply_markup"] = new_markup
        message["edit_date"] = max(int(time.time()), message["date"])
        chat_id, message_id = message["chat"]["id"], message["message_id"]
        edit: dict[str, Any] = {
            "chat_id": chat_id,
            "message_id": message_id,
            "text": text,
            "raw_text": params.get(field),
            "parse_mode": params.get("parse_mode"),
            "entities": entities,
        }
        if field == "caption":
            edit["media"] = _media_kind(message)
        self.edits.append(edit)
        current = self._current[(chat_id, message_id)]
        current.update({k: v for k, v in edit.items() if k not in ("chat_id", "message_id", "media")})
        current["edit_count"] += 1
        return copy.deepcopy(message)

    def _reply_context(
        self, params: dict[str, Any], chat_id: int
    ) -> tuple[int | None, dict[str, Any] | None]:
        """(message_thread_id, the message replied to) of a send, both checked."""
        thread_id = params.get("message_thread_id")
        if thread_id == 1:
            raise _bad_request("message thread not found")
        reply = params.get("reply_parameters")
        if not isinstance(reply, dict):
            reply = {}
        reply_to = reply.get("message_id", params.get("reply_to_message_id"))
        reply_chat = reply.get("chat_id", chat_id)
        allow_missing = reply.get("allow_sending_without_reply", params.get("allow_sending_without_reply"))
        target = self._messages.get((reply_chat, reply_to)) if reply_to is not None else None
        if reply_to is not None and target is None and not allow_missing:
            raise _bad_request("message to be replied not found")
        return thread_id, target

    def _new_message(
        self,
        chat_id: int,
        params: dict[str, Any],
        thread_id: int | None,
        target: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """A Message from the bot with the next id in chat_id: thread, reply and inline keyboard set."""
        message: dict[str, Any] = {
            "message_id": self._take_message_id(chat_id),
            "date": int(time.time()),
            "chat": self._chat(chat_id),
            "from": dict(self._bot_user),
        }
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            message["is_topic_message"] = True
        if target is not None:
            message["reply_to_message"] = {k: v for k, v in target.items() if k != "reply_to_message"}
        markup = params.get("reply_markup")
        if isinstance(markup, dict) and "inline_keyboard" in markup:
            message["reply_markup"] = markup
        return message

    def _record(
        self,
        message: dict[str, Any],
        params: dict[str, Any],
        *,
        text: str,
        raw_text: str | None,
        entities: list[dict[str, Any]],
        media: str | None = None,
        file_id: str | None = None,
    ) -> None:
        """Append a sent message to `sent` and keep its current state for messages()/messages_in()."""
        reply = message.get("reply_to_message")
        record = {
            "message_id": message["message_id"],
            "chat_id": message["chat"]["id"],
            "text": text,
            "raw_text": raw_text,
            "parse_mode": params.get("parse_mode"),
            "entities": entities,
            "reply_to_message_id": reply["message_id"] if reply is not None else None,
            "message_thread_id": message.get("message_thread_id"),
            "disable_notification": bool(params.get("disable_notification", False)),
            "link_preview_options": params.get("link_preview_options"),
            "reply_markup": params.get("reply_markup"),
            "date": message["date"],
            "edit_count": 0,
            "media": media,
            "file_id": file_id,
        }
        self.sent.append(record)
        self._current[(record["chat_id"], record["message_id"])] = copy.deepcopy(record)
        if self.on_sent is not None:
            self.on_sent(record)

    # -- helpers ---------------------------------------------------------------------------

    def _render(
        self,
        params: dict[str, Any],
        *,
        too_long: str,
        field: str = "text",
        entities_field: str = "entities",
        limit: int = MAX_TEXT_UTF16,
        optional: bool = False,
    ) -> tuple[str, list[dict[str, Any]]]:
        """The visible text and entities of params[field], validated as Telegram does.

        optional (a caption) → ("", []) where a text would be refused as empty.
        """
        raw = params.get(field)
        if not isinstance(raw, str) or not raw.strip():
            if optional:
                return "", []
            raise _bad_request("message text is empty")
        parse_mode = params.get("parse_mode")
        entities = params.get(entities_field)
        if isinstance(entities, list):
            text, found = raw, [dict(e) for e in entities]
        elif parse_mode is None or parse_mode == "":
            text, found = raw, []
        elif str(parse_mode).lower() == "html":
            text, found = _TelegramHTML.parse(raw)
        elif str(parse_mode).lower() in ("markdown", "markdownv2"):
            text, found = raw, []  # not modelled: the text is taken as it is
        else:
            raise _bad_request(f"unsupported parse_mode {parse_mode!r}")
        text, found = _trim(text, found)
        if not text:
            if optional:
                return "", []
            raise _bad_request("message text is empty")
        if utf16_len(text) > limit:
            raise _bad_request(too_long)
        return text, found

    def _chat_id(self, params: dict[str, Any]) -> int:
        chat_id = params.get("chat_id")
        if chat_id is None or chat_id == "":
            raise _bad_request("chat_id is empty")
        if not isinstance(chat_id, int) or isinstance(chat_id, bool):
            raise _bad_request("chat not found")
        return chat_id

    def _chat(self, chat_id: int) -> dict[str, Any]:
        if chat_id in self._chats:
            return dict(self._chats[chat_id])
        if chat_id > 0:
            return {"id": chat_id, "type": "private", "first_name": "User"}
        kind = "supergroup" if str(chat_id).startswith("-100") else "group"
        return {"id": chat_id, "type": kind, "title": f"Test chat {chat_id}"}

    def _take_message_id(self, chat_id: int) -> int:
        message_id = self._next_message_id[chat_id]
        self._next_message_id[chat_id] += 1
        return message_id

    def _reply_target(self, message: dict[str, Any]) -> dict[str, Any]:
        chat_id = message["chat"]["id"] if "chat" in message else message.get("chat_id", 0)
        # 0 where an id is missing: no chat or message has it, so the message stands for itself.
        target = self._messages.get((chat_id, message.get("message_id", 0)), message)
        return {k: v for k, v in copy.deepcopy(target).items() if k != "reply_to_message"}

    def _enqueue(self, kind: str, payload: dict[str, Any]) -> None:
        self._updates.append({"update_id": self._next_update_id, kind: payload})
        self._next_update_id += 1
        self._notify()


async def _read_params(request: web.Request) -> dict[str, Any]:
    """The parameters of a Bot API call from the query string and a JSON, form or multipart body."""
    params: dict[str, Any] = dict(request.query)
    if request.can_read_body:
        if request.content_type == "application/json":
            try:
                body = await request.json()
            except ValueError:
                raise _bad_request("can't parse JSON encoded request body") from None
            if not isinstance(body, dict):
                raise _bad_request("JSON object expected")
            params.update(body)
        elif request.content_type == "multipart/form-data":
            params.update(await _read_multipart(request))
        elif request.content_type == "application/x-www-form-urlencoded":
            params.update((await request.post()).items())
        else:
            await request.read()
    return {key: _decode(key, value) for key, value in params.items()}


async def _read_multipart(request: web.Request) -> dict[str, Any]:
    """The fields of a multipart body; a file part becomes {filename, content_type, size, data}.

    Read part by part (aiohttp's request.post() stops at 1 MB); a part over MAX_UPLOAD_BYTES is read
    to its end without being kept and the request is refused with 413, as Telegram's front end does.
    """
    params: dict[str, Any] = {}
    too_large = False
    reader = await request.multipart()
    while (part := await reader.next()) is not None:
        if not isinstance(part, BodyPartReader) or part.name is None:
            continue  # nested multipart or a nameless part: skipped (next() reads past it)
        if part.filename is None:
            params[part.name] = await part.text()
            continue
        data = bytearray()
        size = 0
        while chunk := await part.read_chunk(1 << 16):
            size += len(chunk)
            if size <= MAX_UPLOAD_BYTES:
                data.extend(chunk)
        too_large = too_large or size > MAX_UPLOAD_BYTES
        params[part.name] = {
            "filename": part.filename,
            "content_type": part.headers.get(hdrs.CONTENT_TYPE, "application/octet-stream"),
            "size": size,
            "data": bytes(data) if size <= MAX_UPLOAD_BYTES else b"",
        }
    if too_large:
        raise TelegramApiError(413, "Request Entity Too Large")
    return params


def _media_kind(message: dict[str, Any]) -> str | None:
    """Which of photo, document, voice, audio a message carries, if any."""
    return next((kind for kind in _MEDIA_FOLDERS if kind in message), None)


def _summary(record: dict[str, Any]) -> str:
    """A sent record in a few words, for describe_state."""
    text = str(record["text"])[:40]
    return f"[{record['media']}] {text}" if record.get("media") else text


def _decode(key: str, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    if key in _JSON_FIELDS:
        try:
            return json.loads(value)
        except ValueError:
            return value
    if key in _INT_FIELDS:
        with contextlib.suppress(ValueError):
            return int(value)
        with contextlib.suppress(ValueError):
            return float(value)
    if key in _BOOL_FIELDS and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value
