// Types of brig's run API (shared/spec/API.md, api/openapi.yaml) and of this
// client. Field names are the API's own.

/** The socket brig listens on unless its operator chose another. */
export declare const DEFAULT_SOCKET: '/run/brig/brig.sock';

export type Language = 'python' | 'javascript';

export type NetworkMode = 'none' | 'registries' | 'domains' | 'any';

/** The body of POST /v1/runs. Absent fields take the defaults of GET /v1/limits. */
export interface Request {
  /**
   * Optional; 1 to 128 of `A-Z a-z 0-9 . _ : -`, generated when absent. The same
   * id with an identical request gets the existing run, never a second
   * execution; with a different request, a 409 (code `conflict`).
   */
  id?: string;
  language: Language;
  /** The program, 1 to 100,000 characters. */
  code: string;
  /** Wall-clock limit from the interpreter's start, 1 to 300 (default 30). */
  timeout_seconds?: number;
  /** Memory limit of everything the run uses, 128 to 2,048 MiB (default 512). */
  memory_mib?: number;
  /**
   * At most 50, each with a version constraint, which may be open: Python
   * `numpy==1.26.4` or `requests>=0`; JavaScript `lodash@4.17.21` or `lodash@*`.
   */
  packages?: string[];
  /** At most 50 variables; names `[A-Za-z_][A-Za-z0-9_]*`, not in `reserved_env`. */
  env?: Record<string, string>;
  /** Default `{ mode: 'none' }`. */
  network?: Network;
}

/** `domains` is given with mode `domains` only: 1 to 100 host names, each admitting its subdomains. */
export interface Network {
  /**
   * Default `none`; `domains` when `domains` is given without a mode (the client
   * sends it so). A mode given is sent as it is.
   */
  mode?: NetworkMode;
  domains?: string[];
}

export type State = 'queued' | 'preparing' | 'running' | 'finished';

export type Status = 'completed' | 'failed';

export type Reason =
  | 'error'
  | 'timeout'
  | 'memory'
  | 'stopped'
  | 'package_blocked'
  | 'package_unavailable'
  | 'internal';

/**
 * The Tool Call outcome: `unknown` is a networked run that timed out, ran out of
 * memory or was stopped (it may have changed an external system); `blocked`, a
 * package the policy refused (the code never ran).
 */
export type Outcome = 'succeeded' | 'failed' | 'unknown' | 'blocked';

/** A run's result: a report of what the run observed. */
export interface Result {
  id: string;
  language: Language;
  state: State;
  /** Set when the run has finished. */
  status?: Status;
  /** Set when a finished run failed. */
  reason?: Reason;
  /** Set when the run has finished. */
  outcome?: Outcome;
  /** null when the program did not exit (not started, or killed by a signal). */
  exit_code: number | null;
  /** The signal that ended the program, such as SIGKILL. */
  signal?: string;
  /** Up to 1,000,000 characters; invalid UTF-8 is replaced with U+FFFD. */
  stdout: string;
  /** Up to 100,000 characters. */
  stderr: string;
  stdout_truncated: boolean;
  stderr_truncated: boolean;
  /** One for each package request. */
  packages: PackageResult[];
  network: NetworkReport;
  usage: Usage;
  timing: Timing;
  /** One sentence for any failure: which limit was hit, which package was refused. */
  message?: string;
}

/** How a package request was resolved: name and version are the lock. */
export interface PackageResult {
  request: string;
  name: string;
  version: string;
  cached: boolean;
}

export interface NetworkReport {
  mode: NetworkMode;
  /** Every connection the run attempted, denied ones too, but those omitted counts. */
  connections: Connection[];
  /** How many attempts `connections` leaves out (past the run's bound on listed refusals); absent when none. */
  omitted?: number;
}

export interface Connection {
  host: string;
  port: number;
  allowed: boolean;
  /** The rule that decided, in words, such as `domain example.com`. */
  rule: string;
  bytes_sent: number;
  bytes_received: number;
  /** Why an allowed connection did not get through or was cut, such as
   * `the run's byte limit was reached`; absent when it went through. */
  failure?: string;
}

export interface Usage {
  wall_ms: number;
  cpu_ms: number;
  peak_memory_bytes: number;
}

/** Where the run's time went, in milliseconds. */
export interface Timing {
  queued_ms: number;
  prepare_ms: number;
  /** From the request to the interpreter's start. */
  start_ms: number;
  total_ms: number;
}

/** The run was accepted; its id (the request's, or the generated one). */
export interface AcceptedEvent {
  event: 'accepted';
  id: string;
}

/** Progress of the run's package installs: a line of the install. */
export interface PackageEvent {
  event: 'package';
  message: string;
}

