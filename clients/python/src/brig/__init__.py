"""A client of brig's run API over its Unix socket, standard library only.

brig runs untrusted Python and JavaScript for AI agents, each run in a fresh
sandbox. ``Client`` is the synchronous client, ``AsyncClient`` its asyncio twin;
both speak HTTP/1.1 over the service's socket (default ``/run/brig/brig.sock``).

Typical use::

    import brig

    client = brig.Client()
    result = client.run("python", "print(6 * 7)", timeout_seconds=10)
    print(result.status, result.stdout)

    for event in client.stream("javascript", "console.log('hi')"):
        if event.event == brig.EventKind.STDOUT:
            print(event.data, end="")

A run that fails is a ``Result`` whose ``status`` is ``failed`` (``reason`` and
``message`` say why); an error response of the API raises a ``BrigError``
subclass carrying ``status``, ``code``, ``field`` and ``message``.
"""

from ._types import (
    Bound,
    EgressLimits,
    InstallLimits,
    Connection,
    Event,
    EventKind,
    Health,
    Limits,
    NetworkMode,
    NetworkReport,
    Outcome,
    PackageResult,
    Reason,
    Result,
    State,
    Status,
    Timing,
    Usage,
)
from ._wire import DEFAULT_SOCKET, RetryPolicy
from .aio import AsyncClient, AsyncEventStream
from .client import Client, EventStream
from .errors import (
    BrigError,
    Conflict,
    Forbidden,
    Internal,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    ProtocolError,
    QueueFull,
    RunTimeout,
    TooLarge,
    Unavailable,
)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_SOCKET",
    "AsyncClient",
    "AsyncEventStream",
    "Bound",
    "EgressLimits",
    "InstallLimits",
    "BrigError",
    "Client",
    "Conflict",
    "Connection",
    "Event",
    "EventKind",
    "EventStream",
    "Forbidden",
    "Health",
    "Internal",
    "InvalidRequest",
    "Limits",
    "MethodNotAllowed",
    "NetworkMode",
    "NetworkReport",
    "NotFound",
    "Outcome",
    "PackageResult",
    "ProtocolError",
    "QueueFull",
    "Reason",
    "Result",
    "RetryPolicy",
    "RunTimeout",
    "State",
    "Status",
    "Timing",
    "TooLarge",
    "Unavailable",
    "Usage",
]
