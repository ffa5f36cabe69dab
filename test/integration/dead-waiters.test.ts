// G2 G5 with a crowd of dead waiters ahead: waiters whose process died (they stop heart-beating) must
// never receive a permit once their heartbeat has lapsed, and must not hold the queue past the
// documented bound (waiterTtlMs x 4/3 from their last beat), however many there are; and no single
// store call may grow with their number. The dead are queued through the store protocol directly and
// never re-checked again: to the store, exactly a process that died right after queueing.
import { afterAll, beforeAll, expect, it } from 'vitest'
import { keySpace } from '../../src/core/keys.js'
import type { Store } from '../../src/core/protocol/store.js'
import { createReadWriteLock, createRedisStore, createSemaphore, type Lease } from '../../src/index.js'
import { describeStores, eventually, sleep } from '../helpers/contract.js'
import { connectTo, uniquePrefix } from '../helpers/redis.js'
import { type RedisServerHandle, startRedisServer } from '../helpers/redis-server.js'

const WAITER_TTL_MS = 900
const DEAD = 2000

/** Queue `n` waiters that will never beat again (in one turn: the Redis store batches them). */
async function queueDead(store: Store, family: 'sem' | 'rw', name: string, n: number): Promise<void> {
  const space = keySpace(store.prefix, family, name)
  const replies = await Promise.all(
    Array.from({ length: n }, (_, i) =>
      family === 'sem'
        ? store.permits.acquire(space, {
            token: `dead-${i}`,
            ttlMs: 30_000,
            permits: 1,
            enqueue: true,
            waiterTtlMs: WAITER_TTL_MS,
          })
        : store.rwlock.acquire(space, {
            token: `dead-${i}`,
            op: `dead-${i}`,
            mode: 'write',
            ttlMs: 30_000,
            enqueue: true,
            waiterTtlMs: WAITER_TTL_MS,
          }),
    ),
  )
  expect(replies.every((reply) => !reply.granted)).toBe(true)
}

describeStores('a crowd of dead waiters', (fx) => {
  const cases = {
    semaphore: async (store: Store) => {
      const sem = createSemaphore(store, 'crowd', { permits: 1, waiterTtlMs: WAITER_TTL_MS })
      return {
        family: 'sem' as const,
        holder: () => sem.acquire(),
        live: () => sem.acquire({ timeoutMs: 20_000 }),
      }
    },
    'read/write lock': async (store: Store) => {
      const lock = createReadWriteLock(store, 'crowd', { waiterTtlMs: WAITER_TTL_MS })
      return {
        family: 'rw' as const,
        holder: () => lock.write.acquire(),
        live: () => lock.read.acquire({ timeoutMs: 20_000 }),
      }
    },
  }
  for (const [label, make] of Object.entries(cases)) {
    it(`G2 G5: ${DEAD} dead waiters ahead never get the lock and hold a live waiter no longer than waiterTtlMs x 4/3 (${label})`, async () => {
      const { store } = fx()
      const { family, holder, live } = await make(store)
      const held = await holder()
      await queueDead(store, family, 'crowd', DEAD)
      const lastBeat = performance.now()
      let admitted = Number.NaN
      const waiting = live().then((lease: Lease) => {
        admitted = performance.now()
        return lease
      })
      // Let the crowd's heartbeats lapse, then free the lock: it must go to the live waiter, not to a
      // dead one (which would keep it min(ttlMs, waiterTtlMs) and pass it on to the next dead one).
      await sleep(WAITER_TTL_MS + 50)
      await held.release()
      const lease = await waiting
      expect(admitted - lastBeat).toBeLessThan((WAITER_TTL_MS * 4) / 3 + 400)
      await lease.release()
    }, 60_000)
  }
})