/** The interpreter started. */
export interface StartedEvent {
  event: 'started';
}

/** Output as the program prints it. */
export interface OutputEvent {
  event: 'stdout' | 'stderr';
  data: string;
}

/** A connection the run attempted, allowed or denied. */
export interface EgressEvent {
  event: 'egress';
  host: string;
  port: number;
  allowed: boolean;
}

/** The last event of a stream. */
export interface ResultEvent {
  event: 'result';
  result: Result;
}

/** One line of a run's NDJSON stream; `event` tells which. */
export type Event =
  | AcceptedEvent
  | PackageEvent
  | StartedEvent
  | OutputEvent
  | EgressEvent
  | ResultEvent;

/** Liveness and what this host supports (GET /v1/health). */
export interface Health {
  status: string;
  /** Each language the host runs, with its interpreter's version. */
  languages: Partial<Record<Language, string>>;
  cgroup_mode: string;
  network_modes: NetworkMode[];
  rootfs: string;
  running: number;
  queued: number;
  /** The registry hosts a run with network `registries` may reach, by language. */
  registries: Record<Language, string[]>;
  /** The languages whose runs may ask for packages here. */
  package_languages: Language[];
}

/** A range and, where the field has one, its default. */
export interface Bound {
  min: number;
  max: number;
  default?: number;
}

/** The bounds and defaults of a request (GET /v1/limits), to tell a model. */
export interface Limits {
  timeout_seconds: Bound;
  memory_mib: Bound;
  code_chars: Bound;
  packages: Bound;
  package_chars: Bound;
  env_entries: Bound;
  domains: Bound;
  id_chars: Bound;
  stdout_chars: number;
  stderr_chars: number;
  body_bytes: number;
  /** The share of memory_mib that a run's writable files may take; past it a write fails with ENOSPC. */
  writable_files_share: number;
  /** How many processes and threads a run may have at once; a fork past it fails. Absent when the service does not say. */
  processes?: number;
  /** The CPU time a run may use, in CPUs; past it the run is throttled. Absent when the service does not say. */
  cpus?: number;
  languages: Language[];
  network_modes: NetworkMode[];
  /** A request's network mode when it gives none. */
  default_network_mode: NetworkMode;
  /** What an id may be, as a regular expression ("." and ".." are refused besides). */
  id_pattern: string;
  /** What a name in env may be, as a regular expression. */
  env_name_pattern: string;
  /** Environment variable names a request cannot set. */
  reserved_env: string[];
  /** The bounds of a networked run's connections; absent when the host offers no networked mode. */
  egress?: EgressLimits;
  /** The bounds of a run's package install; absent when the host installs no packages. */
  install?: InstallLimits;
}

/**
 * The operator's bounds on a run's package install: its time limit, which comes
 * before the program's timeout_seconds (a run whose packages the cache does not
 * hold may take up to this much longer), and its memory limit.
 */
export interface InstallLimits {
  timeout_seconds: number;
  memory_mib: number;
}

/** The operator's bounds on each networked run's connections. */
export interface EgressLimits {
  /** Connections open at once (and the burst of conns_per_second). */
  max_conns: number;
  conns_per_second: number;
  /** Bytes sent, and as many received, over all the run's connections. */
  max_bytes: number;
  /** Bounds reading a TLS ClientHello, a request head or a CONNECT line. */
  handshake_timeout_seconds: number;
}

export type ErrorCode =
  | 'invalid_request'
  | 'forbidden'
  | 'not_found'
  | 'method_not_allowed'
  | 'conflict'
  | 'too_large'
  | 'queue_full'
  | 'unavailable'
  | 'internal';

/**
 * An error response of the API with its HTTP status: 400 invalid_request (with
 * `field`), 403 forbidden, 404 not_found, 409 conflict, 413 too_large, 429
 * queue_full (with `retryAfter`), 503 unavailable (with `retryAfter` when the
 * service could not record the run in its journal, or is writing many large
 * answers or reading many requests' bodies at once: all safe to retry), 500
 * internal. A body that is not the API's (a proxy's) has the code
 * `http_<status>`.
 */
export declare class BrigError extends Error {
  constructor(init: BrigErrorInit);
  name: 'BrigError';
  status: number;
  code: ErrorCode | `http_${number}`;
  /** The first bad field of an invalid request, such as `packages[2]`. */
  field?: string;
  /** A sentence that says what to do, in words a model can act on. */
  message: string;
  /** The Retry-After of a 429, or of a 503 whose refusal may pass, in seconds. */
  retryAfter?: number;
}

