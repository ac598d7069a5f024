"""The asyncio client: the same calls as ``Client``, as coroutines and async
iterators, on a non-blocking Unix socket driven by the event loop
(``sock_connect``, ``sock_sendall``, ``sock_recv``).

It speaks HTTP/1.1 itself, as little of it as brig needs: one request per
connection (``Connection: close``), and a response body framed by
``Transfer-Encoding: chunked`` (every event stream), ``Content-Length`` or the
connection's end. No thread is used, so a cancelled task drops its connection
at once (the run goes on; ``cancel`` stops it). The socket is used directly
rather than through asyncio's streams because a stream that fails to write
forgets what it had read: when the service answers a request before reading
all of it (413) and closes, that answer must still be read.
"""

from __future__ import annotations

import asyncio
import collections
import socket
from typing import Any, Awaitable, Callable, Deque, Dict, Iterable, Mapping, Optional, TypeVar

from . import errors
from ._types import Event, EventKind, Health, Limits, Result
from ._wire import (
    DEFAULT_SOCKET,
    HOST,
    MAX_ERROR_BODY,
    MAX_EVENT_LINE,
    NDJSON,
    LineSplitter,
    RetryPolicy,
    decode_event,
    decode_json,
    last_line,
    not_http,
    response_cut,
    run_path,
    run_request,
    run_timed_out,
    silence,
    stream_ended,
)

# READ_SIZE is the most one read of a response body asks for.
READ_SIZE = 64 << 10

# MAX_HEAD_LINE bounds a status line, a header line or a chunk-size line.
MAX_HEAD_LINE = 64 << 10

# MAX_HEADERS bounds how many header lines a response may have.
MAX_HEADERS = 100

T = TypeVar("T")


async def _within(aw: Awaitable[T], timeout: Optional[float]) -> T:
    if timeout is None:
        return await aw
    return await asyncio.wait_for(aw, timeout)




class _Conn:
    """One connection to the service: a non-blocking Unix socket and what has
    been read from it but not yet used. ``timeout`` bounds each read."""

    def __init__(self, sock: socket.socket, timeout: Optional[float]) -> None:
        self.sock = sock
        self.timeout = timeout
        self._buf = bytearray()
        self._eof = False

    @classmethod
    async def open(cls, path: str, timeout: Optional[float]) -> "_Conn":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            # A Unix socket's connect ends at once: connected, or refused
            # (EAGAIN when the service's listen backlog is full, as Client
            # raises it). The loop's sock_connect took EAGAIN for a connect
            # in progress and went on unconnected (ENOTCONN at the first
            # send: the clients probe of 2026-12-06).
            sock.connect(path)
        except OSError as e:
            sock.close()
            if e.filename is None:
                e.filename = path  # the message names the socket, as Client's does
            raise
        except BaseException:
            sock.close()
            raise
        return cls(sock, timeout)

    async def send(self, data: bytes, timeout: Optional[float]) -> None:
        await _within(asyncio.get_running_loop().sock_sendall(self.sock, data), timeout)

    async def _fill(self) -> bool:
        """Reads more into the buffer; False at the connection's end."""
        if self._eof:
            return False
        data = await _within(asyncio.get_running_loop().sock_recv(self.sock, READ_SIZE), self.timeout)
        if not data:
            self._eof = True
            return False
        self._buf += data
        return True

    async def readline(self) -> bytes:
        """One line, without its line ending; at most MAX_HEAD_LINE bytes."""
        scanned = 0
        while True:
            nl = self._buf.find(b"\n", scanned)
            if nl >= 0:
                line = bytes(self._buf[:nl])
                del self._buf[: nl + 1]
                return line.rstrip(b"\r")
            scanned = len(self._buf)
            if scanned > MAX_HEAD_LINE:
                raise not_http("a line of the head is too long")
            if not await self._fill():
                raise stream_ended()

    async def read(self, n: int) -> bytes:
        """Up to n bytes (at least one); b"" at the connection's end."""
        if not self._buf and not await self._fill():
            return b""
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def close(self) -> None:
        self.sock.close()


