// G4 under network faults: a holder cut off from Redis must see lease.signal abort before anyone else
// can hold the lease. The holder's store talks to Redis through a fault proxy (test/helpers/
// fault-proxy.ts); an observer on its own connection queues for the same mutex from the start and
// records when Redis hands it the lock, which it can only do once the holder's lease has expired on
// the server. Each fault is one way the network can fail a renewal: silence with the renewal in
// flight, a reply held back for 900 ms, replies that never come while the scripts still run, and a
// cut connection that cannot reconnect.
import { afterEach, describe, expect, it } from 'vitest'
import { createMutex, createRedisStore, type Lease, type Store } from '../../src/index.js'
import { REDIS_KINDS } from '../helpers/contract.js'
import { type ProxiedStore, proxiedStore } from '../helpers/proxied.js'
import { connectCluster, connectStandalone, uniquePrefix } from '../helpers/redis.js'

const TTL_MS = 1500
/** The documented drift margin: a lease's signal aborts this much before the store-side expiry. */
const marginOf = (ttlMs: number) => Math.ceil(ttlMs / 100) + 5

/** Leases (each on its own mutex, each with its own observer) held through one faulty connection. */
const LEASES = 5

type Fault = (holder: ProxiedStore, leases: Lease[]) => Promise<void>

/** The holder's commandTimeoutMs: short, so that a release in a partition fails within the lease. */
const COMMAND_TIMEOUT_MS = 300

const FAULTS: Record<string, Fault> = {
  // Partitioned at once: the first renewal waits out commandTimeoutMs (2 s, longer than the lease).
  'a partition right after the grant': async (holder) => holder.partition(),
  // The first renewal runs on Redis, its reply is held 900 ms, and then the network goes.
  'the last renewal reply held for 900 ms, then a partition': async (holder, leases) => {
    holder.delay(900)
    await Promise.all(leases.map((lease) => holder.waitForRequest(lease.token)))
    holder.partition()
  },
  // Every renewal runs on Redis and extends the lease there; no reply ever comes back.
  'replies dropped while the scripts still run': async (holder) => holder.dropReplies(),
  // The connection is cut and every reconnect lands in silence.
  'a cut connection that cannot reconnect': async (holder) => {
    holder.partition()
    holder.cutAll()
  },
  // The holder gives up and releases, in a partition: the release fails, the lease runs on.
  'a release that fails in a partition': async (holder, leases) => {
    holder.partition()
    const released = await Promise.allSettled(leases.map((lease) => lease.release()))
    expect(released.every((result) => result.status === 'rejected')).toBe(true)
  },
}

for (const kind of REDIS_KINDS) {
  describe(`lease.signal under network faults [${kind}]`, () => {
    const open: (() => Promise<void>)[] = []
    afterEach(async () => {
      for (const close of open.splice(0).reverse()) await close()
    })

    for (const [label, fault] of Object.entries(FAULTS)) {
      it(`G4: aborts before another client can acquire: ${label}`, async () => {
        const prefix = uniquePrefix().slice(0, -1)
        const holder = await proxiedStore(kind as 'standalone' | 'cluster', prefix, {
          commandTimeoutMs: COMMAND_TIMEOUT_MS,
        })
        open.push(() => holder.close())
        const direct: Store = createRedisStore(
          kind === 'standalone' ? connectStandalone() : connectCluster(),
          {
            prefix,
          },
        )
        open.push(() => direct.close())

        const names = Array.from({ length: LEASES }, (_, i) => `cut-${i}`)
        const asked = performance.now()
        const leases = await Promise.all(
          names.map((name) => createMutex(holder.store, name, { ttlMs: TTL_MS }).acquire()),
        )
        const abortedAt = leases.map(() => Number.NaN)
        leases.forEach((lease, i) =>
          lease.signal.addEventListener('abort', () => (abortedAt[i] = performance.now())),
        )
        // Each observer queues behind its holder and is admitted once that lease is gone on the server.
        const observers = names.map((name) =>
          createMutex(direct, name, { ttlMs: 5000 })
            .acquire({ timeoutMs: 15_000 })
            .then((lease) => ({ lease, at: performance.now() })),
        )
        await fault(holder, leases)
        const taken = await Promise.all(observers)
        open.push(() => Promise.all(taken.map(({ lease }) => lease.release())).then(() => {}))

        leases.forEach((lease, i) => {
          const at = abortedAt[i] as number
          expect(Number.isNaN(at), `lease ${i}: the signal aborted`).toBe(false)
          // First, every time: the holder knew before its observer could hold it.
          expect(at, `lease ${i}: aborted before the observer acquired`).toBeLessThan(taken[i]!.at)
          // And not long before: the grant alone confirmed the lease until its TTL less the margin,
          // counted from when the acquire was asked.
          expect(at - asked).toBeGreaterThanOrEqual(TTL_MS - marginOf(TTL_MS) - 2)
          expect(lease.signal.reason).toMatchObject({ code: 'ERR_TOLLGATE_LEASE_LOST' })
        })
      }, 30_000)
    }

    it('G4: a renewal whose reply comes after its lease was given up releases it at once, not a TTL later', async () => {
      const prefix = uniquePrefix().slice(0, -1)
      const holder = await proxiedStore(kind as 'standalone' | 'cluster', prefix)
      open.push(() => holder.close())
      const direct: Store = createRedisStore(kind === 'standalone' ? connectStandalone() : connectCluster(), {
        prefix,
      })
      open.push(() => direct.close())
      const lease = await createMutex(holder.store, 'late', { ttlMs: TTL_MS }).acquire()
      let abortedAt = Number.NaN
      lease.signal.addEventListener('abort', () => (abortedAt = performance.now()))
      const observer = createMutex(direct, 'late', { ttlMs: 5000 })
        .acquire({ timeoutMs: 15_000 })
        .then((taken) => ({ lease: taken, at: performance.now() }))
      // Replies come 1,200 ms late: the first renewal runs on Redis (the lease now ends TTL after it),
      // but its reply arrives after the local deadline.
      holder.delay(1200)
      await holder.waitForRequest(lease.token)
      const renewedAt = performance.now()
      const taken = await observer
      open.push(() => taken.lease.release())
      expect(abortedAt).toBeLessThan(taken.at)
      // Given back when the late reply came (about 1,200 ms after the renewal), not when the renewed
      // lease ran out (1,500 ms after it).
      expect(taken.at - renewedAt).toBeLessThan(TTL_MS - 150)
    }, 30_000)
  })
}
