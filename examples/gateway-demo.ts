// `npm start`: the demo upstream on :3000 and the tollgate gateway on :8080 in front of it, 2 permits,
// in-memory. Extra flags go to the gateway: `npm start -- --redis redis://127.0.0.1:6379`.
// Then: for i in $(seq 5); do curl -s localhost:8080/slow?ms=1000 & done; wait
import { runCli } from '../src/gateway/cli.js'
import { startDemoUpstream } from './demo-upstream.js'

const upstream = await startDemoUpstream(3000)
console.error('demo upstream on http://127.0.0.1:3000 (GET /slow?ms=500)')
await runCli([
  '--upstream',
  'http://127.0.0.1:3000',
  '--permits',
  '2',
  '--max-wait-ms',
  '5000',
  ...process.argv.slice(2),
])
if (process.exitCode !== undefined) upstream.close() // bad flags, --help: nothing to serve
