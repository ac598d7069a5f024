// The client against a real brig serve that this file starts (root only), and
// the README's quickstart run against it.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { BrigError, Client } from '../index.js';
import { serviceSkipReason, shortTempDir, startService } from '../testsupport/service.js';

const pkgDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

// Every call of these tests ends well within this; a stuck one fails instead of
// hanging the suite.
const callTimeoutMs = 120_000;

// Ids hold the punctuation API.md allows, which the client escapes in paths.
const uniqueId = (what) => `js:${what}.${randomUUID()}`;

// collect gathers an event iterator's events.
async function collect(iterable) {
  const events = [];
  for await (const ev of iterable) events.push(ev);
  return events;
}

// kinds is the sequence of event kinds with repeats collapsed: output may come
// in several events.
const kinds = (events) => events.map((e) => e.event).filter((k, i, a) => i === 0 || a[i - 1] !== k);

async function rejectsWith(promise, want) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof BrigError, `got ${err}, want a BrigError`);
    assert.ok(err instanceof Error);
    for (const [k, v] of Object.entries(want)) assert.equal(err[k], v, `${k} of ${err}`);
    assert.ok(err.message.length > 0, 'an empty message');
    return true;
  });
}

describe('Client against brig serve', { skip: serviceSkipReason(), timeout: 600_000 }, () => {
  let service;
  let brig;

  before(async () => {
    service = await startService({ cgroupParent: 'brig-test-jsclient' });
    brig = new Client({ socket: service.socket, timeoutMs: callTimeoutMs });
  });

  after(async () => {
    if (!service) return;
    const how = await service.stop();
    assert.equal(how.code, 0, `brig serve exited ${JSON.stringify({ code: how.code, signal: how.signal })}:\n${how.log}`);
  });

  describe('run', () => {
    const cases = [
      {
        name: 'python that succeeds',
        request: { language: 'python', code: 'print("hello from python")' },
        want: { status: 'completed', outcome: 'succeeded', exit_code: 0, stdout: 'hello from python\n', stderr: '' },
      },
      {
        name: 'python that exits 3',
        request: { language: 'python', code: 'import sys\nprint("out")\nprint("err", file=sys.stderr)\nsys.exit(3)' },
        want: { status: 'failed', reason: 'error', outcome: 'failed', exit_code: 3, stdout: 'out\n', stderr: 'err\n' },
      },
      {
        name: 'javascript that succeeds',
        request: { language: 'javascript', code: 'console.log([1, 2, 3].map((x) => x * 2).join(","))' },
        want: { status: 'completed', outcome: 'succeeded', exit_code: 0, stdout: '2,4,6\n' },
      },
      {
        name: 'javascript that throws',
        request: { language: 'javascript', code: 'throw new Error("boom")' },
        want: { status: 'failed', reason: 'error', outcome: 'failed', exit_code: 1 },
        stderrHas: 'boom',
      },
      {
        name: 'python past its timeout',
        request: { language: 'python', code: 'while True: pass', timeout_seconds: 1 },
        want: { status: 'failed', reason: 'timeout', outcome: 'failed' },
      },
    ];
    for (const tc of cases) {
      it(tc.name, async () => {
        const res = await brig.run(tc.request);
        assert.equal(res.state, 'finished');
        assert.equal(res.language, tc.request.language);
        assert.match(res.id, /^[A-Za-z0-9._:-]{1,128}$/);
        for (const [k, v] of Object.entries(tc.want)) assert.equal(res[k], v, `${k} of ${JSON.stringify(res)}`);
        if (tc.stderrHas) assert.ok(res.stderr.includes(tc.stderrHas), `stderr ${JSON.stringify(res.stderr)}`);
        if (res.status === 'failed') assert.ok(res.message, 'a failed run without a message');
        assert.deepEqual(res.packages, []);
        assert.equal(res.network.mode, 'none');
        assert.equal(typeof res.usage.wall_ms, 'number');
        assert.equal(typeof res.timing.total_ms, 'number');
      });
    }

    it('passes env and memory_mib through with the API\'s names', async () => {
      const res = await brig.run({
        language: 'python',
        code: 'import os\nprint(os.environ["GREETING"])',
        env: { GREETING: 'hi there' },
        memory_mib: 256,
        network: { mode: 'none' },
      });
      assert.equal(res.outcome, 'succeeded', JSON.stringify(res));
      assert.equal(res.stdout, 'hi there\n');
    });
  });

  it('stream yields the events in order, as they happen', async () => {
    const id = uniqueId('stream');
    const code = [
      'import sys, time',
      'print("one", flush=True)',
      'time.sleep(0.3)',
      'print("two", file=sys.stderr, flush=True)',
      'time.sleep(0.3)',
      'print("three", flush=True)',
    ].join('\n');
    const events = [];
    const at = [];
    for await (const ev of brig.stream({ id, language: 'python', code })) {
      events.push(ev);
      at.push(Date.now());
    }
    assert.deepEqual(kinds(events), ['accepted', 'started', 'stdout', 'stderr', 'stdout', 'result'],
      JSON.stringify(events));
    assert.equal(events[0].id, id);
    const res = events.at(-1).result;
    const printed = (k) => events.filter((e) => e.event === k).map((e) => e.data).join('');
    assert.equal(printed('stdout'), 'one\nthree\n');
    assert.equal(printed('stderr'), 'two\n');
    assert.equal(printed('stdout'), res.stdout);
    assert.equal(printed('stderr'), res.stderr);
    assert.equal(res.outcome, 'succeeded');
    // "one" came while the program was still sleeping, not with the result.
    const firstOut = events.findIndex((e) => e.event === 'stdout');
    assert.ok(at.at(-1) - at[firstOut] >= 300, `"one" came ${at.at(-1) - at[firstOut]} ms before the result`);
  });

  it('a stream left early reattaches with events(id), and get(id) reads the run', async () => {
    const id = uniqueId('reattach');
    const code = 'import time\nprint("one", flush=True)\ntime.sleep(1)\nprint("two", flush=True)';
    for await (const ev of brig.stream({ id, language: 'python', code })) {
      if (ev.event === 'stdout') break; // the connection drops; the run goes on
    }
    const during = await brig.get(id);
    assert.equal(during.id, id);
    assert.ok(['running', 'finished'].includes(during.state), `state ${during.state}`);

    const events = await collect(brig.events(id));
    assert.equal(events[0].event, 'accepted');
    assert.equal(events[0].id, id);
    assert.equal(events.at(-1).event, 'result');
    const res = events.at(-1).result;
    assert.equal(res.stdout, 'one\ntwo\n');
    assert.equal(events.filter((e) => e.event === 'stdout').map((e) => e.data).join(''), 'one\ntwo\n');

    const after = await brig.get(id);
    assert.equal(after.state, 'finished');
    assert.equal(after.outcome, 'succeeded');
    assert.equal(after.stdout, 'one\ntwo\n');
  });

  it('cancel stops a long run, which ends stopped', async () => {
    const id = uniqueId('cancel');
    const code = 'import time\nprint("sleeping", flush=True)\ntime.sleep(120)';
    const t0 = Date.now();
    let cancelled;
    const events = [];
    let printed = '';
    for await (const ev of brig.stream({ id, language: 'python', code, timeout_seconds: 300 })) {
      events.push(ev);
      if (ev.event === 'stdout') printed += ev.data;
      // print() may write the line and its newline apart: wait for both, so
      // that the whole line is there to compare.
      if (printed === 'sleeping\n' && !cancelled) cancelled = brig.cancel(id);
    }
    assert.ok(cancelled, 'the run printed nothing');
    const stopped = await cancelled;
    for (const res of [stopped, events.at(-1).result]) {
      assert.equal(res.id, id);
      assert.equal(res.state, 'finished');
      assert.equal(res.status, 'failed');
      assert.equal(res.reason, 'stopped');
      assert.equal(res.outcome, 'failed'); // no network: nothing outside can have changed
      assert.equal(res.stdout, 'sleeping\n');
    }
    assert.ok(Date.now() - t0 < 60_000, 'the run was not stopped early');
    assert.equal((await brig.get(id)).reason, 'stopped');
  });

  it('the same id runs the code once', async () => {
    const id = uniqueId('idempotent');
    const request = { id, language: 'python', code: 'import secrets\nprint(secrets.token_hex(16))' };
    const first = await brig.run(request);
    assert.equal(first.outcome, 'succeeded');
    assert.match(first.stdout, /^[0-9a-f]{32}\n$/);
    const again = await brig.run({ ...request });
    assert.equal(again.id, id);
    assert.equal(again.stdout, first.stdout, 'the code ran a second time');
    const streamed = await collect(brig.stream({ ...request }));
    assert.equal(streamed.at(-1).result.stdout, first.stdout);

    // Another request under the same id is refused, not run.
    await rejectsWith(brig.run({ ...request, code: 'print(2)' }), { status: 409, code: 'conflict' });
    // A fresh id runs the code again.
    const other = await brig.run({ ...request, id: uniqueId('idempotent') });
    assert.notEqual(other.stdout, first.stdout);
  });

  describe('errors', () => {
    const invalid = [
      { name: 'timeout_seconds out of range', change: { timeout_seconds: 0 }, field: 'timeout_seconds' },
      { name: 'an unknown language', change: { language: 'ruby' }, field: 'language' },
      { name: 'memory_mib too large', change: { memory_mib: 4096 }, field: 'memory_mib' },
      { name: 'a package without a version', change: { packages: ['requests'] }, field: 'packages[0]' },
      { name: 'a reserved env name', change: { env: { PATH: '/x' } }, field: 'env.PATH' },
      { name: 'an empty program', change: { code: '' }, field: 'code' },
    ];
    for (const tc of invalid) {
      it(`400 for ${tc.name}, naming the field`, async () => {
        const request = { language: 'python', code: 'print(1)', ...tc.change };
        await rejectsWith(brig.run(request), { status: 400, code: 'invalid_request', field: tc.field });
      });
    }

    it('400 from stream, thrown by the iteration', async () => {
      await rejectsWith(collect(brig.stream({ language: 'python', code: 'print(1)', timeout_seconds: 301 })),
        { status: 400, code: 'invalid_request', field: 'timeout_seconds' });
    });

    it('404 for an unknown id, from get, events and cancel', async () => {
      const id = uniqueId('unknown');
      const want = { status: 404, code: 'not_found' };
      await rejectsWith(brig.get(id), want);
      await rejectsWith(collect(brig.events(id)), want);
      await rejectsWith(brig.cancel(id), want);
    });
  });

  it('health says what the host runs', async () => {
    const h = await brig.health();
    assert.equal(h.status, 'ok');
    assert.match(h.languages.python, /^3\./);
    assert.match(h.languages.javascript, /^\d+\./);
    assert.ok(h.network_modes.includes('none'));
    assert.equal(typeof h.cgroup_mode, 'string');
  });

  it('limits gives API.md\'s bounds and defaults', async () => {
    const l = await brig.limits();
    assert.deepEqual(l.timeout_seconds, { min: 1, max: 300, default: 30 });
    assert.deepEqual(l.memory_mib, { min: 128, max: 2048, default: 512 });
    assert.equal(l.code_chars.max, 100_000);
    assert.equal(l.stdout_chars, 1_000_000);
    assert.equal(l.writable_files_share, 0.5);
    // brig serve's defaults: --pids 512, --cpus 1.
    assert.deepEqual([l.processes, l.cpus], [512, 1]);
    // The install's bounds, when the host installs packages: brig serve's defaults.
    if ((await brig.health()).package_languages.length > 0) {
      assert.deepEqual(l.install, { timeout_seconds: 300, memory_mib: 1024 });
    } else {
      assert.equal(l.install, undefined);
    }
    assert.deepEqual([...l.languages].sort(), ['javascript', 'python']);
    assert.ok(l.reserved_env.includes('PATH'));
    assert.equal(l.default_network_mode, 'none');
    assert.match('run-1', new RegExp(l.id_pattern));
    assert.doesNotMatch('run 1', new RegExp(l.id_pattern));
    assert.match('DEBUG', new RegExp(l.env_name_pattern));
    // The test service offers networked modes: index.d.ts's EgressLimits.
    assert.deepEqual(Object.keys(l.egress).sort(), ['conns_per_second', 'handshake_timeout_seconds', 'max_bytes', 'max_conns']);
    assert.ok(l.egress.max_conns > 0);
  });

  it('the README\'s quickstart runs as written', async () => {
    const readme = fs.readFileSync(path.join(pkgDir, 'README.md'), 'utf8');
    const section = readme.split(/^## /m).find((s) => s.startsWith('Quickstart'));
    assert.ok(section, 'the README has no Quickstart section');
    const block = /```js\n([\s\S]*?)```/.exec(section);
    assert.ok(block, 'the Quickstart has no ```js block');
    const defaultSocket = '/run/brig/brig.sock';
    assert.ok(block[1].includes(defaultSocket), 'the quickstart does not name the default socket');
    const code = block[1].replaceAll(defaultSocket, service.socket);

    // The quickstart imports the package by its name, as an installed copy would.
    const dir = shortTempDir('brig-js-qs-');
    try {
      fs.mkdirSync(path.join(dir, 'node_modules', '@brig-sandbox'), { recursive: true });
      fs.symlinkSync(pkgDir, path.join(dir, 'node_modules', '@brig-sandbox', 'client'), 'dir');
      fs.writeFileSync(path.join(dir, 'quickstart.mjs'), code);
      const { stdout } = await new Promise((resolve, reject) => {
        execFile(process.execPath, ['quickstart.mjs'], { cwd: dir, timeout: callTimeoutMs }, (err, stdout, stderr) => {
          if (err) reject(new Error(`the quickstart failed: ${err.message}\nstdout:\n${stdout}\nstderr:\n${stderr}`));
          else resolve({ stdout, stderr });
        });
      });
      const lines = stdout.split('\n');
      assert.ok(lines.includes('succeeded 0 45'), stdout);
      assert.ok(lines.includes('42'), stdout);
      assert.ok(lines.includes('failed error 3'), stdout);
      assert.ok(lines.includes('400 invalid_request timeout_seconds'), stdout);
      assert.ok(lines.includes('timeout_seconds: 1 to 300'), stdout);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
