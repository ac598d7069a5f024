"""The synchronous client: http.client over brig's Unix socket.

Each call opens its own connection and closes it when done (a stream's when the
stream ends or is closed), so a ``Client`` holds no connection between calls and
one client may be used from many threads at once.
"""

from __future__ import annotations

import collections
import http.client
import socket as _socket
import time
from typing import Any, Callable, Deque, Iterable, Iterator, Mapping, Optional, Tuple, TypeVar

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

T = TypeVar("T")


class UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTPConnection whose transport is a Unix domain socket at ``path``.
    ``timeout`` bounds the connect and, until changed, every read."""

    def __init__(self, path: str, timeout: Optional[float]) -> None:
        super().__init__(HOST, timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.unix_path)
        except OSError as e:
            sock.close()
            if e.filename is None:
                e.filename = self.unix_path  # the message names the socket
            raise
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class EventStream:
    """A run's events as they happen, as an iterator of ``Event`` that ends
    with the ``result`` event. ``result`` holds the run's Result once that event
    has been read; ``wait()`` reads the rest and returns it.

    Close a stream you leave early (``with`` does): closing drops the
    connection, and the run goes on. A stream that ends before its result raises
    ``ProtocolError`` (code ``stream_ended``), one silent for longer than
    ``wait_timeout`` ``RunTimeout``: follow the run again with
    ``Client.events(id)``; ``id`` is known once the ``accepted`` event was read.
    """

    def __init__(
        self, conn: UnixHTTPConnection, resp: http.client.HTTPResponse, run_id: str = "",
        timed_out: Optional[Callable[[str], BaseException]] = None,
    ) -> None:
        self._conn = conn
        self._resp = resp
        # timed_out(id) is the error of a read that timed out (the socket's own without it).
        self._timed_out = timed_out
        self._splitter = LineSplitter()
        self._pending: Deque[bytes] = collections.deque()
        self._eof = False
        self._done = False
        # The request's id, until the accepted event gives the run's.
        self.id: str = run_id
        self.result: Optional[Result] = None

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        if self._done:
            raise StopIteration
        try:
            line = self._next_line()
            ev = decode_event(line)
        except BaseException:
            self.close()
            raise
        if ev.event == EventKind.ACCEPTED and ev.id:
            self.id = ev.id
        if ev.event == EventKind.RESULT:
            self.close()
            if ev.result is None:
                raise errors.ProtocolError("the result event has no result", code="bad_response")
            self.result = ev.result
            self.id = self.id or ev.result.id
        return ev

    def _next_line(self) -> bytes:
        while not self._pending:
            if self._eof:
                raise stream_ended(self.id)
            try:
                data = self._resp.read1(READ_SIZE)
            except _socket.timeout:
                if self._timed_out is None:
                    raise
                raise self._timed_out(self.id) from None
            except http.client.IncompleteRead as cut:
                # The connection dropped within a chunk or between chunks: the
                # whole lines it brought are events; after them, a cut line is
                # not one, and the stream ends before its result.
                self._eof = True
                self._pending.extend(self._splitter.feed(cut.partial))
                continue
            if not data:
                self._eof = True
                # Short of its Content-Length, the body was cut, not ended.
                if not self._resp.length:
                    self._pending.extend(last_line(self._splitter))
                continue
            self._pending.extend(self._splitter.feed(data))
        return self._pending.popleft()

    def wait(self) -> Result:
        """Reads the remaining events and returns the run's Result."""
        for _ in self:
            pass
        if self.result is None:
            raise stream_ended(self.id)
        return self.result

    def close(self) -> None:
        """Drops the connection (the run goes on). Idempotent."""
        self._done = True
        self._resp.close()
        self._conn.close()

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Client:
    """A client of one brig service, on its Unix socket.

    ``timeout`` (seconds) bounds connecting, every call that does not wait
    for a run (``get``, ``cancel``, ``health``, ``limits``), and the wait for
    the head of a stream (``stream``, ``events``), which the service sends at
    once. ``wait_timeout`` bounds each silence while waiting for a run
    (``run``, and a stream once its head has come); None, the default, waits
    as long as the run takes: the service ends every run at its
    ``timeout_seconds``. A 429, or a 503 with a
    Retry-After, is retried as ``retry`` says (by default 4 attempts in all,
    30 s of waits at most).

    A call that runs out of time raises ``socket.timeout`` (``TimeoutError``
    from Python 3.10) naming the socket, the call and the timeout; for
    ``run``, ``stream`` and ``events`` a ``RunTimeout`` (a ``socket.timeout``
    too) whose ``id`` and message name the run, which goes on in the service
    (``get``/``events`` follow it, ``cancel`` stops it), or say that a ``run``
    sent without an id is stopped by the service as the connection closes.
    """

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

    def run(
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
        """Runs code and returns its Result once it has finished.

        A run that fails (non-zero exit, timeout, memory...) is a Result with
        ``status`` failed, not an exception; an invalid request raises
        ``InvalidRequest`` naming the field. With ``id``, sending the same
        request again returns the same run instead of running it again.
        """
        body = run_request(
            language, code, timeout_seconds=timeout_seconds, memory_mib=memory_mib,
            packages=packages, env=env, network=network, domains=domains, id=id,
        )
        conn, resp = self._open("POST", "/v1/runs", body, "application/json", wait=True, run_id=id or "")
        return self._read_json(conn, resp, "the result", Result.from_json, id or "",
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
    ) -> EventStream:
        """Starts a run and returns its events as they happen: ``accepted``,
        ``package``..., ``started``, ``stdout``/``stderr``/``egress``... and last
        ``result``. The request is sent, and an error response raised, before
        this returns."""
        body = run_request(
            language, code, timeout_seconds=timeout_seconds, memory_mib=memory_mib,
            packages=packages, env=env, network=network, domains=domains, id=id,
        )
        conn, resp = self._open("POST", "/v1/runs", body, NDJSON, wait=True, run_id=id or "")
        return EventStream(conn, resp, id or "", self._stream_timed_out("POST", "/v1/runs"))

    def get(self, id: str, *, uid: Optional[int] = None) -> Result:
        """The run's Result, finished or not (its ``state`` says)."""
        path = run_path(id, uid=uid)
        conn, resp = self._open("GET", path, None, "application/json", run_id=id)
        return self._read_json(conn, resp, "the result", Result.from_json, id, self._call_timed_out("GET", path))

    def events(self, id: str, *, uid: Optional[int] = None) -> EventStream:
        """Replays the run's events from the start and follows them to its
        result: to reattach after a dropped connection."""
        path = run_path(id, "/events", uid)
        conn, resp = self._open("GET", path, None, NDJSON, wait=True, run_id=id)
        return EventStream(conn, resp, id, self._stream_timed_out("GET", path))

    def cancel(self, id: str, *, uid: Optional[int] = None) -> Result:
        """Stops the run (``reason`` stopped, unless it had already finished)
        and returns its Result."""
        path = run_path(id, uid=uid)
        conn, resp = self._open("DELETE", path, None, "application/json", run_id=id)
        return self._read_json(conn, resp, "the result", Result.from_json, id, self._call_timed_out("DELETE", path))

    def health(self) -> Health:
        """The service's liveness and what its host supports."""
        conn, resp = self._open("GET", "/v1/health", None, "application/json", what="the health")
        return self._read_json(conn, resp, "the health", Health.from_json,
                               timed_out=self._call_timed_out("GET", "/v1/health"))

    def limits(self) -> Limits:
        """The bounds and defaults of a request."""
        conn, resp = self._open("GET", "/v1/limits", None, "application/json", what="the limits")
        return self._read_json(conn, resp, "the limits", Limits.from_json,
                               timed_out=self._call_timed_out("GET", "/v1/limits"))

    def _timed_out(
        self, method: str, path: str, accept: str, wait: bool, run_id: Optional[str], *, head: bool,
    ) -> BaseException:
        """The error of a read of the call's response that timed out: head
        says whether the response's head was awaited. A call that waits for
        a run (wait: run, stream, events) raises RunTimeout, naming the run;
        any other the socket's timeout, naming the socket and the call (as
        the JS client's does: a stopped service's silence said only "timed
        out")."""
        waited_run = wait and not (head and accept == NDJSON)
        knob, seconds = ("wait_timeout", self.wait_timeout) if waited_run else ("timeout", self.timeout)
        said = silence(self.socket, seconds, knob, f"{method} {path}")
        if not wait:
            return _socket.timeout(said)
        # run without an id: the service stops it when its client goes away.
        return run_timed_out(said, run_id, stopped=method == "POST" and accept != NDJSON)

    def _call_timed_out(self, method: str, path: str) -> Callable[[], BaseException]:
        return lambda: self._timed_out(method, path, "application/json", False, None, head=False)

    def _stream_timed_out(self, method: str, path: str) -> Callable[[str], BaseException]:
        return lambda run_id: self._timed_out(method, path, NDJSON, True, run_id, head=False)

    def _open(
        self, method: str, path: str, body: Optional[bytes], accept: str, wait: bool = False,
        *, run_id: Optional[str] = None, what: str = "the result",
    ) -> Tuple[UnixHTTPConnection, http.client.HTTPResponse]:
        """Sends a request, retrying a 429 as self.retry says, and returns the
        connection and its 200 response; any other status is raised as a
        BrigError. A connection that drops once the request is sent, before
        the response's head is whole, is response_cut(what, run_id): run_id is
        the run's id ("" when not known) for a run's response, None otherwise."""
        waited = 0.0
        attempt = 1
        while True:
            try:
                return self._exchange(method, path, body, accept, wait, run_id, what)
            except errors.BrigError as err:
                delay = self.retry.delay(err, attempt, waited)
                if delay is None:
                    raise
            time.sleep(delay)
            waited += delay
            attempt += 1

    def _exchange(
        self, method: str, path: str, body: Optional[bytes], accept: str, wait: bool,
        run_id: Optional[str], what: str,
    ) -> Tuple[UnixHTTPConnection, http.client.HTTPResponse]:
        conn = UnixHTTPConnection(self.socket, self.timeout)
        try:
            headers = {"Accept": accept}
            if body is not None:
                headers["Content-Type"] = "application/json"
            try:
                conn.request(method, path, body=body, headers=headers)
            except (BrokenPipeError, ConnectionResetError) as send_err:
                # The service may have answered before reading the whole body
                # (413 for one over its limit) and closed: read that answer.
                if conn.sock is None:
                    raise
                resp = self._early_response(conn, send_err)
            else:
                # A stream's head comes at once, with its first event, and is
                # waited for as a call that does not wait for a run (timeout):
                # a service that takes the connection and never answers held
                # stream and events with no end (the clients probe of
                # 2026-12-06). A run's JSON answer comes whole with its result.
                if wait and accept != NDJSON and conn.sock is not None:
                    conn.sock.settimeout(self.wait_timeout)
                try:
                    resp = conn.getresponse()
                except _socket.timeout:
                    # The request went out: a run it asked for may be going.
                    raise self._timed_out(method, path, accept, wait, run_id, head=True) from None
                except ConnectionError:
                    # The request went out, then the connection dropped
                    # before a whole head came back (RemoteDisconnected, a
                    # reset): a run it asked for may be going.
                    raise response_cut(what, run_id) from None
                except http.client.HTTPException as e:
                    # A head that is there but not HTTP: not a drop.
                    raise not_http(f"{type(e).__name__}: {e}") from None
            if resp.status == 200:
                if wait and conn.sock is not None:
                    conn.sock.settimeout(self.wait_timeout)
                return conn, resp
            raw = resp.read(MAX_ERROR_BODY)
            raise errors.from_response(resp.status, resp.reason, raw, resp.getheader("Retry-After"))
        except BaseException:
            conn.close()
            raise

    @staticmethod
    def _early_response(conn: UnixHTTPConnection, send_err: OSError) -> http.client.HTTPResponse:
        """The response the service sent before it stopped reading the
        request; the send's own error when there is none."""
        try:
            return conn.getresponse()
        except (OSError, http.client.HTTPException):
            raise send_err from None

    @staticmethod
    def _read_json(
        conn: UnixHTTPConnection, resp: http.client.HTTPResponse, what: str, build: Callable[[Any], T],
        run_id: Optional[str] = None, timed_out: Optional[Callable[[], BaseException]] = None,
    ) -> T:
        """build (a type's from_json) of the JSON body of resp, read up to the
        API's bound on a result (MAX_EVENT_LINE, as AsyncClient and the JS
        client bound it); run_id is the run's id ("" when not known) when the
        body is a run's result; timed_out() the error of a read that timed out."""
        raw = bytearray()
        try:
            while True:
                data = resp.read1(READ_SIZE)
                if not data:
                    break
                raw += data
                if len(raw) > MAX_EVENT_LINE:
                    raise errors.ProtocolError(f"{what} is longer than the API allows", code="bad_response")
            if resp.length:
                # Short of its Content-Length, the body was cut, not ended.
                raise response_cut(what, run_id)
        except http.client.IncompleteRead:
            raise response_cut(what, run_id) from None
        except _socket.timeout:
            if timed_out is None:
                raise
            raise timed_out() from None
        finally:
            conn.close()
        if not raw:
            # No JSON body is empty: a head cut short, which http.client takes
            # for a whole one, and no body.
            raise response_cut(what, run_id)
        return decode_json(bytes(raw), what, build)
