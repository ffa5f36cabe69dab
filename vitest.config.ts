import { defineConfig } from 'vitest/config'

// TOLLGATE_TEST_IOREDIS=6 runs the suites against ioredis 6 (installed as `ioredis6`): every import of
// 'ioredis', in src/ and in the tests, resolves to it (`npm run test:ioredis6`, which CI runs too).
// Child processes of the tests load ioredis 5 either way.
const ioredis6 = process.env.TOLLGATE_TEST_IOREDIS === '6'

export default defineConfig({
  resolve: { alias: ioredis6 ? [{ find: /^ioredis$/, replacement: 'ioredis6' }] : [] },
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/setup/global-setup.ts'],
    pool: 'forks',
    // Two files at a time: most of a file's time is spent waiting (timers, sockets, child processes),
    // and vitest's default on 2 cores is one. The full suite: 768 s with one, 394 s with two.
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
})
