// Which ioredis major the suites run against: 5 by default, 6 under TOLLGATE_TEST_IOREDIS=6
// (`npm run test:ioredis6`). Both are supported (peer range ^5.11.1 || ^6.0.0); this pins that the
// switch really swaps the client the store and the helpers use.
import { createRequire } from 'node:module'
import { describe, expect, it } from 'vitest'
import * as ioredis from 'ioredis'
import { createRedisStore, createSemaphore } from '../../src/index.js'
import { connectCluster, connectStandalone, uniquePrefix } from '../helpers/redis.js'

const require = createRequire(import.meta.url)
const major = process.env.TOLLGATE_TEST_IOREDIS === '6' ? 6 : 5
const expected = require(major === 6 ? 'ioredis6' : 'ioredis') as typeof ioredis

describe(`ioredis ${major}`, () => {
  it('is the client of the helpers and of a store built from a URL', async () => {
    expect(require(major === 6 ? 'ioredis6/package.json' : 'ioredis/package.json').version).toMatch(
      new RegExp(`^${major}\\.`),
    )
    expect(connectStandalone()).toBeInstanceOf(expected.Redis)
    expect(connectCluster()).toBeInstanceOf(expected.Cluster)
    expect(ioredis.Redis).toBe(expected.Redis)
  })

  it.each(['standalone', 'cluster'] as const)(
    'G1 G5: a semaphore hands over through pub/sub [%s]',
    async (kind) => {
      const client = kind === 'cluster' ? connectCluster() : connectStandalone()
      const store = createRedisStore(client, { prefix: uniquePrefix().slice(0, -1) })
      const sem = createSemaphore(store, 'major', { permits: 1 })
      const first = await sem.acquire()
      const waiting = sem.acquire({ timeoutMs: 5000 })
      await new Promise((resolve) => setTimeout(resolve, 50))
      const released = performance.now()
      await first.release()
      const second = await waiting
      expect(performance.now() - released).toBeLessThan(1000) // the grant's notification, not a poll
      expect(second.fencingToken).toBeGreaterThan(first.fencingToken)
      await second.release()
      expect(await sem.stats()).toMatchObject({ holders: 0, queued: 0 })
      await store.close()
    },
  )
})