/** What `new BrigError(...)` takes: the fields it carries. */
export interface BrigErrorInit {
  status: number;
  code: ErrorCode | `http_${number}`;
  field?: string;
  message: string;
  retryAfter?: number;
}

/**
 * A response ended before the run's result (the connection dropped, before its
 * head or within it): an event stream before its result event, or the Result of
 * `run`, `get` or `cancel`. The run may still be going: reattach with
 * `events(id)`, or read it with `get(id)`. `cause` is the socket's error, when
 * there was one.
 */
export declare class NoResultError extends Error {
  /**
   * `id` is the run's, when known (the message then names it); `cause`, the
   * socket's error, when there was one.
   */
  constructor(id?: string, cause?: unknown);
  name: 'NoResultError';
  /** The run's id, when the request or the stream said it. */
  id?: string;
}

export interface ClientOptions {
  /** The service's socket; default `/run/brig/brig.sock`. */
  socket?: string;
  /**
   * Bounds each call in milliseconds, its retries and a whole event stream
   * included; 0 (the default) sets none, as the service bounds every run by its
   * timeout_seconds. A call that runs out rejects with a `TimeoutError`
   * (a DOMException). Of `run`, `stream` and `events`, its `id` (an added
   * property) and message name the run, which goes on in the service:
   * `events(id)`/`get(id)` follow it, `cancel(id)` stops it; `cause` is the
   * signal's own error. One `run` sent without an `id` is stopped by the
   * service, since no one could learn its id to fetch it, and the message says so.
   */
  timeoutMs?: number;
  /**
   * Bounds each silence, in milliseconds, of a call that does not wait for a run
   * (`get`, `cancel`, `health`, `limits`) and the wait for the response head of
   * `stream` and `events`; not `run`, whose answer comes with its result. Default
   * 30,000; 0 sets none. A call that runs out rejects with a `TimeoutError`
   * naming the socket, the call and `callTimeoutMs`; of `stream` and
   * `events`, one with the run's `id`, as for `timeoutMs`.
   */
  callTimeoutMs?: number;
  /**
   * The retry of a 429 (the service's run queue is full), and of a 503 with a
   * Retry-After (the service could not record the run in its journal, or is
   * writing many large answers or reading many requests' bodies at once).
   */
  retry?: RetryOptions;
}

export interface RetryOptions {
  /** How many requests are sent at most, the first included (default 4; 1 never retries). */
  attempts?: number;
  /**
   * The most the waits take in all, in milliseconds (default 30,000): a 429 whose
   * Retry-After would take them past it is thrown at once. A 429 without
   * Retry-After waits 1 s.
   */
  maxWaitMs?: number;
}

export interface CallOptions {
  /**
   * Aborts the call. A `run`, `stream` or `events` call aborted with an
   * `AbortError` or a `TimeoutError` (`abort()`, `AbortSignal.timeout`) rejects
   * with a DOMException of the same name whose `id` and message name the run,
   * which goes on (`events(id)`/`get(id)` follow it, `cancel(id)` stops it),
   * and whose `cause` is the signal's reason; one sent by `run` without an `id`
   * is stopped by the service (its id is known to no one), as the message says.
   * Any other call, or a reason of your own (`abort(reason)`), rejects with
   * the signal's reason as it is.
   */
  signal?: AbortSignal;
  /** Overrides the client's timeoutMs for this call. */
  timeoutMs?: number;
}

export interface RunCallOptions extends CallOptions {
  /** For root and admins: the uid that created the run, when several uids used its id. */
  uid?: number;
}

/** A client of one brig service, over its Unix socket. */
export declare class Client {
  constructor(options?: ClientOptions);
  /** The socket it talks to. */
  readonly socket: string;
  /** Starts a run and resolves with its Result once it has finished. */
  run(request: Request, options?: CallOptions): Promise<Result>;
  /**
   * Starts a run and yields its events as they happen, ending with the result
   * event. The request is sent when the iteration begins. Leaving the loop early
   * closes the stream; the run goes on.
   */
  stream(request: Request, options?: CallOptions): AsyncGenerator<Event, void, undefined>;
  /** A run's Result, finished or not (its `state` says). */
  get(id: string, options?: RunCallOptions): Promise<Result>;
  /** Replays a run's events from the start and follows them to the result event. */
  events(id: string, options?: RunCallOptions): AsyncGenerator<Event, void, undefined>;
  /**
   * Stops a run (reason `stopped`) and resolves with its Result; a run that had
   * finished resolves with its Result as it was.
   */
  cancel(id: string, options?: RunCallOptions): Promise<Result>;
  health(options?: CallOptions): Promise<Health>;
  limits(options?: CallOptions): Promise<Limits>;
}
