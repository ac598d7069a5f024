"""What the sync and the async client share: request bodies and paths, the
retry rule of a 429, and the NDJSON line splitter. No I/O here."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, TypeVar
from urllib.parse import quote

from ._types import Event
from .errors import BrigError, ProtocolError, QueueFull, RunTimeout, Unavailable

DEFAULT_SOCKET = "/run/brig/brig.sock"

# HOST is the Host header of every request: the socket, not the host name,
# decides where a request goes, and the service ignores it.
HOST = "brig"

NDJSON = "application/x-ndjson"

# MAX_EVENT_LINE bounds one NDJSON line: a result event at the service's bound
# on a result (api.MaxResultBytes): both outputs full (1,000,000 and 100,000
# characters), each character escaped at worst as \uXXXX (6 bytes), 4 MiB of
# network.connections, and 1 MiB for the rest. The same bound as the Go
# client's.
MAX_EVENT_LINE = 6 * (1_000_000 + 100_000) + (4 << 20) + (1 << 20)

# MAX_ERROR_BODY bounds how much of an error response is read.
MAX_ERROR_BODY = 1 << 20

T = TypeVar("T")

# DEFAULT_RETRY_AFTER is the wait after a 429 that carries no usable
# Retry-After (brig always sends one).
DEFAULT_RETRY_AFTER = 1.0


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How a request answered 429 (queue full), or 503 with a Retry-After (the
    service could not record the run in its journal, its disk full; or it is
    writing many large answers, or reading many requests' bodies, at once), is
    retried: after the Retry-After the service sent, at most ``max_attempts``
    attempts in all (1 never retries), and never once the waits would pass
    ``max_wait`` seconds in total; then the ``QueueFull`` or ``Unavailable`` is
    raised. Each is safe to retry, a run with or without an id: a refused run
    was not admitted, and a GET, a DELETE or an idempotent replay answers the
    same when sent again. A 503 without a Retry-After (the service shutting
    down) is not retried."""

    max_attempts: int = 4
    max_wait: float = 30.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts is {self.max_attempts}; it must be at least 1")
        if self.max_wait < 0:
            raise ValueError(f"max_wait is {self.max_wait}; it must not be negative")

    def delay(self, err: BrigError, attempt: int, waited: float) -> Optional[float]:
        """The seconds to wait before another attempt after err ended attempt
        number ``attempt`` (from 1), having waited ``waited`` seconds so far;
        None when err is not retried."""
        retried = isinstance(err, QueueFull) or (isinstance(err, Unavailable) and err.retry_after is not None)
        if not retried or attempt >= self.max_attempts:
            return None
        wait = err.retry_after if err.retry_after is not None else DEFAULT_RETRY_AFTER
        if waited + wait > self.max_wait:
            return None
        return wait


def run_request(
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
) -> bytes:
    """The JSON body of POST /v1/runs. A parameter left None is left out, so
    that the service applies its default (and an absent field and its default
    are the same request for the idempotent id). ``domains`` without
    ``network`` means mode ``domains``. The service validates every field."""
    body: Dict[str, Any] = {}
    if id is not None:
        body["id"] = id
    body["language"] = language
    body["code"] = code
    if timeout_seconds is not None:
        body["timeout_seconds"] = timeout_seconds
    if memory_mib is not None:
        body["memory_mib"] = memory_mib
    if packages is not None:
        if isinstance(packages, str):
            raise TypeError("packages is a list of requirements, not one string")
        body["packages"] = list(packages)
    if env is not None:
        body["env"] = dict(env)
    if network is not None or domains is not None:
        net: Dict[str, Any] = {"mode": network if network is not None else "domains"}
        if domains is not None:
            if isinstance(domains, str):
                raise TypeError("domains is a list of host names, not one string")
            net["domains"] = list(domains)
        body["network"] = net
    try:
        return json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        # A lone surrogate ("\ud800"): no UTF-8 carries it.
        raise ValueError(f"the request holds a string that is not valid Unicode ({e.reason} at {e.start}): "
                         "remove lone surrogates, or decode the text with errors='replace'") from None


def run_path(id: str, suffix: str = "", uid: Optional[int] = None) -> str:
    """The path of a run's endpoint. ``uid`` names the owner of an id that
    several uids used (for root and admins)."""
    if not isinstance(id, str) or not id:
        raise ValueError("a run id is a non-empty string")
    path = "/v1/runs/" + quote(id, safe="") + suffix
    if uid is not None:
        path += f"?uid={int(uid)}"
    return path


