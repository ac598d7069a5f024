// A client of brig's run API (shared/spec/API.md, api/openapi.yaml) over its Unix
// socket, for harnesses written in JavaScript or TypeScript. It has no
// dependencies: node:http speaks to the socket. Requests and results use the
// API's own field names (timeout_seconds, exit_code...), so API.md is its
// reference; index.d.ts types them.
//
// Typical use:
//
//	import { Client } from '@brig-sandbox/client';
//	const brig = new Client({ socket: '/run/brig/brig.sock' });
//	const res = await brig.run({ language: 'python', code: 'print(1)' });
//	for await (const ev of brig.stream({ language: 'javascript', code: 'console.log(1)' })) { ... }

import http from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';

/** The socket brig listens on unless its operator chose another. */
export const DEFAULT_SOCKET = '/run/brig/brig.sock';

// The service ignores the host; curl's examples and the Go client say brig.
const HOST = 'brig';

// maxLine bounds one NDJSON line or one JSON body, in characters: a result at
// the service's bound on a result (api.MaxResultBytes): both outputs at their
// caps (1,000,000 and 100,000 characters), each character escaped at worst as
// \uXXXX, 4 MiB of network.connections, and 1 MiB for the rest. It is the Go
// client's bound.
const maxLine = 6 * (1_000_000 + 100_000) + (4 << 20) + (1 << 20);

// maxErrorBody bounds the body of an error response that is read.
const maxErrorBody = 1 << 20;

// Defaults of the retry of a 429 (the run queue is full).
const defaultRetry = Object.freeze({
  // attempts is how many requests are sent at most, the first one included.
  attempts: 4,
  // maxWaitMs bounds the waits in all, as the Python client's max_wait: a
  // Retry-After that would take them past it is thrown at once, so that the
  // harness decides.
  maxWaitMs: 30_000,
});

// waitWithoutRetryAfter is the pause after a 429 that has no usable Retry-After.
const waitWithoutRetryAfter = 1_000;

/**
 * An error response of the API: {"error": {"code", "field", "message"}} with its
 * HTTP status. `field` names the first bad field of a 400; `retryAfter` is the
 * Retry-After of a 429, or of a 503 whose refusal may pass (the service could
 * not record the run in its journal, or is writing many large answers or
 * reading many requests' bodies at once), in seconds.
 */
export class BrigError extends Error {
  constructor({ status, code, field, message, retryAfter }) {
    super(message);
    this.name = 'BrigError';
    this.status = status;
    this.code = code;
    if (field !== undefined) this.field = field;
    if (retryAfter !== undefined) this.retryAfter = retryAfter;
  }

  toString() {
    return `BrigError: ${this.status} ${this.code}: ${this.field ? this.field + ': ' : ''}${this.message}`;
  }
}

/**
 * A response ended before the run's result: the connection dropped during an
 * event stream (before its result event) or during the Result of run, get or
 * cancel. The run may still be going: `id` (when the request or the stream said
 * it) reattaches with client.events(id) or reads it with client.get(id). `cause`
 * is the socket's error, when there was one.
 */
export class NoResultError extends Error {
  constructor(id, cause) {
    // The Python client's ProtocolError (stream_ended) says the same.
    super(
      id
        ? `the connection dropped before the run's result; the run ${id} may still be going: ` +
            'follow it with events(id) or read it with get(id)'
        : 'the connection dropped before the run\'s result, and before its id was known: ' +
            'give requests an id to follow them after a dropped connection',
      cause === undefined ? undefined : { cause },
    );
    this.name = 'NoResultError';
    if (id !== undefined) this.id = id;
  }
}

/**
 * The error of a call that starts or follows a run (run, stream, events) ended
 * by a timeout or an abort: err again, a DOMException of the same name
 * (TimeoutError, AbortError) with err as its cause, whose message says what
 * became of the run (as the Python client's RunTimeout does) and whose id is
 * the run's when known. said says what ended the call. A reason of the
 * caller's own (abort(reason) with anything else) is returned as it is.
 * stopped: the call was run's without an id, which the service stops as its
 * connection closes (supervisor/server.go).
 */
