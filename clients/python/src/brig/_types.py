"""The wire types of brig's run API (API.md), as dataclasses.

Each type is built from the JSON the service sends with ``from_json``. Fields the
client does not know (a newer service) are kept in ``extra`` rather than refused,
and a missing field takes its zero value, so that a client keeps working against
a service one version ahead of it. The words of the contract (states, reasons,
outcomes...) are plain ``str`` fields; the classes of constants below name them,
and since they are ``str`` enums they compare equal to the strings.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Dict, List, Mapping, Optional, Type, TypeVar


class State(str, enum.Enum):
    """The ``state`` of a run."""

    QUEUED = "queued"
    PREPARING = "preparing"
    RUNNING = "running"
    FINISHED = "finished"


class Status(str, enum.Enum):
    """The ``status`` of a finished run."""

    COMPLETED = "completed"
    FAILED = "failed"


class Reason(str, enum.Enum):
    """Why a finished run failed (``reason``)."""

    ERROR = "error"
    TIMEOUT = "timeout"
    MEMORY = "memory"
    STOPPED = "stopped"
    PACKAGE_BLOCKED = "package_blocked"
    PACKAGE_UNAVAILABLE = "package_unavailable"
    INTERNAL = "internal"


class Outcome(str, enum.Enum):
    """The Tool Call outcome a harness acts on (``outcome``)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNKNOWN = "unknown"
    BLOCKED = "blocked"


class NetworkMode(str, enum.Enum):
    """A run's network mode."""

    NONE = "none"
    REGISTRIES = "registries"
    DOMAINS = "domains"
    ANY = "any"


class EventKind(str, enum.Enum):
    """The ``event`` of one line of a run's NDJSON stream."""

    ACCEPTED = "accepted"
    PACKAGE = "package"
    STARTED = "started"
    STDOUT = "stdout"
    STDERR = "stderr"
    EGRESS = "egress"
    RESULT = "result"


T = TypeVar("T")


def _build(cls: Type[T], obj: Any, nested: Mapping[str, Any]) -> T:
    """Builds the dataclass cls from the JSON object obj.

    nested maps a field name to a function that converts its JSON value. Known
    fields the object lacks keep their defaults; unknown ones go to ``extra``.
    """
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object for {cls.__name__}, got {type(obj).__name__}")
    names = {f.name for f in dataclasses.fields(cls) if f.name != "extra"}
    kwargs: Dict[str, Any] = {}
    extra: Dict[str, Any] = {}
    for key, value in obj.items():
        if key not in names:
            extra[key] = value
        elif value is None:
            continue  # null is the field's zero value
        elif key in nested:
            kwargs[key] = nested[key](value)
        else:
            kwargs[key] = value
    return cls(**kwargs, extra=extra)  # type: ignore[call-arg]


def _extra() -> Any:
    return dataclasses.field(default_factory=dict, repr=False, compare=False)


@dataclasses.dataclass
class PackageResult:
    """How one package request was resolved: ``name`` and ``version`` are the
    lock that reproduces the run."""

    request: str = ""
    name: str = ""
    version: str = ""
    cached: bool = False
    extra: Dict[str, Any] = _extra()

    @classmethod
    def from_json(cls, obj: Any) -> "PackageResult":
        return _build(cls, obj, {})


@dataclasses.dataclass
class Connection:
    """One connection the run attempted, allowed or not (a denied DNS query has
    port 0). ``rule`` says in words which rule decided; ``failure``, for an
    allowed connection that did not get through or was cut, why."""

    host: str = ""
    port: int = 0
    allowed: bool = False
    rule: str = ""
    bytes_sent: int = 0
    bytes_received: int = 0
    failure: str = ""
    extra: Dict[str, Any] = _extra()

    @classmethod
    def from_json(cls, obj: Any) -> "Connection":
        return _build(cls, obj, {})


