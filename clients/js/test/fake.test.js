// The client against a fake service: node:http listening on a Unix socket,
// answering what brig rarely does on demand (429 with Retry-After, broken
// streams, other servers' errors). Needs neither root nor brig.

import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

import { BrigError, Client, NoResultError } from '../index.js';
import { shortTempDir } from '../testsupport/service.js';

const result = (over = {}) => ({
  id: 'r1',
  language: 'python',
  state: 'finished',
  status: 'completed',
  outcome: 'succeeded',
  exit_code: 0,
  stdout: 'ok\n',
  stderr: '',
  stdout_truncated: false,
  stderr_truncated: false,
  packages: [],
  network: { mode: 'none', connections: [] },
  usage: { wall_ms: 1, cpu_ms: 1, peak_memory_bytes: 1 },
  timing: { queued_ms: 0, prepare_ms: 0, start_ms: 1, total_ms: 2 },
  ...over,
});

const queueFull = {
  error: { code: 'queue_full', message: 'the queue is full; retry after the Retry-After seconds' },
};

// fake serves handle(req, res, n) on a Unix socket, n counting requests from 1,
// and records every request with its body.
async function fake(handle) {
  const dir = shortTempDir('brig-js-fake-');
  const socket = path.join(dir, 'fake.sock');
  const requests = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      requests.push({ method: req.method, url: req.url, headers: req.headers, body });
      handle(req, res, requests.length);
    });
  });
  await new Promise((resolve) => server.listen(socket, resolve));
  return {
    socket,
    requests,
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

// withFake runs fn(client, fake) against a fake service and closes it.
async function withFake(handle, clientOptions, fn) {
  const f = await fake(handle);
  try {
    return await fn(new Client({ socket: f.socket, timeoutMs: 30_000, ...clientOptions }), f);
  } finally {
    await f.close();
  }
}

const sendJSON = (res, status, body, headers = {}) => {
  res.writeHead(status, { 'Content-Type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
};

async function collect(iterable) {
  const events = [];
  for await (const ev of iterable) events.push(ev);
  return events;
}

const request = { language: 'python', code: 'print("ok")' };

describe('429 and Retry-After', () => {
  it('waits Retry-After, then sends the same request again', async () => {
    await withFake((req, res, n) => {
      if (n === 1) return sendJSON(res, 429, queueFull, { 'Retry-After': '1' });
      sendJSON(res, 200, result());
    }, {}, async (brig, f) => {
      const t0 = Date.now();
      const res = await brig.run({ ...request, id: 'same' });
      const waited = Date.now() - t0;
      assert.equal(res.stdout, 'ok\n');
      assert.equal(f.requests.length, 2);
      assert.ok(waited >= 950, `retried after ${waited} ms, before Retry-After's 1 s`);
      assert.ok(waited < 10_000, `retried after ${waited} ms`);
      assert.deepEqual(JSON.parse(f.requests[1].body), { ...request, id: 'same' });
      assert.equal(f.requests[0].body, f.requests[1].body);
      for (const r of f.requests) {
        assert.equal(r.method, 'POST');
        assert.equal(r.url, '/v1/runs');
        assert.equal(r.headers['content-type'], 'application/json');
        assert.equal(r.headers.accept, 'application/json');
        assert.equal(r.headers.host, 'brig');
      }
    });
  });

  it('retries a stream too', async () => {
    await withFake((req, res, n) => {
      if (n === 1) return sendJSON(res, 429, queueFull, { 'Retry-After': '0' });
      res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
      res.end([
        { event: 'accepted', id: 'r1' },
        { event: 'started' },
        { event: 'stdout', data: 'ok\n' },
        { event: 'result', result: result() },
      ].map((e) => JSON.stringify(e) + '\n').join(''));
    }, {}, async (brig, f) => {
      const events = await collect(brig.stream(request));
      assert.deepEqual(events.map((e) => e.event), ['accepted', 'started', 'stdout', 'result']);
      assert.equal(f.requests.length, 2);
      assert.equal(f.requests[1].headers.accept, 'application/x-ndjson');
    });
  });

  const bounded = [
    { name: 'the attempts run out', retry: { attempts: 3 }, retryAfter: '0', wantRequests: 3, wantRetryAfter: 0 },
    { name: 'attempts 1 never retries', retry: { attempts: 1 }, retryAfter: '0', wantRequests: 1, wantRetryAfter: 0 },
    {
      name: 'Retry-After is longer than maxWaitMs',
      retry: { attempts: 5, maxWaitMs: 5_000 },
      retryAfter: '120',
      wantRequests: 1,
      wantRetryAfter: 120,
    },
    // maxWaitMs bounds the waits in all, as the Python client's max_wait
    // (up to 2026-12-05 each wait alone, 90 s in all by default).
    {
      name: 'the waits would pass maxWaitMs in all',
      retry: { attempts: 10, maxWaitMs: 2_500 },
      retryAfter: '1',
      wantRequests: 3,
      wantRetryAfter: 1,
    },
  ];
  for (const tc of bounded) {
    it(`throws the 429 when ${tc.name}`, async () => {
      await withFake((req, res) => sendJSON(res, 429, queueFull, { 'Retry-After': tc.retryAfter }),
        { retry: tc.retry }, async (brig, f) => {
          const t0 = Date.now();
          await assert.rejects(brig.run(request), (err) => {
            assert.ok(err instanceof BrigError, `got ${err}`);
            assert.equal(err.status, 429);
            assert.equal(err.code, 'queue_full');
            assert.equal(err.retryAfter, tc.wantRetryAfter);
            assert.equal(err.message, queueFull.error.message);
            return true;
          });
          assert.equal(f.requests.length, tc.wantRequests);
          assert.ok(Date.now() - t0 < 5_000, 'it waited');
        });
    });
  }

  it('retries a 503 with Retry-After, not one without', async () => {
    // With Retry-After the journal could not record the run: nothing was
    // admitted, as with a 429. Without, the service is shutting down.
    const unavailable = { error: { code: 'unavailable', message: 'the service could not record the run in its journal' } };
    await withFake((req, res, n) => {
      if (n === 1) return sendJSON(res, 503, unavailable, { 'Retry-After': '0' });
      sendJSON(res, 200, result());
    }, {}, async (brig, f) => {
      const res = await brig.run(request);
      assert.equal(res.stdout, 'ok\n');
      assert.equal(f.requests.length, 2);
    });
    await withFake((req, res) => sendJSON(res, 503, unavailable), {}, async (brig, f) => {
      await assert.rejects(brig.run(request), (err) => {
        assert.equal(err.status, 503);
        assert.equal(err.retryAfter, undefined);
        return true;
      });
      assert.equal(f.requests.length, 1);
    });
  });

  it('reads a Retry-After that is an HTTP date', async () => {
    await withFake((req, res, n) => {
      if (n === 1) {
        return sendJSON(res, 429, queueFull, { 'Retry-After': new Date(Date.now() - 5_000).toUTCString() });
      }
      sendJSON(res, 200, result());
    }, {}, async (brig, f) => {
      assert.equal((await brig.run(request)).id, 'r1');
      assert.equal(f.requests.length, 2);
    });
  });

  // How both clients read a Retry-After (the Python client's test_types has
  // the same table): seconds, whole or decimal, or an HTTP date (RFC 9110:
  // IMF-fixdate, RFC 850 or asctime, all in GMT) as the seconds to it, rounded
  // up, 0 when past. Date.parse alone read "2.5" as a date in 2001.
  const asctime = (d) => {
    const [day, mon, date, time, year] = [d.toUTCString().slice(0, 3), d.toUTCString().slice(8, 11),
      d.getUTCDate(), d.toISOString().slice(11, 19), d.getUTCFullYear()];
    return `${day} ${mon} ${String(date).padStart(2, ' ')} ${time} ${year}`;
  };
  const retryAfters = [
    ['2', 2], ['2.5', 2.5], [' 0 ', 0], ['120', 120],
    ['Sun, 06 Nov 1994 08:49:37 GMT', 0], ['Sunday, 06-Nov-94 08:49:37 GMT', 0], ['Sun Nov  6 08:49:37 1994', 0],
    [() => new Date(Date.now() + 100_500).toUTCString(), 100], [() => asctime(new Date(Date.now() + 100_500)), 100],
    ['-1', undefined], ['nan', undefined], ['inf', undefined], ['1e3', undefined], ['.5', undefined],
    ['soon', undefined], ['2026-12-07', undefined],
  ];
  it('reads Retry-After as the Python client does', async () => {
    const sent = [];
    await withFake((req, res, n) => {
      const [value] = retryAfters[n - 1];
      sent.push(typeof value === 'function' ? value() : value);
      sendJSON(res, 429, queueFull, { 'Retry-After': sent[n - 1] });
    }, { retry: { attempts: 1 } }, async (brig) => {
      for (const [i, [, want]] of retryAfters.entries()) {
        await assert.rejects(brig.run(request), (err) => {
          assert.equal(err.status, 429);
          if (want > 0 && /^[A-Za-z]/.test(sent[i])) {
            assert.ok(Math.abs(err.retryAfter - want) <= 1, `Retry-After ${sent[i]}: ${err.retryAfter}`);
          } else {
            assert.equal(err.retryAfter, want, `Retry-After ${JSON.stringify(sent[i])}`);
          }
          return true;
        });
      }
    });
  });

  it('an abort during the wait ends the call at once', async () => {
    await withFake((req, res) => sendJSON(res, 429, queueFull, { 'Retry-After': '20' }), {}, async (brig, f) => {
      const ac = new AbortController();
      const why = new Error('the harness gave up');
      setTimeout(() => ac.abort(why), 100);
      const t0 = Date.now();
      await assert.rejects(brig.run(request, { signal: ac.signal }), (err) => err === why);
      assert.ok(Date.now() - t0 < 5_000);
      assert.equal(f.requests.length, 1);
    });
  });
});

describe('errors', () => {
  it('a 400 carries code, field and message, and no retryAfter', async () => {
    const body = { error: { code: 'invalid_request', field: 'packages[2]', message: 'pin it as requests==2.32.3' } };
    await withFake((req, res) => sendJSON(res, 400, body), {}, async (brig) => {
      await assert.rejects(brig.run(request), (err) => {
        assert.ok(err instanceof BrigError);
        assert.equal(err.name, 'BrigError');
        assert.equal(err.status, 400);
        assert.equal(err.code, 'invalid_request');
        assert.equal(err.field, 'packages[2]');
        assert.equal(err.message, 'pin it as requests==2.32.3');
        assert.equal(err.retryAfter, undefined);
        assert.match(String(err), /400 invalid_request: packages\[2\]: pin it/);
        return true;
      });
    });
  });

  it('a body that is not brig\'s gets the code http_STATUS', async () => {
    await withFake((req, res) => {
      res.writeHead(502, { 'Content-Type': 'text/plain' });
      res.end('bad gateway from a proxy');
    }, {}, async (brig) => {
      await assert.rejects(brig.health(), (err) => {
        assert.ok(err instanceof BrigError);
        assert.equal(err.status, 502);
        assert.equal(err.code, 'http_502');
        assert.equal(err.field, undefined);
        assert.match(err.message, /bad gateway from a proxy/);
        return true;
      });
    });
  });

  it('a missing socket says which, with the system error as cause', async () => {
    const dir = shortTempDir('brig-js-none-');
    try {
      const socket = path.join(dir, 'absent.sock');
      await assert.rejects(new Client({ socket }).health(), (err) => {
        assert.ok(!(err instanceof BrigError));
        assert.ok(err.message.includes(socket), err.message);
        assert.equal(err.cause?.code, 'ENOENT');
        return true;
      });
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('timeoutMs ends a call whose answer does not come', async () => {
    await withFake(() => {}, {}, async (brig) => {
      const t0 = Date.now();
      await assert.rejects(brig.run(request, { timeoutMs: 200 }), (err) => err.name === 'TimeoutError');
      assert.ok(Date.now() - t0 < 5_000);
    });
  });

  // The clients probe of 2026-12-06: a service that takes the connection and
  // never answers held every call of a client with no timeoutMs.
  it('callTimeoutMs ends a call that does not wait for a run when no answer comes', { timeout: 10_000 }, async () => {
    await withFake(() => {}, { timeoutMs: 0, callTimeoutMs: 200 }, async (brig) => {
      for (const call of [() => brig.health(), () => brig.limits(), () => brig.get('r1'), () => brig.cancel('r1')]) {
        const t0 = Date.now();
        await assert.rejects(call(), (err) => err.name === 'TimeoutError' && /callTimeoutMs/.test(err.message));
        assert.ok(Date.now() - t0 < 5_000);
      }
    });
  });

  it('callTimeoutMs ends a call whose answer stops in its body, with a TimeoutError', { timeout: 10_000 }, async () => {
    await withFake((req, res) => {
      res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': '100' });
      res.write('{"status":'); // and nothing more
    }, { timeoutMs: 0, callTimeoutMs: 200 }, async (brig) => {
      for (const call of [() => brig.health(), () => brig.get('r1')]) {
        await assert.rejects(call(), (err) => err.name === 'TimeoutError' && /callTimeoutMs/.test(err.message));
      }
    });
  });

  it('callTimeoutMs bounds a stream\'s head, not its silences after', { timeout: 10_000 }, async () => {
    await withFake(() => {}, { timeoutMs: 0, callTimeoutMs: 200 }, async (brig) => {
      await assert.rejects(collect(brig.stream(request)), (err) => err.name === 'TimeoutError');
      await assert.rejects(collect(brig.events('r1')), (err) => err.name === 'TimeoutError');
    });
    await withFake((req, res) => {
      res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
      res.write('{"event":"accepted","id":"r-quiet"}\n');
      setTimeout(() => res.end(JSON.stringify({ event: 'result', result: result({ id: 'r-quiet' }) }) + '\n'), 600);
    }, { timeoutMs: 0, callTimeoutMs: 200 }, async (brig) => {
      const events = await collect(brig.stream(request));
      assert.deepEqual(events.map((ev) => ev.event), ['accepted', 'result']);
    });
  });

  it('callTimeoutMs does not bound run, whose answer comes with its result', { timeout: 10_000 }, async () => {
    await withFake((req, res) => {
      setTimeout(() => sendJSON(res, 200, result({ id: 'r-slow' })), 600);
    }, { timeoutMs: 0, callTimeoutMs: 200 }, async (brig) => {
      assert.equal((await brig.run(request)).id, 'r-slow');
    });
  });

  it('a socket whose backlog is full is an Error that says so, with the cause', { timeout: 10_000 }, async () => {
    // A listener that never accepts, with its backlog filled (node accepts
    // whatever comes, so python3 holds it).
    const dir = shortTempDir('brig-js-full-');
    const socket = path.join(dir, 'full.sock');
    const holder = spawn('python3', ['-c', `
import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(0)
held = []
for _ in range(16):
    c = socket.socket(socket.AF_UNIX); c.setblocking(False)
    try:
        c.connect(sys.argv[1])
    except BlockingIOError:
        break
    held.append(c)
print('full', flush=True)
time.sleep(30)
`, socket], { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      await new Promise((resolve, reject) => {
        holder.stdout.once('data', resolve);
        holder.once('exit', reject);
      });
      await assert.rejects(new Client({ socket }).health(), (err) => {
        assert.match(err.message, /EAGAIN \(its listen backlog is full/);
        assert.equal(err.cause?.code, 'EAGAIN');
        return true;
      });
    } finally {
      holder.kill();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('bad arguments are a TypeError', async () => {
    assert.throws(() => new Client({ socket: '' }), TypeError);
    assert.throws(() => new Client({ timeoutMs: -1 }), TypeError);
    assert.throws(() => new Client({ callTimeoutMs: -1 }), TypeError);
    assert.throws(() => new Client({ retry: { attempts: 0 } }), TypeError);
    assert.throws(() => new Client({ retry: { maxWaitMs: 1.5 } }), TypeError);
    new Client({ retry: { attempts: undefined } }); // the default
    assert.throws(() => new Client().stream('print(1)'), TypeError);
    assert.throws(() => new Client().events(''), TypeError);
    await assert.rejects(new Client().run('print(1)'), TypeError);
    await assert.rejects(new Client().get(''), TypeError);
    // JSON would send these as null.
    await assert.rejects(new Client().run({ language: 'python', code: '1', timeout_seconds: NaN }), /timeout_seconds is NaN/);
    await assert.rejects(new Client().run({ language: 'python', code: '1', memory_mib: Infinity }), TypeError);
  });
});

describe('answers of the wrong shape', () => {
  // Every 200 answer of the API is an object: anything else rejects as any
  // other answer that can't be read, never resolving as a "Result".
  for (const body of ['[1,2]', '"r1"', 'null', '42']) {
    for (const [name, call] of [
      ['run', (brig) => brig.run(request)],
      ['get', (brig) => brig.get('r1')],
      ['cancel', (brig) => brig.cancel('r1')],
      ['health', (brig) => brig.health()],
      ['limits', (brig) => brig.limits()],
    ]) {
      it(`a 200 of ${body} from ${name} is an error`, async () => {
        await withFake((req, res) => {
          res.writeHead(200, { 'Content-Type': 'application/json' });
          res.end(body);
        }, {}, async (brig) => {
          await assert.rejects(call(brig), (err) => {
            assert.ok(!(err instanceof BrigError) && !(err instanceof NoResultError), `got ${err}`);
            assert.match(err.message, /^decoding the response of (POST|GET|DELETE) \/v1\/\S+: not a JSON object/);
            return true;
          });
        });
      });
    }
  }
});

describe('requests', () => {
  it('network domains without a mode is sent with mode domains, as the Python client does', async () => {
    await withFake((req, res) => {
      if (req.headers.accept === 'application/x-ndjson') {
        res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
        return res.end(JSON.stringify({ event: 'result', result: result() }) + '\n');
      }
      sendJSON(res, 200, result());
    }, {}, async (brig, f) => {
      const asked = { ...request, network: { domains: ['example.com'] } };
      await brig.run(asked);
      await collect(brig.stream(asked));
      // A mode given is sent as it is (the service judges it).
      await brig.run({ ...request, network: { mode: 'none', domains: ['example.com'] } });
      await brig.run({ ...request, network: { mode: 'any' } });
      await brig.run({ ...request, network: {} });
      assert.deepEqual(f.requests.map((r) => JSON.parse(r.body).network), [
        { mode: 'domains', domains: ['example.com'] },
        { mode: 'domains', domains: ['example.com'] },
        { mode: 'none', domains: ['example.com'] },
        { mode: 'any' },
        {},
      ]);
      assert.deepEqual(asked.network, { domains: ['example.com'] }, 'the caller\'s request is left as it was');
    });
  });
});

describe('event streams', () => {
  it('keeps lines and characters whole across chunks, and fills omitted values', async () => {
    const lines = [
      { event: 'accepted', id: 'r1' },
      { event: 'stdout', data: 'héllo, 世界 🌍\n' },
      { event: 'egress', host: 'example.com', port: 443 }, // allowed false is left out
      { event: 'egress', host: 'example.org', port: 443, allowed: true },
      { event: 'result', result: result({ stdout: 'héllo, 世界 🌍\n' }) },
    ].map((e) => JSON.stringify(e) + '\n').join('');
    const bytes = Buffer.from(lines, 'utf8');
    await withFake(async (req, res) => {
      res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
      // Three bytes a write cut lines and multi-byte characters apart.
      for (let i = 0; i < bytes.length; i += 3) {
        res.write(bytes.subarray(i, i + 3));
        if (i % 60 === 0) await new Promise((r) => setTimeout(r, 1));
      }
      res.end();
    }, {}, async (brig) => {
      const events = await collect(brig.stream(request));
      assert.equal(events.length, 5);
      assert.equal(events[1].data, 'héllo, 世界 🌍\n');
      assert.equal(events[2].allowed, false);
      assert.equal(events[3].allowed, true);
      assert.equal(events[4].result.stdout, 'héllo, 世界 🌍\n');
    });
  });

  it('a stream that ends before its result is a NoResultError naming the run', async () => {
    await withFake((req, res) => {
      res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
      res.end('{"event":"accepted","id":"r-dropped"}\n{"event":"started"}\n');
    }, {}, async (brig) => {
      const seen = [];
      await assert.rejects(async () => {
        for await (const ev of brig.stream(request)) seen.push(ev.event);
      }, (err) => err instanceof NoResultError && err.id === 'r-dropped');
      assert.deepEqual(seen, ['accepted', 'started']);
    });
  });

  it('a last line without its newline, at the end of the body, is an event', async () => {
    // As the Python client reads it: chunked, and framed by the connection's end.
    const body = [
      { event: 'accepted', id: 'r-last' },
      { event: 'stdout', data: 'a\n' },
      { event: 'result', result: result({ id: 'r-last' }) },
    ].map((e) => JSON.stringify(e)).join('\n'); // no newline after the result
    for (const framing of ['chunked', 'close']) {
      await withFake((req, res) => {
        // Without chunks, the body ends with the connection.
        if (framing === 'close') res.useChunkedEncodingByDefault = false;
        res.writeHead(200, {
          'Content-Type': 'application/x-ndjson',
          ...(framing === 'close' ? { Connection: 'close' } : {}),
        });
        res.write(body.slice(0, 20));
        res.end(body.slice(20));
      }, {}, async (brig) => {
        const events = await collect(brig.events('r-last'));
        assert.deepEqual(events.map((e) => e.event), ['accepted', 'stdout', 'result'], framing);
        assert.equal(events[2].result.id, 'r-last');
      });
    }
  });

  it('a last line that is not whole JSON is a cut one: a NoResultError', async () => {
    await withFake((req, res) => {
      res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
      res.end('{"event":"accepted","id":"r-half"}\n{"event":"result","res');
    }, {}, async (brig) => {
      const seen = [];
      await assert.rejects(async () => {
        for await (const ev of brig.events('r-half')) seen.push(ev.event);
      }, (err) => err instanceof NoResultError && err.id === 'r-half');
      assert.deepEqual(seen, ['accepted']);
    });
  });

  it('bytes that are not UTF-8 become U+FFFD and the stream goes on', async () => {
    await withFake((req, res) => {
      res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
      res.write('{"event":"stdout","data":"ab"}\n');
      res.write(Buffer.concat([Buffer.from('{"event":"stdout","data":"c'), Buffer.from([0xff]), Buffer.from('d"}\n')]));
      res.end(JSON.stringify({ event: 'result', result: result() }) + '\n');
    }, {}, async (brig) => {
      const events = await collect(brig.events('r1'));
      assert.deepEqual(events.map((e) => e.data ?? e.event), ['ab', 'c\ufffdd', 'result']);
    });
  });

  it('a connection cut mid-stream is a NoResultError with the cause', async () => {
    await withFake((req, res) => {
      res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
      res.write('{"event":"accepted","id":"r-cut"}\n{"event":"stdout","da');
      setTimeout(() => res.destroy(), 50);
    }, {}, async (brig) => {
      await assert.rejects(collect(brig.events('r-cut')), (err) => {
        assert.ok(err instanceof NoResultError, `got ${err}`);
        assert.equal(err.id, 'r-cut');
        return true;
      });
    });
  });

  // A service that dies during a run drops the connection before any head (a
  // run's head comes with its result): a NoResultError with the run's id, in
  // the Python client's words, not node's bare "socket hang up".
  const beforeHead = (req, res) => { req.socket.destroy(); };
  for (const tc of [
    { name: 'run with an id', call: (brig) => brig.run({ ...request, id: 'r1' }), id: 'r1' },
    { name: 'get', call: (brig) => brig.get('r1'), id: 'r1' },
    { name: 'cancel', call: (brig) => brig.cancel('r1'), id: 'r1' },
    { name: 'stream with an id', call: (brig) => collect(brig.stream({ ...request, id: 'r1' })), id: 'r1' },
    { name: 'events', call: (brig) => collect(brig.events('r1')), id: 'r1' },
    { name: 'run without an id', call: (brig) => brig.run(request), id: undefined },
  ]) {
    it(`a connection dropped before the head of ${tc.name} is a NoResultError`, async () => {
      await withFake(beforeHead, {}, async (brig) => {
        await assert.rejects(tc.call(brig), (err) => {
          assert.ok(err instanceof NoResultError, `got ${err}`);
          assert.equal(err.id, tc.id);
          assert.equal(err.cause?.code, 'ECONNRESET');
          assert.equal(err.message, tc.id
            ? 'the connection dropped before the run\'s result; the run r1 may still be going: follow it with events(id) or read it with get(id)'
            : 'the connection dropped before the run\'s result, and before its id was known: give requests an id to follow them after a dropped connection');
          return true;
        });
      });
    });
  }

  // A body cut halfway, by Content-Length or chunked framing: the error of a
  // dropped stream (NoResultError, with the run's id when known and the socket's
  // error as cause), never a bare "aborted".
  const cutBody = (framing) => (req, res) => {
    const body = JSON.stringify(result());
    res.writeHead(200, {
      'Content-Type': 'application/json',
      ...(framing === 'content-length' ? { 'Content-Length': Buffer.byteLength(body) } : {}),
    });
    res.write(body.slice(0, 40));
    setTimeout(() => res.destroy(), 50);
  };
  const cutCalls = [
    { name: 'run with an id', call: (brig) => brig.run({ ...request, id: 'r-cut' }), id: 'r-cut' },
    { name: 'run without an id', call: (brig) => brig.run(request), id: undefined },
    { name: 'get', call: (brig) => brig.get('r-cut'), id: 'r-cut' },
    { name: 'cancel', call: (brig) => brig.cancel('r-cut'), id: 'r-cut' },
  ];
  for (const framing of ['content-length', 'chunked']) {
    for (const tc of cutCalls) {
      it(`a connection cut in the result of ${tc.name} (${framing}) is a NoResultError`, async () => {
        await withFake(cutBody(framing), {}, async (brig) => {
          await assert.rejects(tc.call(brig), (err) => {
            assert.ok(err instanceof NoResultError, `got ${err}`);
            assert.equal(err.name, 'NoResultError');
            assert.equal(err.id, tc.id);
            assert.ok(err.cause instanceof Error, 'the socket\'s error is the cause');
            if (tc.id) assert.match(err.message, new RegExp(`the run ${tc.id} may still be going`));
            return true;
          });
        });
      });
    }
    it(`a connection cut in the answer of health (${framing}) says so, with the cause`, async () => {
      await withFake(cutBody(framing), {}, async (brig) => {
        await assert.rejects(brig.health(), (err) => {
          assert.ok(!(err instanceof NoResultError), `got ${err}`);
          assert.match(err.message, /connection dropped while reading the response of GET \/v1\/health/);
          assert.ok(err.cause instanceof Error, 'the socket\'s error is the cause');
          return true;
        });
      });
    });
  }

  it('timeoutMs ends a stream that has started, with a TimeoutError', async () => {
    await withFake((req, res) => {
      res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
      res.write('{"event":"accepted","id":"r-slow"}\n'); // and nothing more
    }, {}, async (brig) => {
      const seen = [];
      const t0 = Date.now();
      await assert.rejects(async () => {
        for await (const ev of brig.stream(request, { timeoutMs: 300 })) seen.push(ev.event);
      }, (err) => err.name === 'TimeoutError');
      assert.deepEqual(seen, ['accepted']);
      assert.ok(Date.now() - t0 < 5_000);
    });
  });

  // The fixcli probe: a timeout or an abort of a run with an id was a bare
  // TimeoutError or AbortError, which said nothing of the run.
  it('a timeout or an abort of a run names the run, which goes on, and keeps its name', { timeout: 20_000 }, async () => {
    const silent = () => {};
    const accepted = (req, res) => {
      res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
      res.write('{"event":"accepted","id":"r-acc"}\n'); // and nothing more
    };
    const abortSoon = () => AbortSignal.timeout(200); // a caller's own signal, timing out
    const aborter = () => { const ac = new AbortController(); setTimeout(() => ac.abort(), 200); return ac.signal; };
    for (const [name, handle, call, name2, want] of [
      ['run, timeoutMs', silent, (b) => b.run({ ...request, id: 't1' }, { timeoutMs: 200 }), 'TimeoutError', 't1'],
      ['run, abort', silent, (b) => b.run({ ...request, id: 't1' }, { signal: aborter() }), 'AbortError', 't1'],
      ['run, the caller\'s timeout signal', silent, (b) => b.run({ ...request, id: 't1' }, { signal: abortSoon() }), 'TimeoutError', 't1'],
      ['stream\'s head, callTimeoutMs', silent, (b) => collect(b.stream({ ...request, id: 't1' })), 'TimeoutError', 't1'],
      ['stream after accepted, timeoutMs', accepted, (b) => collect(b.stream(request, { timeoutMs: 200 })), 'TimeoutError', 'r-acc'],
      ['stream after accepted, abort', accepted, (b) => collect(b.stream(request, { signal: aborter() })), 'AbortError', 'r-acc'],
      ['events, timeoutMs', accepted, (b) => collect(b.events('r-acc', { timeoutMs: 200 })), 'TimeoutError', 'r-acc'],
    ]) {
      await withFake(handle, { timeoutMs: 0, callTimeoutMs: 200 }, async (brig) => {
        await assert.rejects(call(brig), (err) => {
          assert.equal(err.name, name2, name);
          assert.ok(err instanceof DOMException, name);
          assert.equal(err.id, want, name);
          assert.match(err.message, new RegExp(`brig at ${brig.socket}`), name);
          assert.match(err.message, new RegExp(`the run ${want} goes on in the service: .*cancel\\(id\\)`), name);
          assert.equal(err.cause?.name, name2, name);
          return true;
        });
      });
    }
  });

  it('a timeout of run without an id says the service stops it', async () => {
    await withFake(() => {}, {}, async (brig) => {
      await assert.rejects(brig.run(request, { timeoutMs: 200 }), (err) => {
        assert.equal(err.name, 'TimeoutError');
        assert.equal(err.id, undefined);
        assert.match(err.message, /within its timeoutMs \(200 ms\); the run had no id, so the service stops it/);
        return true;
      });
    });
  });

  it('leaving the loop early closes the connection', async () => {
    let closed;
    const gone = new Promise((r) => { closed = r; });
    await withFake((req, res) => {
      res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
      res.write('{"event":"accepted","id":"r1"}\n');
      res.on('close', closed); // never ends on its own
    }, {}, async (brig) => {
      for await (const ev of brig.stream(request)) {
        assert.equal(ev.event, 'accepted');
        break;
      }
      await gone;
    });
  });

  it('get, events and cancel escape the id and pass uid', async () => {
    await withFake((req, res) => {
      if (req.url.includes('/events')) {
        res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
        return res.end(JSON.stringify({ event: 'result', result: result() }) + '\n');
      }
      sendJSON(res, 200, result());
    }, {}, async (brig, f) => {
      await brig.get('a:b.c', { uid: 1000 });
      await collect(brig.events('a:b.c'));
      await brig.cancel('a/b');
      assert.deepEqual(f.requests.map((r) => `${r.method} ${r.url}`), [
        'GET /v1/runs/a%3Ab.c?uid=1000',
        'GET /v1/runs/a%3Ab.c/events',
        'DELETE /v1/runs/a%2Fb',
      ]);
    });
  });
});