def decode_json(body: bytes, what: str, build: Callable[[Any], T]) -> T:
    """build (a type's from_json) of the JSON body: a body that is not JSON, or
    not of the type's shape (an array, "packages": "oops"), is a ProtocolError
    (code bad_response), not the ValueError or TypeError of from_json."""
    try:
        obj = json.loads(body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ProtocolError(f"decoding {what}: {e}", code="bad_response") from None
    try:
        return build(obj)
    except (ValueError, TypeError) as e:
        raise ProtocolError(f"decoding {what}: {e}", code="bad_response") from None


def decode_line(line: bytes) -> str:
    """An event line as text: bytes that are not UTF-8 are replaced with U+FFFD,
    as the service replaces them in a run's output and as the JS client
    decodes its stream, rather than ending the stream."""
    return line.decode("utf-8", errors="replace")


def decode_event(line: bytes) -> Event:
    try:
        return Event.from_json(json.loads(decode_line(line)))
    except (ValueError, TypeError) as e:
        raise ProtocolError(f"decoding an event: {e}", code="bad_response") from None


def not_http(what: str) -> ProtocolError:
    """The error of a response head that is not HTTP/1.1: code bad_response."""
    return ProtocolError(f"the service's response is not HTTP/1.1 as expected: {what}", code="bad_response")


def stream_ended(run_id: Optional[str] = None) -> ProtocolError:
    """The error of a run's response (its event stream, or its Result) whose
    connection dropped before the run's result, wherever it dropped: before the
    response's head, within it, or within its body. ``run_id`` is the run's id
    when the request or the stream gave it. The JS client's NoResultError says
    the same."""
    if run_id:
        message = (f"the connection dropped before the run's result; the run {run_id} may still be going: "
                   "follow it with events(id) or read it with get(id)")
    else:
        message = ("the connection dropped before the run's result, and before its id was known: "
                   "give requests an id to follow them after a dropped connection")
    return ProtocolError(message, code="stream_ended", id=run_id or None)


def silence(socket: str, seconds: Optional[float], knob: str, call: str) -> str:
    """The first words of a timeout's message: the JS client's, in seconds."""
    took = f"{seconds:g} s" if seconds is not None else "too long"
    return f"brig at {socket} sent nothing for {took} ({knob}) in answer to {call}"


def run_timed_out(said: str, run_id: Optional[str], *, stopped: bool = False) -> RunTimeout:
    """The error of a call that starts or follows a run (run, stream, events)
    and ran out of time: said is silence(...); run_id the run's id when the
    request or the stream gave it. stopped: the call was run's without an
    id, which the service stops when its connection closes
    (supervisor/server.go). The JS client says the same."""
    if run_id:
        message = (f"{said}; the run {run_id} goes on in the service: follow it with events(id) "
                   "or read it with get(id), and stop it with cancel(id)")
    elif stopped:
        message = (f"{said}; the run had no id, so the service stops it as the connection closes "
                   "(its id would have come with its result): give requests an id to follow them past a timeout")
    else:
        message = (f"{said}, before the run's id was known; a run the service took goes on unseen: "
                   "give requests an id to follow them past a timeout")
    return RunTimeout(message, id=run_id or None)


def response_cut(what: str, run_id: Optional[str] = None) -> ProtocolError:
    """The error of a JSON response whose connection dropped before its end:
    code stream_ended. For a run's result (``run_id``: the run's id, "" when not
    known), that of a run's response (stream_ended)."""
    if run_id is not None:
        return stream_ended(run_id)
    return ProtocolError(f"the connection dropped while reading {what}", code="stream_ended")


def last_line(splitter: "LineSplitter") -> List[bytes]:
    """The line left in splitter once a body has really ended (not cut by a
    dropped connection): what follows the last newline, when it is a whole JSON
    value (a last line sent without its newline). A body framed by the
    connection's end looks just as ended when the connection dropped in a line:
    a rest that is not JSON is that cut line, and no event (the caller then
    raises stream_ended, as the JS client does)."""
    rest = splitter.rest()
    if not rest:
        return []
    try:
        json.loads(decode_line(rest))
    except ValueError:
        return []
    return [rest]


class LineSplitter:
    """Splits a byte stream into NDJSON lines, refusing a line longer than
    MAX_EVENT_LINE."""

    def __init__(self) -> None:
        self._buf = bytearray()
        # _scanned is how much of _buf is known to hold no newline, so that a
        # long line arriving in many pieces is scanned once.
        self._scanned = 0

    def feed(self, data: bytes) -> List[bytes]:
        """The complete non-empty lines that data finishes, without their
        newlines."""
        self._buf += data
        lines: List[bytes] = []
        start = 0
        while True:
            nl = self._buf.find(b"\n", max(start, self._scanned))
            if nl < 0:
                break
            line = bytes(self._buf[start:nl]).rstrip(b"\r")
            if line:
                lines.append(line)
            start = nl + 1
        del self._buf[:start]
        self._scanned = len(self._buf)
        if len(self._buf) > MAX_EVENT_LINE:
            raise ProtocolError("an event line is longer than any event can be", code="bad_response")
        return lines

    def rest(self) -> bytes:
        """What is left after the last newline (a line the stream cut short)."""
        return bytes(self._buf).strip()
