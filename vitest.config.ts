import { existsSync } from 'node:fs'
import { configDefaults, defineConfig } from 'vitest/config'

// TOLLGATE_TEST_IOREDIS=6 runs the suites against ioredis 6 (installed as `ioredis6`): every import of
// 'ioredis', in src/ and in the tests, resolves to it (`npm run test:ioredis6`, which CI runs too).
// Child processes of the tests load ioredis 5 either way.
const ioredis6 = process.env.TOLLGATE_TEST_IOREDIS === '6'

/** The soak and edge suites: seeded random sequences, adaptive windows of a second, a browser, RSS
 * and flood bounds, Sentinel failover under load; about 45 % of the suite's time. `npm test` leaves them out (under 5 minutes on
 * 2 cores); `npm run test:long` (TOLLGATE_TEST_SUITE=long) runs them alone, TOLLGATE_TEST_SUITE=all
 * runs everything. CI (.ci/run) runs both. */
const LONG = [
  'test/integration/differential.test.ts',
  'test/integration/adaptive.test.ts',
  'test/middleware/adaptive.test.ts',
  'test/gateway/adaptive.test.ts',
  'test/gateway/dashboard.test.ts',
  'test/gateway/read-ahead-memory.test.ts',
  'test/gateway/edge.test.ts',
  'test/gateway/edge-bounds.test.ts',
  'test/gateway/adaptive-hostile-clients.test.ts',
  'test/gateway/admin-listener.test.ts',
  'test/gateway/redis-topologies.test.ts',
]
for (const file of LONG)
  if (!existsSync(new URL(file, import.meta.url)))
    throw new Error(`vitest.config.ts: LONG names ${file}, which does not exist`)
const suite = process.env.TOLLGATE_TEST_SUITE ?? 'default'
if (!['default', 'long', 'all'].includes(suite))
  throw new Error(`TOLLGATE_TEST_SUITE: expected long or all (or unset), got ${JSON.stringify(suite)}`)

export default defineConfig({
  resolve: { alias: ioredis6 ? [{ find: /^ioredis$/, replacement: 'ioredis6' }] : [] },
  test: {
    include: suite === 'long' ? LONG : ['test/**/*.test.ts'],
    exclude: suite === 'default' ? [...configDefaults.exclude, ...LONG] : configDefaults.exclude,
    globalSetup: ['test/setup/global-setup.ts'],
    // A breach of the gateway's close contract fails the run (http/close-contract.ts), also in the
    // gateways the tests spawn (they inherit it).
    env: { TOLLGATE_CLOSE_CONTRACT: 'throw' },
    pool: 'forks',
    // Two files at a time: most of a file's time is spent waiting (timers, sockets, child processes),
    // and vitest's default on 2 cores is one. The full suite: 768 s with one, 394 s with two.
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
})
