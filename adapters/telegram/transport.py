"""PTB's Bot API requests on aiohttp, the transport the model client already uses (bridge/llm/transport.py).

PTB's own HTTPXRequest keeps a 256-connection httpcore pool and checks every pooled connection on every
request: 30% of a `bridge run` worker's loop went there. aiohttp's connector keeps idle connections per
host and takes one without looking at the rest.

What HTTPXRequest promises is kept: the body is the same form (url-encoded, or multipart with the files),
the four timeouts have the same defaults, and a timeout is TimedOut. One whose request never left (no
connection or no free pool slot in time) says "*not* sent", as PTB's pool timeout does, so the retry
rules (adapters/telegram/retrying.py) may send it again; any other timeout may have reached Telegram.
Proxies come from HTTP(S)_PROXY and NO_PROXY, read once per host as httpx read them.
"""

from __future__ import annotations

import asyncio

import aiohttp
from telegram._utils.defaultvalue import DefaultValue
from telegram._utils.types import ODVInput, UploadFileDict
from telegram.error import NetworkError, TimedOut
from telegram.request import BaseRequest, RequestData

from bridge.llm.transport import EnvProxies

# An upload may take its write timeout, plus a second for each this many bytes: aiohttp bounds no
# single write, so a request with files is bounded as a whole, long enough for a slow uplink.
UPLOAD_BYTES_PER_S = 64 * 1024
NOT_SENT = "Request was *not* sent to Telegram"
_FORM = {"Content-Type": "application/x-www-form-urlencoded"}


class AiohttpRequest(BaseRequest):
    """A BaseRequest on one aiohttp ClientSession, made in `initialize` (inside the loop)."""

    def __init__(
        self,
        *,
        connections: int = 256,
        read_timeout: float | None = 5.0,
        write_timeout: float | None = 5.0,
        connect_timeout: float | None = 5.0,
        pool_timeout: float | None = 1.0,
        media_write_timeout: float | None = 20.0,
    ) -> None:
        self._connections = connections
        self._read_timeout = read_timeout
        self._write_timeout = write_timeout
        self._connect_timeout = connect_timeout
        self._pool_timeout = pool_timeout
        self._media_write_timeout = media_write_timeout
        # The pool: a request waits at most its pool timeout for a free slot, then for its connection
        # at most its connect timeout (aiohttp's own `connect` timeout covers both at once).
        self._slots = asyncio.Semaphore(connections)
        self._session: aiohttp.ClientSession | None = None
        self._proxies = EnvProxies()

    @property
    def read_timeout(self) -> float | None:
        return self._read_timeout

    async def initialize(self) -> None:
        if self._session is None or self._session.closed:
            # HTTP(S)_PROXY and NO_PROXY, as httpx honoured them for PTB: from EnvProxies, once.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._connections),
                headers={"User-Agent": self.USER_AGENT},
            )

    async def shutdown(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        write_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        connect_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        pool_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        session = self._session
        if session is None or session.closed:
            raise RuntimeError("This AiohttpRequest is not initialized!")
        files: UploadFileDict = (
            request_data.multipart_data if request_data is not None and request_data.contains_files else {}
        )
        read = self._read_timeout if isinstance(read_timeout, DefaultValue) else read_timeout
        connect = self._connect_timeout if isinstance(connect_timeout, DefaultValue) else connect_timeout
        pool = self._pool_timeout if isinstance(pool_timeout, DefaultValue) else pool_timeout
        write = write_timeout
        if isinstance(write, DefaultValue):
            write = self._media_write_timeout if files else self._write_timeout
        data: aiohttp.FormData | bytes | None = None
        headers = None
        total = None
        if request_data is not None and files:
            data = _multipart(request_data, files)
            if connect is not None and write is not None and read is not None:
                # aiohttp bounds no single write, so an upload is bounded as a whole.
                size = sum(len(content) for _, content, _ in files.values() if isinstance(content, bytes))
                total = connect + write + read + size / UPLOAD_BYTES_PER_S
        elif request_data is not None:
            # A small form, written at once into the socket's buffer: the read timeout, which starts
            # once the request is written, bounds the rest.
            data, headers = request_data.url_encoded_parameters().encode(), _FORM
        timeout = aiohttp.ClientTimeout(total=total, connect=connect, sock_connect=connect, sock_read=read)
        if self._slots.locked():
            try:
                await asyncio.wait_for(self._slots.acquire(), pool)
            except TimeoutError:
                raise TimedOut(
                    f"Pool timeout: all {self._connections} connections are busy. {NOT_SENT}."
                ) from None
        else:
            await self._slots.acquire()  # at once
        proxy, proxy_auth = self._proxies.of(url)
        try:
            async with session.request(
                method, url, data=data, headers=headers, timeout=timeout, proxy=proxy, proxy_auth=proxy_auth
            ) as response:
                return response.status, await response.read()
        except aiohttp.ConnectionTimeoutError as exc:
            raise TimedOut(f"Timed out connecting to Telegram. {NOT_SENT}.") from exc
        except TimeoutError as exc:  # a read, or an upload as a whole: it may have arrived
            raise TimedOut from exc
        except aiohttp.ClientError as exc:
            raise NetworkError(f"aiohttp.{type(exc).__name__}: {exc}") from exc
        finally:
            self._slots.release()


def _multipart(request_data: RequestData, files: UploadFileDict) -> aiohttp.FormData:
    """The parameters and the files as multipart/form-data, the files' names unquoted (as Telegram reads
    them; percent-encoding would show in the chat)."""
    form = aiohttp.FormData(quote_fields=False)
    for name, value in request_data.json_parameters.items():
        form.add_field(name, value)
    for name, (filename, content, mimetype) in files.items():
        form.add_field(name, content, filename=filename, content_type=mimetype)
    return form
