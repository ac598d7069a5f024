// Starts a real `brig serve` for the tests, on a socket in a temp dir. It lives
// outside test/ because `node --test test/` runs every file there as a test.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));

/** The brig binary: $BRIG_BIN, or the repository's bin/brig. */
export const brigBin = process.env.BRIG_BIN
  ? path.resolve(process.env.BRIG_BIN)
  : path.resolve(here, '../../../bin/brig');

// Bounds of the service's start and stop, generous for a slow machine.
const startTimeoutMs = 60_000;
const stopTimeoutMs = 60_000;

/**
 * Why the service tests cannot run here, or undefined when they can: they need
 * root (the sandboxes do) and a built brig.
 */
export function serviceSkipReason() {
  if (process.getuid?.() !== 0) {
    return 'needs root: brig serve makes namespaces and cgroups (run the tests as root)';
  }
  if (!fs.existsSync(brigBin)) {
    return `no brig binary at ${brigBin}: build it with ` +
      '`go build -tags urfave_cli_no_docs -o bin/brig ./cmd/brig`, or set BRIG_BIN';
  }
  return undefined;
}

/** A temp dir with a short path: a socket's path must fit in 108 bytes. */
export function shortTempDir(prefix) {
  const base = os.tmpdir().length <= 40 ? os.tmpdir() : '/tmp';
  return fs.mkdtempSync(path.join(base, prefix));
}

/**
 * Starts brig serve with its own socket, state and cgroup parent, and resolves
 * once the socket is there. stop() sends SIGTERM and resolves with how it exited.
 */
export async function startService({ cgroupParent, extraArgs = [] }) {
  const dir = shortTempDir('brig-js-');
  const socket = path.join(dir, 'brig.sock');
  const logPath = path.join(dir, 'serve.log');
  const log = fs.openSync(logPath, 'w');
  const args = [
    'serve',
    '--socket', socket,
    '--state-dir', path.join(dir, 'state'),
    '--cgroup-parent', cgroupParent,
    '--pool', '1',
    '--log-level', 'warn',
    ...extraArgs,
  ];
  const child = spawn(brigBin, args, { stdio: ['ignore', log, log] });
  fs.closeSync(log);
  const exited = new Promise((resolve) => {
    child.once('exit', (code, signal) => resolve({ code, signal }));
    child.once('error', (err) => resolve({ code: null, signal: null, err }));
  });
  let done = false;
  exited.then(() => { done = true; });

  // The service leaves its cgroup parent's lock file (cgroup.ParentLockPath)
  // for the next service on that parent; the tests remove it once it exited.
  const removeLock = () => {
    const lockDir = '/run/brig/locks';
    fs.rmSync(path.join(lockDir, `brig-cgroup-${cgroupParent.replaceAll('/', '%2F')}.lock`), { force: true });
  };

  const logText = () => {
    try {
      return fs.readFileSync(logPath, 'utf8');
    } catch {
      return '';
    }
  };

  const deadline = Date.now() + startTimeoutMs;
  while (!fs.existsSync(socket)) {
    if (done) {
      const how = await exited;
      fs.rmSync(dir, { recursive: true, force: true });
      removeLock();
      throw new Error(`brig serve exited before its socket appeared (${JSON.stringify(how)}):\n${logText()}`);
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      await exited;
      fs.rmSync(dir, { recursive: true, force: true });
      removeLock();
      throw new Error(`brig serve made no socket in ${startTimeoutMs} ms:\n${logText()}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }

  return {
    socket,
    dir,
    logText,
    /** Stops the service with SIGTERM; resolves with its exit code, signal and log. */
    async stop() {
      if (!done) child.kill('SIGTERM');
      let timer;
      const how = await Promise.race([
        exited,
        new Promise((r) => { timer = setTimeout(() => r(undefined), stopTimeoutMs); }),
      ]);
      clearTimeout(timer);
      if (how === undefined) {
        child.kill('SIGKILL');
        await exited;
        removeLock();
        throw new Error(`brig serve did not stop within ${stopTimeoutMs} ms of SIGTERM:\n${logText()}`);
      }
      const text = logText();
      fs.rmSync(dir, { recursive: true, force: true });
      removeLock();
      return { ...how, log: text };
    },
  };
}
