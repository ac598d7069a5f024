// Run by TestInterpretersUnderFilter under the default seccomp policy. Each line
// it prints is checked; any error exits non-zero.
'use strict';
const { Worker, isMainThread, parentPort, workerData } = require('node:worker_threads');
const childProcess = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

if (!isMainThread) {
  parentPort.postMessage(workerData * 2);
  return;
}

function worker() {
  return new Promise((resolve, reject) => {
    const w = new Worker(__filename, { workerData: 21 });
    w.on('message', resolve);
    w.on('error', reject);
  });
}

function roundTrip() {
  return new Promise((resolve, reject) => {
    const server = net.createServer((sock) => {
      sock.on('data', (d) => sock.end(d.toString().toUpperCase()));
    });
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const client = net.connect(server.address().port, '127.0.0.1', () => client.write('ping'));
      let reply = '';
      client.on('data', (d) => { reply += d; });
      client.on('end', () => server.close(() => resolve(reply)));
      client.on('error', reject);
    });
  });
}

async function main() {
  console.log('worker', await worker());
  console.log('exec', childProcess.execSync('echo hi').toString().trim());

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'brig-seccomp-'));
  fs.writeFileSync(path.join(dir, 'f'), 'scratch');
  console.log('fs', await fs.promises.readFile(path.join(dir, 'f'), 'utf8'));
  fs.rmSync(dir, { recursive: true });

  console.log('sha256', crypto.createHash('sha256').update('brig').digest('hex'));
  console.log('randomBytes', crypto.randomBytes(16).length);
  console.log('net', await roundTrip());
  await new Promise((resolve) => setTimeout(resolve, 20));
  console.log('timeout', 'fired');
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
