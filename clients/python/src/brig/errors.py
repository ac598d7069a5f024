"""Exceptions of the brig client.

Every error response of the API has one shape, ``{"error": {"code", "field",
"message"}}``; it becomes a ``BrigError`` of the class its HTTP status names,
carrying ``status``, ``code``, ``field`` (the first bad field of an invalid
request, or None) and ``message`` (a sentence that says what to do). A run that
was accepted and then failed is not an exception: it is a ``Result`` whose
``status`` is ``failed``.

Failures to reach the service at all (no socket, connection refused) are the
``OSError`` the socket raised, unchanged. A timeout is ``socket.timeout`` (sync)
or ``asyncio.TimeoutError`` (async), both ``TimeoutError`` from Python 3.11,
whose message names the socket, the call and the timeout that ran out; that of
a call that starts or follows a run (``run``, ``stream``, ``events``) is a
``RunTimeout``, one of both, whose ``id`` and message name the run, which goes
on in the service.
"""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import json
import math
import re
import socket
from typing import Dict, Optional, Type


class BrigError(Exception):
    """An error response of brig's API, or a response the client could not read.

    ``status`` is the HTTP status (None when the error is the client's own, as
    for ``ProtocolError``); ``code`` the API's error code (``invalid_request``,
    ``not_found``...); ``field`` the first bad field of an invalid request
    (``packages[3]``, ``env.PATH``) or None; ``message`` what to do.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str = "",
        field: Optional[str] = None,
        status: Optional[int] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.field = field
        self.status = status
        self.retry_after = retry_after

    def __str__(self) -> str:
        where = f"{self.field}: " if self.field else ""
        head = f"{self.status} {self.code}: " if self.status is not None else ""
        return f"{head}{where}{self.message}"


class InvalidRequest(BrigError):
    """400: the request is invalid; ``field`` names the first bad field and
    ``message`` says what to write instead. Nothing ran."""


class Forbidden(BrigError):
    """403: this process's uid or gid is not on the service's allow-list."""


class NotFound(BrigError):
    """404: no run has that id (for this uid), or no such endpoint."""


class MethodNotAllowed(BrigError):
    """405: the endpoint does not take that method (a client defect)."""


class Conflict(BrigError):
    """409: the id was already used with a different request (or, for an admin,
    by several uids)."""


class TooLarge(BrigError):
    """413: the request body is over the service's limit (4 MiB)."""


class QueueFull(BrigError):
    """429: the run queue is full; ``retry_after`` is the seconds the service
    asked to wait. Raised once the client's bounded retries are spent."""


class Internal(BrigError):
    """500: a defect in the service."""


class Unavailable(BrigError):
    """503: the service cannot take the request for now: it is shutting down
    (``retry_after`` None), or (``retry_after`` the seconds it asked to wait)
    it could not record the run in its journal, it is writing many large
    answers at once (a GET, a DELETE or an idempotent replay), or it is reading
    many requests' bodies at once. A refused run did not run; all but the
    shutdown are safe to retry."""


class ProtocolError(BrigError):
    """The service's response could not be read as the API describes it (code
    ``bad_response``), or the connection dropped before the response's end
    (code ``stream_ended``): an event stream before its ``result`` event, or the
    body of ``run``, ``get``... The run may still be going: ``get`` or
    ``events`` its id, which ``id`` holds when the request or the stream gave
    it (None otherwise). ``status`` is None."""

    def __init__(self, message: str, *, code: str = "", id: Optional[str] = None) -> None:
        super().__init__(message, code=code)
        self.id = id


# socket.timeout and asyncio.TimeoutError are both TimeoutError from Python
# 3.11 (socket.timeout from 3.10), and two classes before.
_TIMEOUTS = tuple(dict.fromkeys((socket.timeout, asyncio.TimeoutError)))


class RunTimeout(*_TIMEOUTS):  # type: ignore[misc]
    """A call that starts or follows a run (``run``, ``stream``, ``events``)
    ran out of time (``wait_timeout``, or ``timeout`` for a stream's head):
    the client gave up, not the run. A ``socket.timeout`` and an
    ``asyncio.TimeoutError`` (so ``TimeoutError`` from Python 3.11), so that
    either ``except`` catches it from either client. ``id`` is the run's id
    when the request or the stream gave it, and then the run goes on in the
    service: ``get(id)`` or ``events(id)`` follows it, ``cancel(id)`` stops
    it. None otherwise, and the message says what became of the run: one that
    ``run`` sent without an id is stopped by the service as the connection
    closes (its id would have come with its result)."""

    def __init__(self, message: str, *, id: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.id = id

    def __str__(self) -> str:
        return self.message


_BY_STATUS: Dict[int, Type[BrigError]] = {
    400: InvalidRequest,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    413: TooLarge,
    429: QueueFull,
    500: Internal,
    503: Unavailable,
}


# _SECONDS is a Retry-After in seconds: RFC 9110's whole number, or a decimal one.
_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """The seconds of a Retry-After header: a (decimal) number of seconds, or
    an HTTP date (RFC 9110; brig sends seconds), as the seconds from now to it,
    rounded up, 0 when past; None when absent or neither. The JS client reads it
    the same way."""
    if value is None:
        return None
    v = value.strip()
    if _SECONDS.fullmatch(v):
        return float(v)
    if not v[:1].isalpha():  # an HTTP date begins with its day's name
        return None
    try:
        at = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if at is None:
        return None
    if at.tzinfo is None:  # an HTTP date is in GMT
        at = at.replace(tzinfo=datetime.timezone.utc)
    wait = (at - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
    return float(max(0, math.ceil(wait)))


def from_response(status: int, reason: str, body: bytes, retry_after: Optional[str] = None) -> BrigError:
    """The exception for an error response: its class from the status, its
    code, field and message from the API's error shape (or, for a body that is
    not that shape, code ``http_<status>`` and the status line's reason).
    retry_after is the response's Retry-After header, if any."""
    cls = _BY_STATUS.get(status, BrigError)
    code, field, message = f"http_{status}", None, reason or f"HTTP status {status}"
    try:
        err = json.loads(body.decode("utf-8"))["error"]
        if isinstance(err, dict) and isinstance(err.get("code"), str):
            code = err["code"]
            field = err.get("field") or None
            message = err.get("message") or message
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        pass
    wait = parse_retry_after(retry_after) if status in (429, 503) else None
    return cls(message, code=code, field=field, status=status, retry_after=wait)
