import { setMaxListeners } from 'node:events'
import { describe, expect, it } from 'vitest'
import {
  AcquireTimeoutError,
  ConfigError,
  createMemoryStore,
  createReentrantMutex,
  createSemaphore,
  type Lease,
  type Store,
} from '../../src/index.js'
import { type Checker, contend, memoryChecker, redisChecker } from '../fixtures/contend.js'
import { type ChildHandle, spawnReadyChild } from '../helpers/child.js'
import { describeStores, eventually, keysUnder, REDIS_KINDS, sleep, storedKeys } from '../helpers/contract.js'
import { connectStandalone } from '../helpers/redis.js'

const WORKER = new URL('../fixtures/lock-worker.ts', import.meta.url)

const startWorker = () => spawnReadyChild(WORKER)

describeStores('semaphore', (fx, kind) => {
  it('G1: never has more than 5 holders: 3 processes x 30 workers for 5 s, random holds', async () => {
    const { store, prefix } = fx()
    const options = { contenders: 30, durationMs: 5000, maxHoldMs: 8, capacity: 5 }
    const sem = (s: Store) =>
      createSemaphore(s, 'load', { permits: 5, acquireTimeoutMs: Number.POSITIVE_INFINITY })
    let results: { violations: number; maxInside: number; perContender: number[] }[]
    if (kind === 'memory') {
      // One process: the same 90 workers, all in this process.
      results = [await contend([sem(store)], memoryChecker(), { ...options, contenders: 90 })]
    } else {
      const checkerKey = `${prefix}:checker`
      const workers = await Promise.all([startWorker(), startWorker()])
      for (const w of workers) {
        w.send({
          type: 'contend',
          kind,
          prefix,
          name: 'load',
          permits: 5,
          connections: 2,
          checkerKey,
          ...options,
        })
      }
      const local = contend(
        [sem(store), sem(fx().another())],
        redisChecker(connectStandalone(), checkerKey),
        options,
      )
      results = [
        await local,
        ...((await Promise.all(workers.map((w) => w.waitFor('contended', 60_000)))) as never[]),
      ]
    }
    expect(results.map((r) => r.violations)).toEqual(results.map(() => 0))
    expect(Math.max(...results.map((r) => r.maxInside))).toBe(5) // the permits really were used
    expect(Math.min(...results.flatMap((r) => r.perContender))).toBeGreaterThan(0)
  }, 60_000)

  it('G5: admits waiters in the order they queued', async () => {
    const { store } = fx()
    const sem = createSemaphore(store, 'fifo', { permits: 2 })
    const [keep, free] = [await sem.acquire(), await sem.acquire()] as [Lease, Lease]
    const order: string[] = []
    const waits: Promise<void>[] = []
    for (let i = 0; i < 6; i++) {
      const s = createSemaphore(i % 2 ? fx().another() : store, 'fifo', { permits: 2 })
      waits.push(
        s.acquire({ timeoutMs: 10_000 }).then(async (lease) => {
          order.push(`w${i}`)
          await sleep(5)
          await lease.release()
        }),
      )
      await eventually(async () => (await sem.stats()).queued === i + 1)
    }
    await free.release() // one permit cycles through the queue while `keep` holds the other
    await Promise.all(waits)
    expect(order).toEqual(['w0', 'w1', 'w2', 'w3', 'w4', 'w5'])
    await keep.release()
  })

  it('G5: leaves nothing behind after 1,000 abandoned waits (aborted and timed out)', async () => {
    const { store } = fx()
    const sem = createSemaphore(store, 'abandon', { permits: 1 })
    const holder = await sem.acquire()
    const controller = new AbortController()
    setMaxListeners(1000, controller.signal) // 500 waiters share this signal on purpose
    const waits = Array.from({ length: 1000 }, (_, i) =>
      i % 2 ? sem.acquire({ signal: controller.signal }) : sem.acquire({ timeoutMs: 1500 }),
    )
    await eventually(async () => (await sem.stats()).queued === 1000, 10_000)
    controller.abort(new Error('gone'))
    const outcomes = await Promise.allSettled(waits)
    expect(outcomes.every((o) => o.status === 'rejected')).toBe(true)
    const reasons = outcomes.map((o) => (o as PromiseRejectedResult).reason)
    expect(reasons.filter((r) => r instanceof AcquireTimeoutError)).toHaveLength(500)
    await eventually(async () => (await sem.stats()).queued === 0, 5000)
    await holder.release()
    await eventually(async () => (await storedKeys(fx())) === 0, 2000)
  }, 30_000)

  it('G2: leaves zero keys for idle names once their leases end (released, expired or abandoned)', async () => {
    const { store } = fx()
    for (let t = 0; t < 20; t++) {
      const sem = createSemaphore(store, `tenant-${t}`, { permits: 2, ttlMs: 300, autoRenew: false })
      const a = await sem.acquire()
      await sem.acquire() // never released: expires
      const waiting = sem.acquire({ timeoutMs: 50 }).catch(() => undefined)
      await a.release()
      await waiting
    }
    await sleep(350)
    await eventually(async () => (await storedKeys(fx())) === 0, 2000)
  })

  it('G1: keeps the cap when permits change under load; lowering never evicts holders', async () => {
    const { store } = fx()
    const sems = [store, fx().another()].map((s) => createSemaphore(s, 'resize', { permits: 5 }))
    const first = sems[0]!
    let inside = 0
    let cap = 5
    let violations = 0
    let maxAfterRaise = 0
    const checker: Checker = {
      async enter() {
        inside++
        if (inside > cap) violations++
        if (cap === 8) maxAfterRaise = Math.max(maxAfterRaise, inside)
        return inside
      },
      async leave() {
        inside--
      },
    }
    const load = contend(sems, checker, { contenders: 20, durationMs: 3000, maxHoldMs: 20, capacity: 100 })
    await sleep(600)
    const before = inside
    await first.setPermits(2)
    expect(inside).toBeGreaterThanOrEqual(Math.min(before, 3) - 3) // holders were not evicted
    await eventually(async () => (await first.stats()).holders <= 2 && inside <= 2, 2000, 1)
    cap = 2
    await sleep(800)
    cap = 8
    await first.setPermits(8)
    expect((await first.stats()).limit).toBe(8)
    await load
    expect(violations).toBe(0)
    expect(maxAfterRaise).toBeGreaterThan(5) // the raise admitted more than the old cap
  }, 20_000)

  it('G5: resetPermits() admits at once the waiters the restored limit has room for', async () => {
    const { store } = fx()
    // The default waiterTtlMs (10 s): the waiters' next heartbeat is 3.3 s away.
    const sem = createSemaphore(store, 'reset', { permits: 3 })
    await sem.setPermits(1)
    const held = await sem.acquire()
    const waiting = [sem.acquire({ timeoutMs: 10_000 }), sem.acquire({ timeoutMs: 10_000 })]
    await eventually(async () => (await sem.stats()).queued === 2)
    // Past the waiters' first re-check (made right after they subscribe): from here on only the reset
    // itself can admit them before their next heartbeat.
    await sleep(300)
    const resetAt = performance.now()
    await sem.resetPermits()
    const leases = await Promise.all(waiting)
    expect(performance.now() - resetAt).toBeLessThan(500)
    expect(await sem.stats()).toMatchObject({ holders: 3, queued: 0, limit: 3, override: undefined })
    await Promise.all([held, ...leases].map((lease) => lease.release()))
  })

  it('validates its options', () => {
    expect(() => createSemaphore(fx().store, 's', { permits: 0 })).toThrow(ConfigError)
    expect(() => createSemaphore(fx().store, 's', { permits: 1.5 })).toThrow('"permits"')
    expect(() => createSemaphore(fx().store, 's', undefined as never)).toThrow('as the third argument')
    expect(() => createSemaphore(fx().store, '', { permits: 1 })).toThrow('as the second argument')
    expect(() => createSemaphore(fx().store, 's', { permits: 2, ttlMs: 0 })).toThrow('"ttlMs"')
  })
})