describeStores('a crowd of dead waiters behind a live one', (fx) => {
  it('G5: a live waiter at the head gets a freed permit at once, however many dead waiters queue behind it', async () => {
    const { store } = fx()
    // The live waiter beats every 3.3 s (the default waiterTtlMs): only the release can let it in now.
    const sem = createSemaphore(store, 'head', { permits: 1 })
    const lock = createReadWriteLock(store, 'head-rw')
    const holders = [await sem.acquire(), await lock.write.acquire()]
    const live = [sem.acquire({ timeoutMs: 10_000 }), lock.read.acquire({ timeoutMs: 10_000 })]
    await eventually(async () => (await sem.stats()).queued === 1 && (await lock.stats()).queued === 1)
    await queueDead(store, 'sem', 'head', 1500)
    await queueDead(store, 'rw', 'head-rw', 1500)
    await sleep(WAITER_TTL_MS + 50) // the crowd behind has lapsed
    const releasedAt = performance.now()
    await Promise.all(holders.map((lease) => lease.release()))
    const leases = await Promise.all(live)
    expect(performance.now() - releasedAt).toBeLessThan(1000)
    await Promise.all(leases.map((lease) => lease.release()))
  }, 30_000)
})

// The cost of a call, whatever the crowd: on a private server (its slow log is ours alone), 20,000
// dead waiters are dropped in calls that each stay short.
let server: RedisServerHandle
beforeAll(async () => {
  server = await startRedisServer()
})
afterAll(async () => {
  await server?.stop()
})

it('G5: 20,000 dead waiters are dropped at most 2,000 a call (the work of a call does not grow with them); the live waiter gets in within the bound', async () => {
  const client = connectTo(server)
  const monitor = await connectTo(server).monitor()
  const store = createRedisStore(client, { prefix: uniquePrefix().slice(0, -1) })
  try {
    const sem = createSemaphore(store, 'many', { permits: 1, waiterTtlMs: WAITER_TTL_MS })
    const space = keySpace(store.prefix, 'sem', 'many')
    const queue = space.key('q')
    // Every command a script runs, in order (a script's commands are never interleaved with another
    // client's): waiters each script call takes off the queue. Counted in work, not in time, which a
    // loaded machine stretches (a call that purged 1,000 took 1-6 ms alone and 20 ms beside the
    // other suites).
    const removedPerCall: number[] = []
    let inScript = false
    monitor.on('monitor', (_time: string, args: string[], source: string) => {
      const lua = source === 'lua'
      if (lua && !inScript) removedPerCall.push(0)
      inScript = lua
      if (lua && args[0]?.toLowerCase() === 'zrem' && args[1] === queue)
        removedPerCall[removedPerCall.length - 1]! += args.length - 2
    })
    const held = await sem.acquire()
    for (let i = 0; i < 10; i++) {
      await Promise.all(
        Array.from({ length: 2000 }, (_, j) =>
          store.permits.acquire(space, {
            token: `dead-${i}-${j}`,
            ttlMs: 30_000,
            permits: 1,
            enqueue: true,
            waiterTtlMs: WAITER_TTL_MS,
          }),
        ),
      )
    }
    const lastBeat = performance.now()
    const waiting = sem.acquire({ timeoutMs: 20_000 })
    await eventually(async () => (await sem.stats()).queued === 20_001, 5000)
    await sleep(WAITER_TTL_MS + 50)
    await held.release()
    const lease = await waiting
    expect(performance.now() - lastBeat).toBeLessThan((WAITER_TTL_MS * 4) / 3 + 1000)
    // The dead went in many calls, none of which took more than its budgets (1,000 purged, 1,000
    // found dead at the head of the queue), and the live waiter among them.
    // (The monitor's feed may come a little after the replies.)
    await eventually(() => removedPerCall.reduce((sum, n) => sum + n, 0) >= 20_000, 5000)
    expect(Math.max(...removedPerCall)).toBeLessThanOrEqual(2000)
    await lease.release()
    await eventually(async () => (await sem.stats()).queued === 0, 5000)
  } finally {
    monitor.disconnect()
    await store.close()
  }
}, 60_000)
