// Compiled (never run) by test/types.test.js with tsc --strict against
// index.d.ts, through the package's own name as a harness imports it: what a
// harness writes must type-check, and each @ts-expect-error line must not.

import {
  BrigError,
  Client,
  DEFAULT_SOCKET,
  NoResultError,
  type Event,
  type Health,
  type Limits,
  type Request,
  type Result,
} from '@brig-sandbox/client';

const socket: '/run/brig/brig.sock' = DEFAULT_SOCKET;
const brig = new Client({ socket, timeoutMs: 60_000, retry: { attempts: 3, maxWaitMs: 10_000 } });

const request: Request = {
  id: 'tool-call-1',
  language: 'python',
  code: 'print(1)',
  timeout_seconds: 10,
  memory_mib: 256,
  packages: ['requests==2.32.3'],
  env: { GREETING: 'hi' },
  network: { mode: 'domains', domains: ['example.com'] },
};

// domains alone: the client sends mode domains.
const domainsOnly: Request = { language: 'python', code: 'print(1)', network: { domains: ['example.com'] } };

// A harness's own tests make the client's errors, as index.js does.
const full = new BrigError({ status: 429, code: 'queue_full', message: 'the queue is full', retryAfter: 1 });
const proxied = new BrigError({ status: 502, code: 'http_502', field: undefined, message: 'bad gateway' });
const dropped = new NoResultError('tool-call-1', new Error('socket hang up'));
const droppedEarly = new NoResultError();
// @ts-expect-error: a BrigError has a status, a code and a message
const noStatus = new BrigError({ code: 'internal', message: 'x' });
// @ts-expect-error: not a code of the API
const badCode = new BrigError({ status: 400, code: 'bad', message: 'x' });
// @ts-expect-error: a NoResultError's id is a string
const numericId = new NoResultError(1);

// @ts-expect-error: brig runs python and javascript only
const ruby: Request = { language: 'ruby', code: 'puts 1' };

// @ts-expect-error: the API's names, not camelCase
const camel: Request = { language: 'python', code: 'print(1)', timeoutSeconds: 10 };

export async function harness(): Promise<string> {
  const res: Result = await brig.run(request, { signal: AbortSignal.timeout(1000) });
  const code: number | null = res.exit_code;
  const lock = res.packages.map((p) => `${p.name}==${p.version}${p.cached ? ' (cached)' : ''}`);
  const denied = res.network.connections.filter((c) => !c.allowed).map((c) => `${c.host}:${c.port} ${c.rule}`);
  const spent = res.usage.cpu_ms + res.usage.wall_ms + res.usage.peak_memory_bytes + res.timing.total_ms;
  if (res.outcome === 'unknown' || res.reason === 'package_blocked') return res.message ?? '';
  // @ts-expect-error: not an outcome of API.md
  if (res.outcome === 'maybe') return '';

  let out = '';
  for await (const ev of brig.stream(request)) {
    switch (ev.event) {
      case 'accepted':
        out += ev.id;
        break;
      case 'stdout':
      case 'stderr':
        out += ev.data;
        break;
      case 'egress':
        out += `${ev.host}:${ev.port} ${ev.allowed}`;
        break;
      case 'package':
        out += ev.message;
        break;
      case 'result':
        out += ev.result.stdout;
        break;
      case 'started':
        // @ts-expect-error: a started event has no data
        out += ev.data;
        break;
    }
  }
  const replay: Event[] = [];
  for await (const ev of brig.events('tool-call-1', { uid: 1000 })) replay.push(ev);

  const now: Result = await brig.get('tool-call-1');
  const stopped: Result = await brig.cancel(now.id);
  const health: Health = await brig.health();
  const limits: Limits = await brig.limits({ timeoutMs: 5000 });
  const python: string | undefined = health.languages.python;
  const maxTimeout: number = limits.timeout_seconds.max;
  const defaultMemory: number | undefined = limits.memory_mib.default;

  try {
    await brig.run({ language: 'javascript', code: 'console.log(1)' });
  } catch (err) {
    if (err instanceof BrigError) {
      const status: number = err.status;
      const field: string | undefined = err.field;
      const wait: number | undefined = err.retryAfter;
      if (err.code === 'queue_full' || err.code === 'invalid_request' || err.code === 'http_502') {
        return `${status} ${field} ${wait} ${err.message}`;
      }
    } else if (err instanceof NoResultError) {
      return err.id ?? '';
    }
  }
  return [out, code, lock, denied, spent, replay.length, stopped.reason, python, maxTimeout, defaultMemory, ruby, camel,
    domainsOnly, full.retryAfter, proxied.code, dropped.id, droppedEarly.message, noStatus, badCode, numericId]
    .join(' ');
}