function runGoesOn(err, said, id, stopped) {
  if (!(err instanceof DOMException) || (err.name !== 'TimeoutError' && err.name !== 'AbortError')) return err;
  let message;
  if (id) {
    message = `${said}; the run ${id} goes on in the service: follow it with events(id) ` +
      'or read it with get(id), and stop it with cancel(id)';
  } else if (stopped) {
    message = `${said}; the run had no id, so the service stops it as the connection closes ` +
      '(its id would have come with its result): give requests an id to follow them past a timeout or an abort';
  } else {
    message = `${said}, before the run's id was known; a run the service took goes on unseen: ` +
      'give requests an id to follow them past a timeout or an abort';
  }
  const out = new DOMException(message, err.name);
  Object.defineProperty(out, 'cause', { value: err, writable: true, configurable: true });
  if (id) out.id = id;
  return out;
}

/** A client of one brig service. It keeps no connection open between calls. */
export class Client {
  #agent;
  #timeoutMs;
  #callTimeoutMs;
  #retry;

  /**
   * @param {object} [options]
   * @param {string} [options.socket] the service's socket (default /run/brig/brig.sock)
   * @param {number} [options.timeoutMs] bounds each call, retries and the whole
   *   event stream included; 0 (the default) sets none: the service bounds every
   *   run by its timeout_seconds.
   * @param {number} [options.callTimeoutMs] bounds each silence of a call that does
   *   not wait for a run (get, cancel, health, limits), and the wait for a stream's
   *   response head (stream, events), which the service sends at once; 30,000 by
   *   default, as the Python client's timeout; 0 sets none.
   * @param {{attempts?: number, maxWaitMs?: number}} [options.retry] the retry of a 429
   */
  constructor({ socket = DEFAULT_SOCKET, timeoutMs = 0, callTimeoutMs = 30_000, retry = {} } = {}) {
    if (typeof socket !== 'string' || socket === '') {
      throw new TypeError('socket must be the path of brig\'s Unix socket');
    }
    checkCount('timeoutMs', timeoutMs, 0);
    checkCount('callTimeoutMs', callTimeoutMs, 0);
    const r = {
      attempts: retry.attempts ?? defaultRetry.attempts,
      maxWaitMs: retry.maxWaitMs ?? defaultRetry.maxWaitMs,
    };
    checkCount('retry.attempts', r.attempts, 1);
    checkCount('retry.maxWaitMs', r.maxWaitMs, 0);
    this.socket = socket;
    this.#timeoutMs = timeoutMs;
    this.#callTimeoutMs = callTimeoutMs;
    this.#retry = Object.freeze(r);
    // Without keep-alive, a request never lands on a connection that the service
    // is closing: a POST is not retried by node, and a run is worth more than
    // the cost of a Unix connection.
    this.#agent = new http.Agent({ keepAlive: false });
  }

  /** Starts a run and resolves with its Result once it has finished. */
  async run(request, options = {}) {
    checkRequest(request);
    return this.#json('POST', '/v1/runs', options, withMode(request), { id: request.id }, false);
  }

  /**
   * Starts a run and yields its events as they happen, ending with the result
   * event. The request is sent when the iteration begins. Leaving the loop early
   * closes the stream; the run goes on (cancel(id) stops it).
   */
  stream(request, options = {}) {
    checkRequest(request);
    return this.#events('POST', '/v1/runs', options, withMode(request), request?.id);
  }

  /** Resolves with a run's Result, finished or not (its state says). */
  async get(id, options = {}) {
    return this.#json('GET', runPath(id, '', options), options, undefined, { id });
  }

  /** Replays a run's events from the start and follows them to the result event. */
  events(id, options = {}) {
    return this.#events('GET', runPath(id, '/events', options), options, undefined, id);
  }

  /** Stops a run (reason stopped) and resolves with its Result. */
  async cancel(id, options = {}) {
    return this.#json('DELETE', runPath(id, '', options), options, undefined, { id });
  }

  /** Liveness, and what the host supports: languages, network modes... */
  async health(options = {}) {
    return this.#json('GET', '/v1/health', options);
  }

  /** The bounds and defaults of a request, to tell a model. */
  async limits(options = {}) {
    return this.#json('GET', '/v1/limits', options);
  }