class _Response:
    """One HTTP/1.1 response read from a connection: its status and headers,
    then its body piece by piece with ``read``."""

    def __init__(self, conn: _Conn) -> None:
        self._conn = conn
        self.status = 0
        self.reason = ""
        self.headers: Dict[str, str] = {}
        # Body framing: chunked, or _length bytes (None: until the connection ends).
        self._chunked = False
        self._length: Optional[int] = None
        # _chunk_left is what remains of the current chunk; -1 before the first.
        self._chunk_left = -1
        self._done = False

    async def read_head(self) -> None:
        """Reads the status line and the headers, skipping 1xx responses."""
        while True:
            parts = (await self._conn.readline()).decode("latin-1").split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
                raise not_http(f"status line {' '.join(parts)!r}")
            self.status = int(parts[1])
            self.reason = parts[2] if len(parts) > 2 else ""
            self.headers = {}
            for _ in range(MAX_HEADERS + 1):
                line = (await self._conn.readline()).decode("latin-1")
                if not line:
                    break
                name, sep, value = line.partition(":")
                if not sep:
                    raise not_http(f"header line {line!r}")
                self.headers[name.strip().lower()] = value.strip()
            else:
                raise not_http("too many headers")
            if self.status >= 200:
                break
        self._chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        if not self._chunked and "content-length" in self.headers:
            try:
                self._length = int(self.headers["content-length"])
            except ValueError:
                raise not_http("Content-Length is not a number") from None
            if self._length < 0:
                raise not_http("Content-Length is negative")
        if self.status in (204, 304) or self._length == 0:
            self._done = True

    async def read(self) -> bytes:
        """The next piece of the body; b"" once it has all been read. A body
        cut short raises ProtocolError (code stream_ended)."""
        if self._done:
            return b""
        if self._chunked:
            return await self._read_chunked()
        n = READ_SIZE if self._length is None else min(READ_SIZE, self._length)
        data = await self._conn.read(n)
        if self._length is None:
            if not data:
                self._done = True
            return data
        if not data:
            raise stream_ended()
        self._length -= len(data)
        if self._length == 0:
            self._done = True
        return data

    async def _read_chunked(self) -> bytes:
        if self._chunk_left <= 0:
            if self._chunk_left == 0:
                await self._crlf()
            size_line = (await self._conn.readline()).split(b";", 1)[0].strip()
            try:
                self._chunk_left = int(size_line, 16)
            except ValueError:
                raise not_http(f"chunk size {size_line!r}") from None
            if self._chunk_left < 0:
                raise not_http("negative chunk size")
            if self._chunk_left == 0:
                for _ in range(MAX_HEADERS + 1):  # trailers, up to the blank line
                    if not await self._conn.readline():
                        break
                else:
                    raise not_http("too many trailers")
                self._done = True
                return b""
        data = await self._conn.read(min(READ_SIZE, self._chunk_left))
        if not data:
            raise stream_ended()
        self._chunk_left -= len(data)
        return data

    async def _crlf(self) -> None:
        if await self._conn.readline():
            raise not_http("a chunk is longer than its size")

    async def read_all(self, limit: int, what: str) -> bytes:
        """The whole body, at most limit bytes of it."""
        body = bytearray()
        while True:
            data = await self.read()
            if not data:
                return bytes(body)
            body += data
            if len(body) > limit:
                raise errors.ProtocolError(f"{what} is longer than the API allows", code="bad_response")

    def close(self) -> None:
        self._done = True
        self._conn.close()