describeStores(
  'semaphore across processes',
  (fx, kind) => {
    it('G2: gives every key it writes an expiry, under waiters, aborts, re-entry and setPermits', async () => {
      // A key without an expiry would outlive a crash of every process: the scripts set it with
      // PEXPIREAT ... GT on keys they know exist, so a mistake there shows up as a PTTL of -1.
      const { store, client, prefix } = fx()
      const redis = client as NonNullable<typeof client>
      const missing = new Set<string>()
      let sampling = true
      const sampler = (async () => {
        while (sampling) {
          for (const key of await keysUnder(redis, prefix)) {
            // :p (setPermits) is configuration and persists on purpose.
            if (!key.endsWith(':p') && (await redis.pttl(key)) === -1) missing.add(key)
          }
          await sleep(5)
        }
      })()
      const sem = createSemaphore(store, 'ttl', { permits: 2, ttlMs: 400, waiterTtlMs: 300 })
      const other = createSemaphore(fx().another(), 'ttl', { permits: 2, ttlMs: 150, autoRenew: false })
      const mutex = createReentrantMutex(store, 'ttl-r', { ttlMs: 300 })
      const until = Date.now() + 1500
      const loop = async (i: number) => {
        while (Date.now() < until) {
          const s = i % 2 === 0 ? sem : other
          const lease = await s.acquire({ timeoutMs: i % 3 === 0 ? 5 : 2000 }).catch(() => undefined)
          await sleep(i % 4)
          await lease?.release()
          await mutex.withLease(() =>
            Promise.all([mutex.withLease(() => sleep(1)), mutex.withLease(() => sleep(2))]),
          )
        }
      }
      await Promise.all([
        ...Array.from({ length: 8 }, (_, i) => loop(i)),
        sem.setPermits(3).then(() => sem.setPermits(1)),
      ])
      sampling = false
      await sampler
      expect([...missing]).toEqual([])
    }, 20_000)

    it("G2: gives a SIGKILLed holder's permits back within TTL + tolerance", async () => {
      const { store, prefix } = fx()
      const child = await startWorker()
      for (const id of ['a', 'b']) {
        child.send({ type: 'acquire', kind, prefix, name: 'crash', permits: 2, ttlMs: 1000, id })
        await child.waitFor('acquired')
      }
      const sem = createSemaphore(store, 'crash', { permits: 2 })
      expect(await sem.tryAcquire()).toBeUndefined()
      child.kill('SIGKILL')
      await child.exited
      const killedAt = Date.now()
      const leases = await Promise.all([sem.acquire({ timeoutMs: 5000 }), sem.acquire({ timeoutMs: 5000 })])
      expect(Date.now() - killedAt).toBeLessThan(1000 + 400)
      await Promise.all(leases.map((l) => l.release()))
    })

    it('G5: lets the queue behind a SIGKILLed waiter proceed within the waiter heartbeat bound', async () => {
      const { store, prefix } = fx()
      const waiterTtlMs = 600
      const sem = createSemaphore(store, 'dead-waiter', { permits: 1, waiterTtlMs, ttlMs: 10_000 })
      const holder = await sem.acquire()
      const child = await startWorker()
      child.send({
        type: 'acquire',
        kind,
        prefix,
        name: 'dead-waiter',
        permits: 1,
        ttlMs: 10_000,
        waiterTtlMs,
        id: 'ghost',
      })
      await eventually(async () => (await sem.stats()).queued === 1)
      const behind = sem.acquire({ timeoutMs: 10_000 })
      await eventually(async () => (await sem.stats()).queued === 2)
      child.kill('SIGKILL')
      await child.exited
      const freedAt = Date.now()
      await holder.release() // handed to the dead waiter (its heartbeat has not run out yet)
      const lease = await behind
      // The dead waiter's permit lasts at most waiterTtlMs; the live waiter re-checks every third of it.
      expect(Date.now() - freedAt).toBeLessThan(waiterTtlMs + waiterTtlMs / 3 + 400)
      await lease.release()
    })

    it('G2 G3 G4: takes the lease from a frozen holder; on resume its signal aborts and its release frees nothing', async () => {
      const { store, prefix } = fx()
      const sem = createSemaphore(store, 'frozen', { permits: 1 })
      const child = await startWorker()
      child.send({ type: 'acquire', kind, prefix, name: 'frozen', permits: 1, ttlMs: 600, id: 'sleeper' })
      await child.waitFor('acquired')
      child.kill('SIGSTOP')
      const stoppedAt = Date.now()
      const mine = await sem.acquire({ timeoutMs: 5000 })
      expect(Date.now() - stoppedAt).toBeLessThan(600 + 400)
      child.kill('SIGCONT')
      await child.waitFor('lost', 5000)
      child.send({ type: 'release', id: 'sleeper' })
      await child.waitFor('released')
      expect(mine.signal.aborted).toBe(false)
      expect((await sem.stats()).holders).toBe(1)
      expect(await sem.tryAcquire()).toBeUndefined()
      await mine.release()
    })

    it('G5: admits waiters from several processes in the order they queued', async () => {
      const { store, prefix } = fx()
      const sem = createSemaphore(store, 'xfifo', { permits: 2 })
      const [keep, free] = [await sem.acquire(), await sem.acquire()] as [Lease, Lease]
      const orderKey = `${prefix}:order`
      const workers = await Promise.all([startWorker(), startWorker()])
      const ids = ['p0', 'p1', 'p2', 'p3']
      for (let i = 0; i < ids.length; i++) {
        ;(workers[i % 2] as ChildHandle).send({
          type: 'acquire',
          kind,
          prefix,
          name: 'xfifo',
          permits: 2,
          id: ids[i],
          orderKey,
        })
        await eventually(async () => (await sem.stats()).queued === i + 1)
      }
      await free.release()
      for (let i = 0; i < ids.length; i++) {
        const worker = workers[i % 2] as ChildHandle
        await worker.waitFor('acquired')
        worker.send({ type: 'release', id: ids[i] })
        await worker.waitFor('released')
      }
      expect(await connectStandalone().lrange(orderKey, 0, -1)).toEqual(ids)
      await keep.release()
    })
  },
  REDIS_KINDS,
)

describe('semaphore on the memory store', () => {
  it('G2 G11: frees the permit of a holder that stopped renewing within TTL', async () => {
    const store = createMemoryStore()
    const sem = createSemaphore(store, 'm', { permits: 1, ttlMs: 300, autoRenew: false })
    await sem.acquire()
    const started = Date.now()
    const next = await sem.acquire({ timeoutMs: 2000 })
    expect(Date.now() - started).toBeLessThan(300 + 200)
    await next.release()
    await store.close()
  })
})
