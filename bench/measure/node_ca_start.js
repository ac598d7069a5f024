// Times `node -e 0` started from a sandboxed run, without and with
// NODE_EXTRA_CA_CERTS (what a networked Node run's environment sets: README,
// Network), the two in turn, 10 each; prints each's times and median in ms.
//   brig run --local -l javascript bench/measure/node_ca_start.js
'use strict'
const { spawnSync } = require('node:child_process')
const env = { PATH: process.env.PATH }
const withCA = { ...env, NODE_EXTRA_CA_CERTS: '/etc/ssl/certs/ca-certificates.crt' }
const times = { without: [], with: [] }
for (let i = 0; i < 10; i++) {
  for (const [name, e] of [['without', env], ['with', withCA]]) {
    const t0 = process.hrtime.bigint()
    spawnSync('node', ['-e', '0'], { env: e })
    times[name].push(Number(process.hrtime.bigint() - t0) / 1e6)
  }
}
for (const [name, ts] of Object.entries(times)) {
  const sorted = [...ts].sort((a, b) => a - b)
  console.log(`${name}: median ${((sorted[4] + sorted[5]) / 2).toFixed(1)} ms (${ts.map((t) => t.toFixed(0)).join(' ')})`)
}