class AsyncEventStream:
    """A run's events as an async iterator of ``Event`` ending with the
    ``result`` event; ``result`` holds the run's Result once it was read.

    The request is sent on the first ``async for`` step, or by ``async with``
    or ``await stream.open()``; an error response raises there. ``aclose()``
    (and leaving ``async with``) drops the connection; the run goes on.
    """

    def __init__(
        self, opener: Callable[[], Awaitable[_Response]], run_id: str = "",
        timed_out: Optional[Callable[[str], BaseException]] = None,
    ) -> None:
        self._opener = opener
        # timed_out(id) is the error of a read that timed out once the head
        # has come (the loop's own without it).
        self._timed_out = timed_out
        self._resp: Optional[_Response] = None
        self._splitter = LineSplitter()
        self._pending: Deque[bytes] = collections.deque()
        self._eof = False
        self._done = False
        # The request's id, until the accepted event gives the run's.
        self.id: str = run_id
        self.result: Optional[Result] = None

    async def open(self) -> "AsyncEventStream":
        """Sends the request unless it was sent; raises an error response."""
        if self._resp is None and not self._done:
            self._resp = await self._opener()
        return self

    def __aiter__(self) -> "AsyncEventStream":
        return self

    async def __anext__(self) -> Event:
        if self._done:
            raise StopAsyncIteration
        try:
            await self.open()
            try:
                ev = decode_event(await self._next_line())
            except asyncio.TimeoutError:
                if self._timed_out is None:
                    raise
                raise self._timed_out(self.id) from None
        except errors.ProtocolError as err:
            await self.aclose()
            if err.code == "stream_ended":
                raise stream_ended(self.id) from None
            raise
        except BaseException:
            await self.aclose()
            raise
        if ev.event == EventKind.ACCEPTED and ev.id:
            self.id = ev.id
        if ev.event == EventKind.RESULT:
            await self.aclose()
            if ev.result is None:
                raise errors.ProtocolError("the result event has no result", code="bad_response")
            self.result = ev.result
            self.id = self.id or ev.result.id
        return ev

    async def _next_line(self) -> bytes:
        assert self._resp is not None
        while not self._pending:
            if self._eof:
                raise stream_ended()
            data = await self._resp.read()
            if not data:
                # The body ended as framed (a cut one raises stream_ended).
                self._eof = True
                self._pending.extend(last_line(self._splitter))
                continue
            self._pending.extend(self._splitter.feed(data))
        return self._pending.popleft()

    async def wait(self) -> Result:
        """Reads the remaining events and returns the run's Result."""
        async for _ in self:
            pass
        if self.result is None:
            raise stream_ended(self.id)
        return self.result

    async def aclose(self) -> None:
        """Drops the connection (the run goes on). Idempotent."""
        self._done = True
        if self._resp is not None:
            self._resp.close()

    async def __aenter__(self) -> "AsyncEventStream":
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncClient:
    """The asyncio twin of ``Client``: the same parameters, calls and errors.
    ``run``, ``get``, ``cancel``, ``health`` and ``limits`` are coroutines;
    ``stream`` and ``events`` return an ``AsyncEventStream``."""

    def __init__(
        self,
        socket: str = DEFAULT_SOCKET,
        timeout: Optional[float] = 30.0,
        *,
        wait_timeout: Optional[float] = None,
        retry: Optional[RetryPolicy] = None,
    ) -> None:
        self.socket = socket
        self.timeout = timeout
        self.wait_timeout = wait_timeout
        self.retry = retry if retry is not None else RetryPolicy()

    async def run(
        self,
        language: str,
        code: str,
        *,
        timeout_seconds: Optional[int] = None,
        memory_mib: Optional[int] = None,
        packages: Optional[Iterable[str]] = None,
        env: Optional[Mapping[str, str]] = None,
        network: Optional[str] = None,
        domains: Optional[Iterable[str]] = None,
        id: Optional[str] = None,
    ) -> Result:
        """Runs code and returns its Result once it has finished (see
        ``Client.run``)."""
        body = run_request(
            language, code, timeout_seconds=timeout_seconds, memory_mib=memory_mib,
            packages=packages, env=env, network=network, domains=domains, id=id,
        )
        resp = await self._open("POST", "/v1/runs", body, "application/json", wait=True, run_id=id or "")
        return await self._read_json(resp, "the result", Result.from_json, id or "",
                                     lambda: self._timed_out("POST", "/v1/runs", "application/json", True, id or "", head=False))

    def stream(
        self,
        language: str,
        code: str,
        *,
        timeout_seconds: Optional[int] = None,
        memory_mib: Optional[int] = None,
        packages: Optional[Iterable[str]] = None,
        env: Optional[Mapping[str, str]] = None,
        network: Optional[str] = None,
        domains: Optional[Iterable[str]] = None,
        id: Optional[str] = None,
    ) -> AsyncEventStream:
        """Starts a run and iterates its events as they happen, ending with
        ``result`` (see ``Client.stream``). Use it with ``async for``."""
        body = run_request(
            language, code, timeout_seconds=timeout_seconds, memory_mib=memory_mib,
            packages=packages, env=env, network=network, domains=domains, id=id,
        )
        return AsyncEventStream(lambda: self._open("POST", "/v1/runs", body, NDJSON, wait=True, run_id=id or ""), id or "",
                                self._stream_timed_out("POST", "/v1/runs"))

    async def get(self, id: str, *, uid: Optional[int] = None) -> Result:
        """The run's Result, finished or not (its ``state`` says)."""
        path = run_path(id, uid=uid)
        resp = await self._open("GET", path, None, "application/json", run_id=id)
        return await self._read_json(resp, "the result", Result.from_json, id, self._call_timed_out("GET", path))

    def events(self, id: str, *, uid: Optional[int] = None) -> AsyncEventStream:
        """Replays the run's events from the start and follows them to its
        result: to reattach after a dropped connection."""
        path = run_path(id, "/events", uid)
        return AsyncEventStream(lambda: self._open("GET", path, None, NDJSON, wait=True, run_id=id), id,
                                self._stream_timed_out("GET", path))

    async def cancel(self, id: str, *, uid: Optional[int] = None) -> Result:
        """Stops the run (``reason`` stopped, unless it had already finished)
        and returns its Result."""
        path = run_path(id, uid=uid)
        resp = await self._open("DELETE", path, None, "application/json", run_id=id)
        return await self._read_json(resp, "the result", Result.from_json, id, self._call_timed_out("DELETE", path))

    async def health(self) -> Health:
        """The service's liveness and what its host supports."""
        resp = await self._open("GET", "/v1/health", None, "application/json", what="the health")
        return await self._read_json(resp, "the health", Health.from_json,
                                     timed_out=self._call_timed_out("GET", "/v1/health"))

    async def limits(self) -> Limits:
        """The bounds and defaults of a request."""
        resp = await self._open("GET", "/v1/limits", None, "application/json", what="the limits")
        return await self._read_json(resp, "the limits", Limits.from_json,
                                     timed_out=self._call_timed_out("GET", "/v1/limits"))

    def _timed_out(
        self, method: str, path: str, accept: str, wait: bool, run_id: Optional[str], *, head: bool,
    ) -> BaseException:
        """The error of a read of the call's response that timed out, as
        Client._timed_out: RunTimeout for run, stream and events, else an
        asyncio.TimeoutError naming the socket and the call."""
        waited_run = wait and not (head and accept == NDJSON)
        knob, seconds = ("wait_timeout", self.wait_timeout) if waited_run else ("timeout", self.timeout)
        said = silence(self.socket, seconds, knob, f"{method} {path}")
        if not wait:
            return asyncio.TimeoutError(said)
        return run_timed_out(said, run_id, stopped=method == "POST" and accept != NDJSON)

    def _call_timed_out(self, method: str, path: str) -> Callable[[], BaseException]:
        return lambda: self._timed_out(method, path, "application/json", False, None, head=False)

    def _stream_timed_out(self, method: str, path: str) -> Callable[[str], BaseException]:
        return lambda run_id: self._timed_out(method, path, NDJSON, True, run_id, head=False)

    async def _open(
        self, method: str, path: str, body: Optional[bytes], accept: str, wait: bool = False,
        *, run_id: Optional[str] = None, what: str = "the result",
    ) -> _Response:
        """Sends a request, retrying a 429 as self.retry says, and returns its
        200 response; any other status is raised as a BrigError. A connection
        that drops once the request is sent, before the response's head is
        whole, is response_cut(what, run_id), as in Client._open."""
        waited = 0.0
        attempt = 1
        while True:
            try:
                return await self._exchange(method, path, body, accept, wait, run_id, what)
            except errors.BrigError as err:
                delay = self.retry.delay(err, attempt, waited)
                if delay is None:
                    raise
            await asyncio.sleep(delay)
            waited += delay
            attempt += 1

    async def _exchange(
        self, method: str, path: str, body: Optional[bytes], accept: str, wait: bool,
        run_id: Optional[str], what: str,
    ) -> _Response:
        # A stream's head comes at once, with its first event: it is waited
        # for as a call that does not wait for a run (timeout), then
        # wait_timeout bounds its silences (Client._exchange).
        head_timeout = self.wait_timeout if wait and accept != NDJSON else self.timeout
        conn = await _Conn.open(self.socket, head_timeout)
        resp = _Response(conn)
        try:
            head = [f"{method} {path} HTTP/1.1", f"Host: {HOST}", f"Accept: {accept}", "Connection: close"]
            if body is not None:
                head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
            request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (body or b"")
            try:
                await conn.send(request, self.timeout)
            except (BrokenPipeError, ConnectionResetError) as send_err:
                # The service may have answered before reading the whole body
                # (413 for one over its limit) and closed: read that answer.
                try:
                    await resp.read_head()
                except (OSError, errors.ProtocolError):
                    raise send_err from None
            else:
                try:
                    await resp.read_head()
                except asyncio.TimeoutError:
                    # The request went out: a run it asked for may be going.
                    raise self._timed_out(method, path, accept, wait, run_id, head=True) from None
                except ConnectionError:
                    raise response_cut(what, run_id) from None
                except errors.ProtocolError as err:
                    if err.code != "stream_ended":
                        raise
                    raise response_cut(what, run_id) from None
            if resp.status == 200:
                if wait:
                    conn.timeout = self.wait_timeout
                return resp
            raw = await resp.read_all(MAX_ERROR_BODY, "an error response")
            raise errors.from_response(resp.status, resp.reason, raw, resp.headers.get("retry-after"))
        except BaseException:
            resp.close()
            raise

    @staticmethod
    async def _read_json(
        resp: _Response, what: str, build: Callable[[Any], T], run_id: Optional[str] = None,
        timed_out: Optional[Callable[[], BaseException]] = None,
    ) -> T:
        """build (a type's from_json) of the JSON body of resp; run_id is the
        run's id ("" when not known) when the body is a run's result;
        timed_out() the error of a read that timed out."""
        try:
            raw = await resp.read_all(MAX_EVENT_LINE, what)
        except asyncio.TimeoutError:
            if timed_out is None:
                raise
            raise timed_out() from None
        except errors.ProtocolError as err:
            if err.code != "stream_ended":
                raise
            raise response_cut(what, run_id) from None
        finally:
            resp.close()
        return decode_json(raw, what, build)
