"""A fake Slack on 127.0.0.1 that the real slack_sdk talks to: the Web API and Socket Mode.

Web API, under {origin}/api/ (point AsyncWebClient's base_url, i.e. [slack] api_base, at `api_base`):
auth.test, apps.connections.open (answers this server's own ws:// address), chat.postMessage,
chat.update, files.getUploadURLExternal, the upload URL it hands out, files.completeUploadExternal.
Answers have Slack's shapes: `{"ok": true, ...}`, or `{"ok": false, "error": "channel_not_found"}`
with HTTP 200; 429 with Retry-After; a token of the wrong kind is `not_allowed_token_type`.

Socket Mode, at the address apps.connections.open gave: `hello` on connect, then events_api envelopes
(`dm()`, `post()`, `push_event()`, `push_raw()`). Every envelope waits for its `envelope_id` to come
back; one not acknowledged is sent again, with retry_attempt counting up, on the next connection or
on `redeliver_unacked()`. `disconnect()` asks the client to reconnect as Slack does every few hours;
`drop_socket()` cuts the connection.

Files: a user's message may carry Uploads, served at url_private only with the bot token (without
it, Slack's sign-in page, with HTTP 200, as Slack does).

Faults (`fail_next(method, kind)`): "429" (ratelimited, with Retry-After), "500", "drop" (the
connection closes before the request is carried out), "hang" (carried out, then no answer until the
server stops: a read timeout on the client's side), "error" (`{"ok": false, "error": <error>}`, e.g.
a refusal such as not_in_channel).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
import uuid
from collections import OrderedDict, defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qsl

from aiohttp import WSMsgType, web

from devkit.fakes.loopback import LoopbackServer

FaultKind = Literal["429", "500", "drop", "hang", "error"]

MAX_TEXT = 40_000  # chat.postMessage refuses longer text (msg_too_long)
APP_ID = "A0FAKEAPP"
SIGN_IN_PAGE = b"<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in to Slack</body></html>"
FILE_CHUNK = 64 * 1024


@dataclass(frozen=True)
class Upload:
    """A file on a user's message. `size` overrides the advertised size (the download is padded or
    cut to it), so a test can announce a large file without allocating it; `served` makes the download
    stream that many bytes whatever `size` says (a file that lies about its size). `voice` makes it a
    clip recorded in Slack (subtype slack_audio)."""

    name: str
    mimetype: str
    data: bytes
    size: int | None = None
    served: int | None = None
    voice: bool = False
    mode: str = "hosted"


@dataclass(eq=False)
class _Conn:
    ws: web.WebSocketResponse
    request: web.Request
    outbox: asyncio.Queue[str | None] = field(default_factory=asyncio.Queue)


class _Error(Exception):
    def __init__(self, error: str, status: int = 200) -> None:
        super().__init__(error)
        self.error = error
        self.status = status


class FakeSlack(LoopbackServer):
    """One workspace with one app. Build the world with user() and channel(); push traffic with dm(),
    post(), push_event(); read what the bot did from `posted` (its messages, as they read now),
    `updates`, `requests`, `acks` and `uploads`; wait_for() re-checks a predicate after every change."""

    def __init__(
        self,
        *,
        bot_token: str = "xoxb-fake-bot-token",
        app_token: str = "xapp-1-fake-app-token",
        team_id: str = "T0FAKE",
        bot_user_id: str = "U0BOT",
        bot_id: str = "B0BOT",
        bot_name: str = "bridge",
    ) -> None:
        super().__init__()
        self.bot_token = bot_token
        self.app_token = app_token
        self.team_id = team_id
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.bot_name = bot_name
        # Records.
        self.requests: list[dict[str, Any]] = []  # method, args, at, status ("drop"/"hang" too)
        self.posted: list[dict[str, Any]] = []  # the bot's messages; chat.update changes them in place
        self.updates: list[dict[str, Any]] = []  # channel, ts, text, at
        self.uploads: dict[str, dict[str, Any]] = {}  # file id → filename, length, data, shared
        self.downloads: list[dict[str, Any]] = []  # file id, authorized, status, at
        self.envelopes: list[dict[str, Any]] = []  # every envelope written to a socket (resends too)
        self.acks: list[str] = []
        self.connections = 0  # Socket Mode connections opened
        # World.
        self._users: dict[str, dict[str, Any]] = {}
        self._channels: dict[str, dict[str, Any]] = {}
        self._messages: dict[tuple[str, str], dict[str, Any]] = {}
        self._files: dict[str, tuple[Upload, bytes]] = {}
        self._ts = itertools.count(1)
        self._ids = itertools.count(1)
        # Socket Mode.
        self._tickets: set[str] = set()
        self._conns: list[_Conn] = []
        self._unacked: OrderedDict[str, dict[str, Any]] = OrderedDict()
        # Faults.
        self._faults: defaultdict[str, deque[tuple[FaultKind, float, str]]] = defaultdict(deque)
        self.user(bot_user_id, bot_name, bot=True)

    @property
    def api_base(self) -> str:
        return f"{self.origin}/api"

    # -- the world -----------------------------------------------------------------------------

    def user(self, user_id: str, name: str, *, bot: bool = False) -> dict[str, Any]:
        found = {"id": user_id, "name": name, "is_bot": bot, "team_id": self.team_id}
        self._users[user_id] = found
        return found

    def channel(
        self,
        channel_id: str,
        name: str,
        *,
        private: bool = False,
        archived: bool = False,
        member: bool = True,
    ) -> dict[str, Any]:
        """A channel (C…, or G… private); the bot is a member unless `member` is False."""
        found = {
            "id": channel_id,
            "name": name,
            "is_private": private,
            "is_archived": archived,
            "is_im": False,
            "bot_member": member,
        }
        self._channels[channel_id] = found
        return found

    def dm_channel(self, user_id: str) -> str:
        """The id of the DM between the bot and this user (D…), made on first use."""
        channel_id = "D" + user_id.removeprefix("U")
        if channel_id not in self._channels:
            self._channels[channel_id] = {
                "id": channel_id,
                "is_im": True,
                "user": user_id,
                "is_archived": False,
                "bot_member": True,
            }
        return channel_id

    def archive(self, channel_id: str) -> None:
        self._channels[channel_id]["is_archived"] = True

    def _next_ts(self) -> str:
        return f"{int(time.time())}.{next(self._ts):06d}"

    # -- what the bot did ----------------------------------------------------------------------

    def messages_in(self, channel: str, thread_ts: str | None = None) -> list[dict[str, Any]]:
        """The bot's messages in a channel as they read now: at the top level, or in one thread."""
        return [m for m in self.posted if m["channel"] == channel and m.get("thread_ts") == thread_ts]

    def calls(self, method: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["method"] == method]

    def file_bytes(self, file_id: str) -> bytes:
        return bytes(self.uploads[file_id]["data"] or b"")

    def describe_state(self) -> str:
        recent = [f"{r['method']}→{r['status']}" for r in self.requests[-8:]]
        texts = [m["text"][:60] for m in self.posted[-5:]]
        return f"requests {recent}; posted {texts}; unacked {list(self._unacked)}"

    # -- faults --------------------------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        kind: FaultKind,
        *,
        times: int = 1,
        retry_after: float = 1,
        error: str = "internal_error",
    ) -> None:
        """Make the next `times` calls of `method` fail; see the module's docstring for the kinds."""
        if kind not in ("429", "500", "drop", "hang", "error"):
            raise ValueError(f"unknown fault kind {kind!r}")
        self._faults[method].extend([(kind, retry_after, error)] * times)

    # -- traffic in ----------------------------------------------------------------------------

    def dm(
        self, user: str, text: str, *, files: tuple[Upload, ...] = (), thread_ts: str | None = None
    ) -> dict:
        """A user's DM to the bot (message.im); returns the message (its channel and ts)."""
        event = self.dm_event(user, text, files=files, thread_ts=thread_ts)
        self.push_event(event)
        return event

    def dm_event(
        self, user: str, text: str, *, files: tuple[Upload, ...] = (), thread_ts: str | None = None
    ) -> dict[str, Any]:
        """The message.im event of a user's DM, written in the DM but not pushed (push_event does)."""
        channel = self.dm_channel(user)
        return {**self._message(channel, user, text, files, thread_ts), "channel_type": "im"}

    def post(
        self,
        channel: str,
        user: str,
        text: str,
        *,
        files: tuple[Upload, ...] = (),
        thread_ts: str | None = None,
        app_mention: bool | None = None,
    ) -> dict:
        """A user's message in a channel (message.channels / message.groups, in a thread with
        thread_ts). A message that mentions the bot also comes as an app_mention event, as it does
        to an app subscribed to both, unless `app_mention` is False."""
        found = self._channels[channel]
        message = self._message(channel, user, text, files, thread_ts)
        self.push_event({**message, "channel_type": "group" if found.get("is_private") else "channel"})
        mentions = f"<@{self.bot_user_id}>" in text
        if app_mention if app_mention is not None else mentions:
            mention = {
                k: v for k, v in message.items() if k in ("user", "text", "ts", "channel", "thread_ts")
            }
            self.push_event(
                {"type": "app_mention", **mention, "event_ts": message["ts"], "team": self.team_id}
            )
        return message

    def _message(
        self, channel: str, user: str, text: str, files: tuple[Upload, ...], thread_ts: str | None
    ) -> dict[str, Any]:
        ts = self._next_ts()
        message: dict[str, Any] = {
            "type": "message",
            "channel": channel,
            "user": user,
            "text": text,
            "ts": ts,
            "event_ts": ts,
            "team": self.team_id,
            "client_msg_id": str(uuid.uuid4()),
        }
        if thread_ts is not None:
            message["thread_ts"] = thread_ts
            parent = self._messages.get((channel, thread_ts))
            if parent is not None:
                message["parent_user_id"] = parent["user"]
        if files:
            message["subtype"] = "file_share"
            message["upload"] = False
            message["files"] = [self._file_object(upload, user) for upload in files]
        self._messages[(channel, ts)] = message
        return message

    def _file_object(self, upload: Upload, user: str) -> dict[str, Any]:
        file_id = f"F{next(self._ids):08d}"
        data = upload.data
        size = upload.size if upload.size is not None else len(data)
        self._files[file_id] = (upload, data)
        base = f"{self.origin}/files-pri/{self.team_id}-{file_id}"
        found: dict[str, Any] = {
            "id": file_id,
            "created": int(time.time()),
            "timestamp": int(time.time()),
            "name": upload.name,
            "title": upload.name,
            "mimetype": upload.mimetype,
            "filetype": upload.name.rsplit(".", 1)[-1] if "." in upload.name else "binary",
            "user": user,
            "size": size,
            "mode": upload.mode,
            "is_external": False,
            "url_private": f"{base}/{upload.name}",
            "url_private_download": f"{base}/download/{upload.name}",
        }
        if upload.voice:
            found["subtype"] = "slack_audio"
        return found

    def push_event(self, event: dict[str, Any]) -> dict[str, Any]:
        """An events_api envelope around `event`; returns the envelope."""
        envelope = {
            "envelope_id": str(uuid.uuid4()),
            "type": "events_api",
            "accepts_response_payload": False,
            "retry_attempt": 0,
            "retry_reason": "",
            "payload": {
                "token": "fake-verification-token",
                "team_id": self.team_id,
                "api_app_id": APP_ID,
                "event": event,
                "type": "event_callback",
                "event_id": f"Ev{next(self._ids):010d}",
                "event_time": int(time.time()),
                "authorizations": [{"team_id": self.team_id, "user_id": self.bot_user_id, "is_bot": True}],
                "is_ext_shared_channel": False,
            },
        }
        self.push_raw(envelope)
        return envelope

    def push_raw(self, envelope: dict[str, Any]) -> None:
        """Any envelope, as given; one with an envelope_id waits for its acknowledgement."""
        envelope_id = envelope.get("envelope_id")
        if isinstance(envelope_id, str):
            self._unacked[envelope_id] = envelope
        self._write(envelope)

    def redeliver_unacked(self) -> None:
        """Send every envelope not acknowledged yet again, as Slack does after its timeout."""
        for envelope in list(self._unacked.values()):
            self._write(self._retried(envelope))

    def _retried(self, envelope: dict[str, Any]) -> dict[str, Any]:
        envelope["retry_attempt"] = int(envelope.get("retry_attempt", 0)) + 1
        envelope["retry_reason"] = "timeout"
        return envelope

    def _write(self, message: dict[str, Any]) -> None:
        conn = self._conns[-1] if self._conns else None
        if conn is None:
            return  # held in _unacked until a connection opens
        if "envelope_id" in message:
            self.envelopes.append(json.loads(json.dumps(message)))
        conn.outbox.put_nowait(json.dumps(message))
        self._notify()

    def disconnect(self, reason: str = "refresh_requested") -> None:
        """Ask the client to reconnect (Slack does so every few hours, and before a deploy)."""
        self._write({"type": "disconnect", "reason": reason, "debug_info": {"host": "applink-fake"}})

    def drop_socket(self) -> None:
        """Cut the current Socket Mode connection without a close frame."""
        if self._conns and self._conns[-1].request.transport is not None:
            self._conns[-1].request.transport.close()

    # -- serving -------------------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_post("/upload/v1/{file_id}", self._upload)
        app.router.add_get("/files-pri/{team_file}/{tail:.+}", self._download)
        app.router.add_get("/link/", self._socket)

    async def stop(self) -> None:
        for conn in list(self._conns):
            conn.outbox.put_nowait(None)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.ws.close(), 1.0)
        await super().stop()

    async def _args(self, request: web.Request) -> dict[str, Any]:
        args: dict[str, Any] = dict(request.query)
        if request.method == "POST" and request.body_exists:
            if request.content_type == "application/json":
                body = await request.json()
                if isinstance(body, dict):
                    args.update(body)
            elif request.content_type == "multipart/form-data":
                form = await request.post()
                args.update({k: v for k, v in form.items() if isinstance(v, str)})
            else:
                args.update(parse_qsl((await request.read()).decode(), keep_blank_values=True))
        return args

    def _token_of(self, request: web.Request, args: dict[str, Any]) -> str:
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer "):
            return header.removeprefix("Bearer ")
        return str(args.pop("token", ""))

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        args = await self._args(request)
        token = self._token_of(request, args)
        record: dict[str, Any] = {"method": method, "args": args, "at": time.monotonic(), "status": None}
        self.requests.append(record)
        self._notify()
        fault = self._faults[method].popleft() if self._faults[method] else None
        if fault is not None:
            kind, retry_after, error = fault
            record["status"] = kind
            if kind == "drop":
                if request.transport is not None:
                    request.transport.close()
                return web.Response()  # never reaches the client: the connection is gone
            if kind == "429":
                return web.json_response(
                    {"ok": False, "error": "ratelimited"},
                    status=429,
                    headers={"Retry-After": str(retry_after)},
                )
            if kind == "500":
                return web.json_response({"ok": False, "error": "internal_error"}, status=500)
            if kind == "error":
                return web.json_response({"ok": False, "error": error})
        try:
            body = self._call(method, args, token)
        except _Error as exc:
            record["status"] = exc.error
            self._notify()
            return web.json_response({"ok": False, "error": exc.error}, status=exc.status)
        record["status"] = "ok"
        self._notify()
        if fault is not None and fault[0] == "hang":
            record["status"] = "hang"
            # Carried out, never answered: the client's read times out with the message posted.
            await self._closing.wait()
        return web.json_response({"ok": True, **body})

    def _call(self, method: str, args: dict[str, Any], token: str) -> dict[str, Any]:
        if method == "apps.connections.open":
            self._authorize(token, app=True)
            ticket = uuid.uuid4().hex
            self._tickets.add(ticket)
            ws = self.origin.replace("http://", "ws://", 1)
            return {"url": f"{ws}/link/?ticket={ticket}&app_id={APP_ID}"}
        self._authorize(token, app=False)
        if method == "auth.test":
            return {
                "url": "https://fake.slack.com/",
                "team": "Fake",
                "user": self.bot_name,
                "team_id": self.team_id,
                "user_id": self.bot_user_id,
                "bot_id": self.bot_id,
                "is_enterprise_install": False,
            }
        if method == "chat.postMessage":
            return self._post_message(args)
        if method == "chat.update":
            return self._update(args)
        if method == "files.getUploadURLExternal":
            return self._upload_url(args)
        if method == "files.completeUploadExternal":
            return self._complete_upload(args)
        raise _Error("unknown_method", 404)

    def _authorize(self, token: str, *, app: bool) -> None:
        if not token:
            raise _Error("not_authed")
        if token in (self.app_token, self.bot_token) and (token == self.app_token) != app:
            raise _Error("not_allowed_token_type")
        if token != (self.app_token if app else self.bot_token):
            raise _Error("invalid_auth")

    def _writable(self, channel_id: Any) -> dict[str, Any]:
        found = self._channels.get(str(channel_id))
        if found is None:
            raise _Error("channel_not_found")
        if found["is_archived"]:
            raise _Error("is_archived")
        if not found["bot_member"]:
            raise _Error("not_in_channel")
        return found

    def _post_message(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._writable(args.get("channel"))
        text = args.get("text")
        if not isinstance(text, str) or not text:
            raise _Error("no_text")
        if len(text) > MAX_TEXT:
            raise _Error("msg_too_long")
        message = self._bot_message(channel["id"], text, args.get("thread_ts"))
        message["_request"] = dict(args)
        return {"channel": channel["id"], "ts": message["ts"], "message": _public(message)}

    def _bot_message(self, channel: str, text: str, thread_ts: Any) -> dict[str, Any]:
        ts = self._next_ts()
        message: dict[str, Any] = {
            "type": "message",
            "channel": channel,
            "user": self.bot_user_id,
            "bot_id": self.bot_id,
            "app_id": APP_ID,
            "text": text,
            "ts": ts,
            "team": self.team_id,
        }
        if isinstance(thread_ts, str) and thread_ts:
            message["thread_ts"] = thread_ts
        self._messages[(channel, ts)] = message
        self.posted.append(message)
        return message

    def _update(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._writable(args.get("channel"))
        message = self._messages.get((channel["id"], str(args.get("ts"))))
        if message is None:
            raise _Error("message_not_found")
        if message.get("user") != self.bot_user_id:
            raise _Error("cant_update_message")
        text = args.get("text")
        if not isinstance(text, str) or not text:
            raise _Error("no_text")
        if len(text) > MAX_TEXT:
            raise _Error("msg_too_long")
        message["text"] = text
        message["edited"] = {"user": self.bot_user_id, "ts": self._next_ts()}
        self.updates.append(
            {"channel": channel["id"], "ts": message["ts"], "text": text, "at": time.monotonic()}
        )
        return {"channel": channel["id"], "ts": message["ts"], "text": text, "message": _public(message)}

    def _upload_url(self, args: dict[str, Any]) -> dict[str, Any]:
        filename, length = args.get("filename"), args.get("length")
        if not filename:
            raise _Error("invalid_arguments")
        try:
            size = int(str(length))
        except ValueError:
            raise _Error("invalid_arguments") from None
        file_id = f"F{next(self._ids):08d}"
        self.uploads[file_id] = {"filename": filename, "length": size, "data": None, "shared": None}
        return {"upload_url": f"{self.origin}/upload/v1/{file_id}", "file_id": file_id}

    async def _upload(self, request: web.Request) -> web.Response:
        upload = self.uploads.get(request.match_info["file_id"])
        data = await request.read()
        if upload is None:
            return web.Response(status=404, text="not found", content_type="text/plain")
        if len(data) != upload["length"]:
            return web.Response(status=400, text="length mismatch", content_type="text/plain")
        upload["data"] = data
        self._notify()
        return web.Response(text=f"OK - {len(data)}", content_type="text/plain")

    def _complete_upload(self, args: dict[str, Any]) -> dict[str, Any]:
        try:
            files = json.loads(str(args.get("files")))
        except ValueError:
            raise _Error("invalid_arguments") from None
        if not isinstance(files, list) or not files:
            raise _Error("invalid_arguments")
        shared = []
        for item in files:
            upload = self.uploads.get(str(item.get("id")))
            if upload is None or upload["data"] is None:
                raise _Error("file_not_found")
            shared.append((str(item["id"]), upload, item.get("title") or upload["filename"]))
        channel_id = args.get("channel_id")
        objects = [
            {"id": file_id, "name": upload["filename"], "title": title, "size": upload["length"]}
            for file_id, upload, title in shared
        ]
        if channel_id:
            channel = self._writable(channel_id)
            comment = args.get("initial_comment") or ""
            message = self._bot_message(channel["id"], comment, args.get("thread_ts"))
            message["files"] = objects
            message["_request"] = dict(args)
            for _, upload, _ in shared:
                upload["shared"] = message["ts"]
        return {"files": objects}

    async def _download(self, request: web.Request) -> web.StreamResponse:
        file_id = request.match_info["team_file"].split("-", 1)[-1]
        authorized = request.headers.get("Authorization") == f"Bearer {self.bot_token}"
        record: dict[str, Any] = {"file_id": file_id, "authorized": authorized, "at": time.monotonic()}
        self.downloads.append(record)
        self._notify()
        fault = self._faults["download"].popleft() if self._faults["download"] else None
        if fault is not None and fault[0] in ("429", "500"):
            record["status"] = int(fault[0])
            headers = {"Retry-After": str(fault[1])} if fault[0] == "429" else {}
            return web.Response(status=int(fault[0]), text="try later", headers=headers)
        found = self._files.get(file_id)
        if not authorized:
            record["status"] = 200
            return web.Response(body=SIGN_IN_PAGE, content_type="text/html")
        if found is None:
            record["status"] = 404
            return web.Response(status=404, text="file not found")
        upload, data = found
        served = upload.served if upload.served is not None else upload.size
        response = web.StreamResponse(headers={"Content-Type": upload.mimetype})
        if served is None:
            response.content_length = len(data)
            await response.prepare(request)
            await response.write(data)
        else:
            # Padded (or cut) to the size it claims, streamed, so a large file costs no memory here.
            if upload.served is None:
                response.content_length = served
            await response.prepare(request)
            sent = 0
            while sent < served:
                piece = (data[sent : sent + FILE_CHUNK] if sent < len(data) else b"").ljust(
                    min(FILE_CHUNK, served - sent), b"\0"
                )
                try:
                    await response.write(piece)
                except (ConnectionError, RuntimeError):
                    break
                sent += len(piece)
            record["sent"] = sent
        record["status"] = 200
        self._notify()
        with contextlib.suppress(ConnectionError, RuntimeError):
            await response.write_eof()
        return response

    # -- Socket Mode ---------------------------------------------------------------------------

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            return web.Response(status=401, text="invalid ticket")
        self._tickets.discard(ticket)  # each address serves one connection
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        conn = _Conn(ws, request)
        self._conns.append(conn)
        self.connections += 1
        writer = asyncio.create_task(self._writer(conn), name="fake-slack-socket-writer")
        hello = {
            "type": "hello",
            "num_connections": len(self._conns),
            "debug_info": {"host": "applink-fake", "approximate_connection_time": 18060},
            "connection_info": {"app_id": APP_ID},
        }
        conn.outbox.put_nowait(json.dumps(hello))
        # What the last connection left unacknowledged comes again, first.
        for envelope in list(self._unacked.values()):
            delivered = any(e["envelope_id"] == envelope["envelope_id"] for e in self.envelopes)
            self._write(self._retried(envelope) if delivered else envelope)
        self._notify()
        try:
            async for message in ws:
                if message.type != WSMsgType.TEXT:
                    continue
                with contextlib.suppress(ValueError):
                    body = json.loads(message.data)
                    envelope_id = body.get("envelope_id") if isinstance(body, dict) else None
                    if isinstance(envelope_id, str):
                        self.acks.append(envelope_id)
                        self._unacked.pop(envelope_id, None)
                        self._notify()
        finally:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
            if conn in self._conns:
                self._conns.remove(conn)
            self._notify()
        return ws

    async def _writer(self, conn: _Conn) -> None:
        while True:
            text = await conn.outbox.get()
            if text is None or conn.ws.closed:
                return
            try:
                await conn.ws.send_str(text)
            except (ConnectionError, RuntimeError):
                return


def _public(message: dict[str, Any]) -> dict[str, Any]:
    """A message as Slack returns it: without the channel and this fake's own records."""
    return {k: v for k, v in message.items() if k != "channel" and not k.startswith("_")}