@dataclasses.dataclass
class NetworkReport:
    """The run's network mode and every connection it attempted."""

    mode: str = ""
    connections: List[Connection] = dataclasses.field(default_factory=list)
    #: How many attempts ``connections`` leaves out (past the run's bound on
    #: listed refusals); 0 when it lists them all.
    omitted: int = 0
    extra: Dict[str, Any] = _extra()

    @classmethod
    def from_json(cls, obj: Any) -> "NetworkReport":
        return _build(cls, obj, {"connections": lambda v: [Connection.from_json(c) for c in v]})


@dataclasses.dataclass
class Usage:
    """What the run consumed."""

    wall_ms: int = 0
    cpu_ms: int = 0
    peak_memory_bytes: int = 0
    extra: Dict[str, Any] = _extra()

    @classmethod
    def from_json(cls, obj: Any) -> "Usage":
        return _build(cls, obj, {})


@dataclasses.dataclass
class Timing:
    """Where the run's time went, in milliseconds."""

    queued_ms: int = 0
    prepare_ms: int = 0
    start_ms: int = 0
    total_ms: int = 0
    extra: Dict[str, Any] = _extra()

    @classmethod
    def from_json(cls, obj: Any) -> "Timing":
        return _build(cls, obj, {})


@dataclasses.dataclass
class Result:
    """A run's result (API.md's Result): a report of what the run observed.

    ``status`` and ``outcome`` are set once ``state`` is ``finished``; ``reason``
    and ``message`` when it failed; ``exit_code`` (None when the program did not
    exit by itself) and ``signal`` when the program ran.
    """

    id: str = ""
    language: str = ""
    state: str = ""
    status: str = ""
    reason: str = ""
    outcome: str = ""
    exit_code: Optional[int] = None
    signal: str = ""
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    packages: List[PackageResult] = dataclasses.field(default_factory=list)
    network: NetworkReport = dataclasses.field(default_factory=NetworkReport)
    usage: Usage = dataclasses.field(default_factory=Usage)
    timing: Timing = dataclasses.field(default_factory=Timing)
    message: str = ""
    extra: Dict[str, Any] = _extra()

    @property
    def finished(self) -> bool:
        """Whether the run has ended."""
        return self.state == State.FINISHED

    @property
    def succeeded(self) -> bool:
        """Whether the run finished and its program exited 0."""
        return self.outcome == Outcome.SUCCEEDED

    @classmethod
    def from_json(cls, obj: Any) -> "Result":
        return _build(
            cls,
            obj,
            {
                "packages": lambda v: [PackageResult.from_json(p) for p in v],
                "network": NetworkReport.from_json,
                "usage": Usage.from_json,
                "timing": Timing.from_json,
            },
        )


@dataclasses.dataclass
class Event:
    """One line of a run's event stream.

    Which fields are set depends on ``event`` (an ``EventKind``): ``id`` for
    ``accepted``; ``message`` (a line of the install) for ``package``; ``data`` for
    ``stdout`` and ``stderr``; ``host``, ``port`` and ``allowed`` for ``egress``;
    ``result`` for ``result``, always the last event of a stream.
    """

    event: str = ""
    id: str = ""
    data: str = ""
    host: str = ""
    port: int = 0
    allowed: Optional[bool] = None
    message: str = ""
    result: Optional[Result] = None
    extra: Dict[str, Any] = _extra()

    @classmethod
    def from_json(cls, obj: Any) -> "Event":
        return _build(cls, obj, {"result": Result.from_json})


@dataclasses.dataclass
class Bound:
    """A range and, where the field has one, its default."""

    min: int = 0
    max: int = 0
    default: Optional[int] = None
    extra: Dict[str, Any] = _extra()

    @classmethod
    def from_json(cls, obj: Any) -> "Bound":
        return _build(cls, obj, {})