  // json resolves with the JSON body of a request's 200 response. run is { id }
  // when that body is a run's Result (id undefined when not known): a connection
  // that drops while it is read is then a NoResultError, as in a stream.
  // bounded says whether callTimeoutMs bounds its silences: not for run, whose
  // answer's head comes with its result.
  async #json(method, path, options, body, run, bounded = true) {
    const { signal, timeout } = this.#signal(options);
    // (fired: the TimeoutError of a silence in the body too, which the
    // socket's destruction would otherwise report as a dropped connection.)
    const silence = bounded ? { ms: this.#callTimeoutMs, whole: true, fired: undefined } : undefined;
    const dropped = (err) => (run
      ? new NoResultError(run.id, err)
      : new Error(`the connection dropped while reading the response of ${method} ${path}: ${err.message}`,
        { cause: err }));
    try {
      const res = await this.#send(method, path, body, 'application/json', signal, dropped, silence);
      const text = await readAll(res, maxLine, dropped);
      let value;
      try {
        value = JSON.parse(text);
      } catch (err) {
        throw new Error(`decoding the response of ${method} ${path}: ${err.message}`, { cause: err });
      }
      // Every answer of the API is an object: an array, a string or null is
      // not a Result (nor the health, nor the limits).
      if (value === null || typeof value !== 'object' || Array.isArray(value)) {
        throw new Error(`decoding the response of ${method} ${path}: not a JSON object: ${text.trim().slice(0, 200)}`);
      }
      return value;
    } catch (err) {
      const ended = signal?.aborted ? signal.reason : (silence?.fired ?? err);
      if (method !== 'POST' || ended !== signal?.reason) throw ended;
      // run: the call ended, and the run?
      throw runGoesOn(ended, this.#ended(method, path, ended, timeout), run.id, run.id === undefined);
    }
  }

  // ended says what ended a call: its timeoutMs (timeout, the signal of it),
  // or the caller's signal.
  #ended(method, path, reason, timeout) {
    return reason === timeout?.signal.reason
      ? `brig at ${this.socket} did not answer ${method} ${path} within its timeoutMs (${timeout.ms} ms)`
      : `${method} ${path} to brig at ${this.socket} was ended by its signal (${reason.message})`;
  }

  // events yields the NDJSON events of a response; id is the run's, when known
  // before its accepted event, for a NoResultError.
  async *#events(method, path, options, body, id) {
    const { signal, timeout } = this.#signal(options);
    const silence = { ms: this.#callTimeoutMs, whole: false, fired: undefined };
    // goesOn is the error of a timeout or an abort, saying the run goes on;
    // any other err as it is.
    const goesOn = (err) => {
      if (signal?.aborted && err === signal.reason) return runGoesOn(err, this.#ended(method, path, err, timeout), id, false);
      if (err !== undefined && err === silence.fired) return runGoesOn(err, err.message, id, false); // no head came
      return err;
    };
    let res;
    try {
      res = await this.#send(method, path, body, 'application/x-ndjson', signal, (err) => new NoResultError(id, err),
        silence);
    } catch (err) {
      throw goesOn(signal?.aborted ? signal.reason : err);
    }
    res.setEncoding('utf8'); // a character split between chunks is kept whole
    let pending = [];
    let pendingChars = 0;
    try {
      for await (const chunk of readChunks(res, () => id, signal)) {
        let start = 0;
        for (let nl = chunk.indexOf('\n'); nl >= 0; nl = chunk.indexOf('\n', start)) {
          pending.push(chunk.slice(start, nl));
          const line = pending.join('');
          pending = [];
          pendingChars = 0;
          start = nl + 1;
          if (line.trim() === '') continue;
          const ev = parseEvent(line);
          if (ev.event === 'accepted' && ev.id) id = ev.id;
          yield ev;
          if (ev.event === 'result') return;
        }
        if (start < chunk.length) {
          pendingChars += chunk.length - start;
          if (pendingChars > maxLine) {
            throw new Error(`an event of the stream is longer than ${maxLine} characters`);
          }
          pending.push(chunk.slice(start));
        }
      }
      // The body ended as framed (a cut one threw above): a last line sent
      // without its newline is an event when it is whole JSON, as in the
      // Python client; a rest that is not is a line cut by a connection that
      // framed the body by its end, and no event.
      const last = pending.join('').trim();
      if (last !== '' && isJSON(last)) {
        const ev = parseEvent(last);
        if (ev.event === 'accepted' && ev.id) id = ev.id;
        yield ev;
        if (ev.event === 'result') return;
      }
      throw new NoResultError(id);
    } catch (err) {
      throw goesOn(err);
    } finally {
      res.destroy();
    }
  }

