// index.d.ts type-checks what a harness writes (typecheck/usage.ts), with
// TypeScript fetched by npx: the package itself depends on nothing. Skipped when
// npm cannot fetch TypeScript, or with BRIG_JS_TYPECHECK=0.

import { it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const pkgDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

// TypeScript 5, through npx (-p: the package has two executables).
const npxTypeScript = ['--yes', '-p', 'typescript@5', 'tsc'];

// Fetching TypeScript the first time, and compiling, end well within this.
const timeoutMs = 120_000;

// npm's retries of a failed fetch, shortened so that a host without the
// registry skips in seconds rather than minutes (unless the caller set them).
const env = {
  npm_config_fetch_retries: '1',
  npm_config_fetch_retry_mintimeout: '1000',
  npm_config_fetch_retry_maxtimeout: '5000',
  ...process.env,
};

function npx(args) {
  return new Promise((resolve) => {
    execFile('npx', [...npxTypeScript, ...args], { cwd: pkgDir, env, timeout: timeoutMs }, (err, stdout, stderr) => {
      resolve({ err, out: `${stdout}${stderr}`.trim() });
    });
  });
}

it('index.d.ts types a harness\'s use of the client (tsc --strict)', { timeout: 2 * timeoutMs + 10_000 }, async (t) => {
  if (process.env.BRIG_JS_TYPECHECK === '0') {
    t.skip('BRIG_JS_TYPECHECK=0');
    return;
  }
  const version = await npx(['--version']);
  if (version.err) {
    t.skip(`npx cannot fetch TypeScript 5 here: ${version.out.split('\n')[0] || version.err.message}`);
    return;
  }
  const check = await npx([
    '--noEmit',
    '--strict',
    '--target', 'es2022',
    '--module', 'nodenext',
    '--moduleResolution', 'nodenext',
    // AbortSignal and async iterables, without @types/node.
    '--lib', 'es2022,dom,dom.asynciterable',
    'typecheck/usage.ts',
  ]);
  assert.equal(check.err, null, `tsc (${version.out}) found errors:\n${check.out}`);
});