@dataclasses.dataclass
class EgressLimits:
    """The operator's bounds on each networked run's connections: at most
    ``max_conns`` open at once and ``conns_per_second`` opened a second,
    ``max_bytes`` sent and as many received, and ``handshake_timeout_seconds``
    to read a TLS ClientHello, a request head or a CONNECT line."""

    max_conns: int = 0
    conns_per_second: float = 0.0
    max_bytes: int = 0
    handshake_timeout_seconds: float = 0.0
    extra: Dict[str, Any] = _extra()

    @classmethod
    def from_json(cls, obj: Any) -> "EgressLimits":
        return _build(cls, obj, {})


@dataclasses.dataclass
class InstallLimits:
    """The operator's bounds on a run's package install: its time limit,
    which comes before the program's ``timeout_seconds`` (a run whose
    packages the cache does not hold may take up to this much longer), and
    its memory limit."""

    timeout_seconds: float = 0.0
    memory_mib: int = 0
    extra: Dict[str, Any] = _extra()

    @classmethod
    def from_json(cls, obj: Any) -> "InstallLimits":
        return _build(cls, obj, {})


@dataclasses.dataclass
class Limits:
    """The bounds and defaults of a request (``GET /v1/limits``); ``egress``
    is None when the host offers no networked mode, ``install`` when it
    installs no packages."""

    timeout_seconds: Bound = dataclasses.field(default_factory=Bound)
    memory_mib: Bound = dataclasses.field(default_factory=Bound)
    code_chars: Bound = dataclasses.field(default_factory=Bound)
    packages: Bound = dataclasses.field(default_factory=Bound)
    package_chars: Bound = dataclasses.field(default_factory=Bound)
    env_entries: Bound = dataclasses.field(default_factory=Bound)
    domains: Bound = dataclasses.field(default_factory=Bound)
    id_chars: Bound = dataclasses.field(default_factory=Bound)
    stdout_chars: int = 0
    stderr_chars: int = 0
    body_bytes: int = 0
    #: The share of ``memory_mib`` that a run's writable files may take; past
    #: it a write fails with ENOSPC.
    writable_files_share: float = 0.0
    #: How many processes and threads a run may have at once; a fork past it
    #: fails. 0 when the service does not say.
    processes: int = 0
    #: The CPU time a run may use, in CPUs; past it the run is throttled. 0.0
    #: when the service does not say.
    cpus: float = 0.0
    languages: List[str] = dataclasses.field(default_factory=list)
    network_modes: List[str] = dataclasses.field(default_factory=list)
    default_network_mode: str = ""
    id_pattern: str = ""
    env_name_pattern: str = ""
    reserved_env: List[str] = dataclasses.field(default_factory=list)
    egress: Optional[EgressLimits] = None
    install: Optional[InstallLimits] = None
    extra: Dict[str, Any] = _extra()

    @classmethod
    def from_json(cls, obj: Any) -> "Limits":
        bounds = (
            "timeout_seconds",
            "memory_mib",
            "code_chars",
            "packages",
            "package_chars",
            "env_entries",
            "domains",
            "id_chars",
        )
        return _build(cls, obj, {**{name: Bound.from_json for name in bounds}, "egress": EgressLimits.from_json,
                                 "install": InstallLimits.from_json})


@dataclasses.dataclass
class Health:
    """The service's liveness and what its host supports (``GET /v1/health``).

    ``languages`` maps each language to its interpreter's version;
    ``registries`` each language to the registry hosts that network mode
    ``registries`` reaches; ``package_languages`` are those whose runs may ask
    for packages here.
    """

    status: str = ""
    languages: Dict[str, str] = dataclasses.field(default_factory=dict)
    cgroup_mode: str = ""
    network_modes: List[str] = dataclasses.field(default_factory=list)
    rootfs: str = ""
    running: int = 0
    queued: int = 0
    registries: Dict[str, List[str]] = dataclasses.field(default_factory=dict)
    package_languages: List[str] = dataclasses.field(default_factory=list)
    extra: Dict[str, Any] = _extra()

    @classmethod
    def from_json(cls, obj: Any) -> "Health":
        return _build(cls, obj, {})