  // signal combines the caller's signal with the call's timeout: { signal,
  // timeout: { signal, ms } of the timeout, if any }.
  #signal({ signal, timeoutMs = this.#timeoutMs } = {}) {
    checkCount('timeoutMs', timeoutMs, 0);
    const signals = [];
    if (signal) signals.push(signal);
    let timeout;
    if (timeoutMs > 0) {
      timeout = { signal: AbortSignal.timeout(timeoutMs), ms: timeoutMs };
      signals.push(timeout.signal);
    }
    if (signals.length === 0) return {};
    return { signal: signals.length === 1 ? signals[0] : AbortSignal.any(signals), timeout };
  }

  // send sends a request and resolves with its 200 response. Any other status
  // is a BrigError; a 429, or a 503 with a Retry-After (the journal could not
  // record the run, or the service is writing many large answers or reading
  // many requests' bodies at once; without one it is shutting down), is sent
  // again after its Retry-After, within the retry's bounds: a refused run was
  // not admitted, and a GET, a DELETE or an idempotent replay answers the same
  // again. A connection the service drops before its response's head (a
  // service that dies during a run, whose head comes with its result) is
  // dropped(err). silence, { ms, whole }, bounds each silence of the
  // exchange (whole) or only the wait for the response's head.
  async #send(method, path, body, accept, signal, dropped, silence) {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body), 'utf8');
    let waitedMs = 0;
    for (let attempt = 1; ; attempt++) {
      const res = await this.#request(method, path, payload, accept, signal, dropped, silence);
      if (res.statusCode === 200) return res;
      const err = await errorOf(res);
      const retried = err.status === 429 || (err.status === 503 && err.retryAfter !== undefined);
      if (!retried || attempt >= this.#retry.attempts) throw err;
      const waitMs = err.retryAfter === undefined ? waitWithoutRetryAfter : err.retryAfter * 1000;
      if (waitedMs + waitMs > this.#retry.maxWaitMs) throw err;
      waitedMs += waitMs;
      await sleep(waitMs, undefined, { signal });
    }
  }

  #request(method, path, payload, accept, signal, dropped, silence) {
    return new Promise((resolve, reject) => {
      const headers = { Host: HOST, Accept: accept };
      if (payload !== undefined) {
        headers['Content-Type'] = 'application/json';
        headers['Content-Length'] = payload.length;
      }
      const req = http.request({
        socketPath: this.socket,
        method,
        path,
        headers,
        agent: this.#agent,
        signal,
      });
      if (silence?.ms > 0) {
        // A service that takes the connection and never answers (wedged, or
        // stopped with SIGSTOP) held every call (the clients probe, 2026-12-06).
        req.setTimeout(silence.ms, () => {
          silence.fired = new DOMException(
            `brig at ${this.socket} sent nothing for ${silence.ms} ms (callTimeoutMs) in answer to ${method} ${path}`,
            'TimeoutError');
          req.destroy(silence.fired);
        });
      }
      req.once('response', (res) => {
        if (silence?.ms > 0 && !silence.whole) req.setTimeout(0);
        resolve(res);
      });
      req.once('error', (err) => {
        if (signal?.aborted) return reject(signal.reason);
        if (err.name === 'TimeoutError') return reject(err);
        if (err.code === 'ENOENT' || err.code === 'ECONNREFUSED' || err.code === 'EACCES') {
          return reject(new Error(
            `connecting to brig at ${this.socket}: ${err.code} (is brig serve running there ` +
              '(systemctl status brig), and may this user open its socket (its socket_group, ' +
              'and allow_uids or allow_gids)?)',
            { cause: err },
          ));
        }
        if (err.code === 'EAGAIN') {
          // A Unix socket whose listen backlog is full refuses at once.
          return reject(new Error(
            `connecting to brig at ${this.socket}: EAGAIN (its listen backlog is full: the service is ` +
              'not taking connections as fast as they come; retry shortly)',
            { cause: err },
          ));
        }
        // "socket hang up": the request went out, no head came back.
        if (err.code === 'ECONNRESET' && dropped) return reject(dropped(err));
        reject(err);
      });
      req.end(payload);
    });
  }
}

// readChunks yields a response's chunks; a connection that drops before the
// end is a NoResultError naming the run, unless the caller aborted.
async function* readChunks(res, id, signal) {
  try {
    for await (const chunk of res) yield chunk;
  } catch (err) {
    if (signal?.aborted) throw signal.reason;
    throw new NoResultError(id(), err);
  }
}

function isJSON(text) {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

function parseEvent(line) {
  let ev;
  try {
    ev = JSON.parse(line);
  } catch (err) {
    throw new Error(`decoding an event: ${err.message}`, { cause: err });
  }
  if (ev === null || typeof ev !== 'object' || typeof ev.event !== 'string') {
    throw new Error(`decoding an event: no "event" in ${line.slice(0, 200)}`);
  }
  // The service leaves out empty values; the types promise them.
  switch (ev.event) {
    case 'stdout':
    case 'stderr':
      ev.data ??= '';
      break;
    case 'egress':
      ev.allowed = ev.allowed === true;
      break;
    case 'result':
      if (ev.result === null || typeof ev.result !== 'object') {
        throw new Error('decoding an event: the result event has no result');
      }
      break;
  }
  return ev;
}

// errorOf reads an error response into a BrigError; a body that is not the
// API's error shape (a proxy's, say) gets the code http_STATUS.
async function errorOf(res) {
  const status = res.statusCode;
  const retryAfter = parseRetryAfter(res.headers['retry-after']);
  let text = '';
  try {
    text = await readAll(res, maxErrorBody);
  } catch {
    // The status says enough.
  }
  let e;
  try {
    e = JSON.parse(text)?.error;
  } catch {
    // Not JSON: described below.
  }
  if (e === null || typeof e !== 'object' || typeof e.code !== 'string') {
    const detail = text.trim().slice(0, 200);
    e = { code: `http_${status}`, message: `${status} ${res.statusMessage}${detail ? ': ' + detail : ''}` };
  }
  return new BrigError({
    status,
    code: e.code,
    field: typeof e.field === 'string' && e.field !== '' ? e.field : undefined,
    message: typeof e.message === 'string' ? e.message : String(e.message),
    retryAfter: status === 429 || status === 503 ? retryAfter : undefined,
  });
}

// parseRetryAfter reads Retry-After as seconds, from a (decimal) number of
// seconds or an HTTP date (RFC 9110; brig sends seconds), the seconds from now
// to the date rounded up, 0 when past; undefined when it is absent or neither.
// The Python client's parse_retry_after reads it the same way.
function parseRetryAfter(value) {
  if (typeof value !== 'string' || value.trim() === '') return undefined;
  const v = value.trim();
  if (/^[0-9]+(\.[0-9]+)?$/.test(v)) return Number(v);
  // An HTTP date begins with its day's name; Date.parse would read "2.5" or
  // "-1" as dates too. All three of its forms are in GMT, which asctime's
  // leaves unsaid (Date.parse would take it for local time).
  if (!/^[A-Za-z]/.test(v)) return undefined;
  const at = Date.parse(/\b(GMT|UTC|UT|Z)$|[+-][0-9]{4}$/i.test(v) ? v : `${v} GMT`);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, Math.ceil((at - Date.now()) / 1000));
}

// readAll resolves with a response's whole body, at most limit characters; a
// connection that drops before its end rejects with dropped(the socket's error).
async function readAll(res, limit, dropped = (err) => err) {
  res.setEncoding('utf8');
  const chunks = res[Symbol.asyncIterator]();
  let text = '';
  for (;;) {
    let next;
    try {
      next = await chunks.next();
    } catch (err) {
      throw dropped(err);
    }
    if (next.done) return text;
    text += next.value;
    if (text.length > limit) {
      res.destroy();
      throw new Error(`the response is longer than ${limit} characters`);
    }
  }
}

function runPath(id, suffix, { uid } = {}) {
  if (typeof id !== 'string' || id === '') throw new TypeError('id must be a run\'s id');
  let path = `/v1/runs/${encodeURIComponent(id)}${suffix}`;
  if (uid !== undefined) {
    checkCount('uid', uid, 0);
    path += `?uid=${uid}`;
  }
  return path;
}

function checkRequest(request) {
  if (request === null || typeof request !== 'object' || Array.isArray(request)) {
    throw new TypeError('a request is an object such as { language: \'python\', code: \'print(1)\' }');
  }
  // JSON.stringify would send NaN and Infinity as null, which the service
  // would refuse as a null it was never given.
  for (const [k, v] of Object.entries(request)) {
    if (typeof v === 'number' && !Number.isFinite(v)) {
      throw new TypeError(`${k} is ${v}, which JSON can't carry: give a whole number, or leave ${k} out for its default`);
    }
  }
}

// withMode is the request to send: `network: { domains }` without a mode means
// mode domains (the service refuses domains with any other mode), as the
// Python client's domains= alone does. A mode given is sent as it is.
function withMode(request) {
  const net = request.network;
  if (net === null || typeof net !== 'object' || net.mode !== undefined || net.domains === undefined) {
    return request;
  }
  return { ...request, network: { ...net, mode: 'domains' } };
}

function checkCount(name, value, min) {
  if (!Number.isSafeInteger(value) || value < min) {
    throw new TypeError(`${name} must be an integer of at least ${min}, not ${value}`);
  }
}
