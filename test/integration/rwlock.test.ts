import { setMaxListeners } from 'node:events'
import { describe, expect, it } from 'vitest'
import {
  ConfigError,
  createMemoryStore,
  createReadWriteLock,
  type Lease,
  LockUpgradeError,
  type ReadWriteLock,
  type Store,
} from '../../src/index.js'
import {
  fenceOrderViolation,
  memoryRwChecker,
  redisRwChecker,
  rwContend,
  type RwContendResult,
} from '../fixtures/rw-contend.js'
import { spawnReadyChild } from '../helpers/child.js'
import { describeStores, eventually, REDIS_KINDS, sleep, storedKeys } from '../helpers/contract.js'
import { connectStandalone } from '../helpers/redis.js'

const WORKER = new URL('../fixtures/rw-worker.ts', import.meta.url)

const startWorker = () => spawnReadyChild(WORKER)

/** A promise whose outcome can be looked at without awaiting it. */
function track<T>(promise: Promise<T>): { promise: Promise<T>; settled: () => boolean } {
  let settled = false
  const observed = promise.finally(() => {
    settled = true
  })
  observed.catch(() => {}) // the test awaits `promise` itself
  return { promise, settled: () => settled }
}

const queuedIs = (lock: ReadWriteLock, n: number) => async () => (await lock.stats()).queued === n

describeStores('read/write lock', (fx, kind) => {
  it('G1: never lets a writer in with anyone else: 3 processes mix readers and writers for 5 s', async () => {
    const { store, prefix } = fx()
    const options = { durationMs: 5000, maxHoldMs: 6, writeRatio: 0.2 }
    const lock = (s: Store) => createReadWriteLock(s, 'load', { acquireTimeoutMs: Number.POSITIVE_INFINITY })
    let results: RwContendResult[]
    let log: string[]
    if (kind === 'memory') {
      // One process: the same 24 contenders, all here.
      const checker = memoryRwChecker()
      results = [await rwContend([lock(store)], checker, { ...options, contenders: 24 })]
      log = checker.log
    } else {
      const checkerKey = `${prefix}:checker`
      const workers = await Promise.all([startWorker(), startWorker()])
      for (const w of workers) {
        w.send({
          type: 'contend',
          kind,
          prefix,
          name: 'load',
          connections: 2,
          contenders: 8,
          checkerKey,
          ...options,
        })
      }
      const local = rwContend(
        [lock(store), lock(fx().another())],
        redisRwChecker(connectStandalone(), checkerKey),
        {
          ...options,
          contenders: 8,
        },
      )
      results = [
        await local,
        ...((await Promise.all(workers.map((w) => w.waitFor('contended', 60_000)))) as never[]),
      ]
      log = await connectStandalone().lrange(`${checkerKey}:log`, 0, -1)
    }
    expect(results.map((r) => r.violations)).toEqual(results.map(() => 0))
    expect(Math.max(...results.map((r) => r.maxReaders))).toBeGreaterThanOrEqual(2) // readers overlapped
    for (const r of results) {
      expect(r.reads).toBeGreaterThan(0)
      expect(r.writes).toBeGreaterThan(0)
    }
    expect(Math.min(...results.flatMap((r) => r.perContender))).toBeGreaterThan(0)
    expect(log.length).toBe(results.reduce((n, r) => n + r.reads + r.writes, 0))
    // Fencing tokens increase across modes (G7): every writer above all before it, every reader above
    // the writers before it.
    expect(fenceOrderViolation(log)).toBeUndefined()
  }, 60_000)

  it('G6: admits a writer that waits behind 20 overlapping reader loops within a few read-hold times', async () => {
    const holdMs = 150
    const readers = createReadWriteLock(fx().store, 'busy')
    const writers = createReadWriteLock(fx().another(), 'busy')
    let inside = 0
    let stop = false
    let writerDone = false
    let readsAfterWriter = 0
    const loops = Array.from({ length: 20 }, async (_, i) => {
      await sleep((i * holdMs) / 20) // staggered: some reader holds at every moment
      while (!stop) {
        const lease = await readers.read.acquire({ timeoutMs: 10_000 })
        inside++
        await sleep(holdMs)
        inside--
        await lease.release()
        if (writerDone) readsAfterWriter++
      }
    })
    let waited: number
    let readersWithWriter: number
    try {
      await sleep(2 * holdMs)
      expect(inside).toBeGreaterThan(0)
      const started = Date.now()
      const writer = await writers.write.acquire({ timeoutMs: 3000 })
      waited = Date.now() - started
      readersWithWriter = inside
      await sleep(holdMs / 3)
      readersWithWriter = Math.max(readersWithWriter, inside)
      await writer.release()
      writerDone = true
      await sleep(2 * holdMs)
    } finally {
      stop = true
      await Promise.all(loops)
    }
    expect(readersWithWriter).toBe(0)
    expect(waited).toBeLessThan(4 * holdMs)
    expect(readsAfterWriter).toBeGreaterThan(0) // the readers queued behind the writer went on
  })

  it('G5 G6: admits the readers queued behind a writer together, then the next writer, in FIFO order', async () => {
    const lock = createReadWriteLock(fx().store, 'batch')
    const other = createReadWriteLock(fx().another(), 'batch')
    const first = await lock.write.acquire()
    const readers = []
    for (let i = 0; i < 5; i++) {
      readers.push(track((i % 2 ? other : lock).read.acquire({ timeoutMs: 10_000 })))
      await eventually(queuedIs(lock, i + 1))
    }
    const second = track(other.write.acquire({ timeoutMs: 10_000 }))
    await eventually(queuedIs(lock, 6))
    const late = track(lock.read.acquire({ timeoutMs: 10_000 }))
    await eventually(queuedIs(lock, 7))

    const releasedAt = Date.now()
    await first.release()
    const leases = await Promise.all(readers.map((r) => r.promise))
    // Together, in one step: one reader at a time would take a re-check interval (seconds) each.
    expect(Date.now() - releasedAt).toBeLessThan(500)
    expect(await lock.stats()).toEqual({ readers: 5, writer: false, queued: 2 })
    // A writer waits, so a new reader neither skips the queue nor joins the five (G6).
    expect(await other.read.tryAcquire()).toBeUndefined()
    for (const lease of leases.slice(0, 4)) await lease.release()
    await sleep(100)
    expect(second.settled()).toBe(false) // one reader still holds
    await (leases[4] as Lease).release()
    const writer = await second.promise
    expect(await lock.stats()).toEqual({ readers: 0, writer: true, queued: 1 })
    expect(late.settled()).toBe(false)
    const readFences = leases.map((l) => l.fencingToken)
    expect(Math.min(...readFences)).toBeGreaterThan(first.fencingToken)
    expect(writer.fencingToken).toBeGreaterThan(Math.max(...readFences))
    await writer.release()
    const last = await late.promise
    expect(last.fencingToken).toBeGreaterThan(writer.fencingToken)
    await last.release()
  })

  it("G1 G3: keeps reader B's lease, and the writer out, when reader A releases or its lease runs out", async () => {
    const { store } = fx()
    const lock = createReadWriteLock(store, 'independent')
    const a = await lock.read.acquire()
    const b = await createReadWriteLock(fx().another(), 'independent').read.acquire()
    const c = await createReadWriteLock(store, 'independent', { ttlMs: 300, autoRenew: false }).read.acquire()
    const writer = track(createReadWriteLock(store, 'independent').write.acquire({ timeoutMs: 10_000 }))
    await eventually(queuedIs(lock, 1))
    await a.release()
    await sleep(400) // C's lease ran out meanwhile, never released
    expect(c.signal.aborted).toBe(true)
    expect(writer.settled()).toBe(false)
    expect(await lock.stats()).toEqual({ readers: 1, writer: false, queued: 1 })
    expect(b.signal.aborted).toBe(false)
    await b.renew() // B's own lease is intact
    await a.release() // idempotent: frees nothing of B's
    await c.release()
    expect(await lock.stats()).toEqual({ readers: 1, writer: false, queued: 1 })
    const releasedAt = Date.now()
    await b.release()
    const lease = await writer.promise
    expect(Date.now() - releasedAt).toBeLessThan(500)
    await lease.release()
  })

  it('G1: re-enters read in read and write in write for the same async chain; other owners stay out', async () => {
    const lock = createReadWriteLock(fx().store, 're')
    const probe = createReadWriteLock(fx().another(), 're', { owner: 'probe' })
    await lock.read.withLease(async (outer) => {
      await lock.read.withLease(async (inner) => {
        expect(inner.token).toBe(outer.token)
        expect(inner.fencingToken).toBe(outer.fencingToken)
      })
      expect(await lock.stats()).toEqual({ readers: 1, writer: false, queued: 0 })
      expect(await probe.write.tryAcquire()).toBeUndefined() // one count left
    })
    await lock.write.withLease(async (outer) => {
      await lock.write.withLease(async (inner) => {
        expect(inner.token).toBe(outer.token)
        expect(inner.fencingToken).toBe(outer.fencingToken)
      })
      expect(await probe.read.tryAcquire()).toBeUndefined() // one count left
    })
    const free = await probe.write.tryAcquire()
    expect(free).toBeDefined()
    await free?.release()
  })

  it("G1: starts a returning owner's hold at count 1 after its earlier hold expired unseen", async () => {
    const { store } = fx()
    const job = createReadWriteLock(store, 'stale', { owner: 'job', ttlMs: 300, autoRenew: false })
    for (let i = 0; i < 3; i++) await job.read.acquire() // count 3, never released: it expires
    // The waiting writer keeps the lock's metadata alive while the readers' key expires on its own.
    const writer = await createReadWriteLock(store, 'stale', { owner: 'w' }).write.acquire({
      timeoutMs: 2000,
    })
    const again = track(job.read.acquire({ timeoutMs: 2000 }))
    await eventually(queuedIs(job, 1))
    await writer.release()
    await (await again.promise).release() // one acquire, one release: free again
    expect(await job.stats()).toEqual({ readers: 0, writer: false, queued: 0 })
  })

  it('G1 G7: grants a writer its read lock at once (downgrade), ahead of queued owners, with its fence', async () => {
    const lock = createReadWriteLock(fx().store, 'down')
    // Explicit owners: inside withLease the async scope would make this process's calls the same
    // owner as the writer (the memory fixture's another() is the same store).
    const otherReader = createReadWriteLock(fx().another(), 'down', { owner: 'reader' })
    const otherWriter = createReadWriteLock(fx().another(), 'down', { owner: 'writer' })
    let queuedReader: ReturnType<typeof track<Lease>> | undefined
    let queuedWriter: ReturnType<typeof track<Lease>> | undefined
    await lock.write.withLease(async (write) => {
      queuedReader = track(otherReader.read.acquire({ timeoutMs: 10_000 }))
      await eventually(queuedIs(lock, 1))
      queuedWriter = track(otherWriter.write.acquire({ timeoutMs: 10_000 }))
      await eventually(queuedIs(lock, 2))
      const started = Date.now()
      await lock.read.withLease(async (read) => {
        expect(Date.now() - started).toBeLessThan(500)
        expect(read.token).toBe(write.token)
        expect(read.fencingToken).toBe(write.fencingToken)
        expect(await lock.stats()).toEqual({ readers: 1, writer: true, queued: 2 })
      })
      expect(queuedReader.settled()).toBe(false)
    })
    const reader = await queuedReader!.promise
    await reader.release()
    const writer = await queuedWriter!.promise
    await writer.release()

    // An explicit owner keeps its downgraded read after releasing the write: readers queued first
    // join it, a writer waits for both.
    const owner = createReadWriteLock(fx().store, 'down2', { owner: 'job-1' })
    const other2 = createReadWriteLock(fx().another(), 'down2')
    const w = await owner.write.acquire()
    const r = await owner.read.acquire({ timeoutMs: 100 })
    expect(r.fencingToken).toBe(w.fencingToken)
    const joiner = track(other2.read.acquire({ timeoutMs: 10_000 }))
    await eventually(queuedIs(owner, 1))
    const excluded = track(other2.write.acquire({ timeoutMs: 10_000 }))
    await eventually(queuedIs(owner, 2))
    await w.release()
    const joined = await joiner.promise
    expect(await owner.stats()).toEqual({ readers: 2, writer: false, queued: 1 })
    await r.release()
    await sleep(100)
    expect(excluded.settled()).toBe(false)
    await joined.release()
    await (await excluded.promise).release()
  })

  it('G1: refuses a read -> write upgrade at once with ERR_TOLLGATE_LOCK_UPGRADE, leaving nothing queued', async () => {
    const lock = createReadWriteLock(fx().store, 'up')
    await lock.read.withLease(async () => {
      const started = Date.now()
      const error = await lock.write.acquire({ timeoutMs: 5000 }).catch((e: unknown) => e)
      expect(Date.now() - started).toBeLessThan(1000)
      expect(error).toBeInstanceOf(LockUpgradeError)
      expect((error as LockUpgradeError).code).toBe('ERR_TOLLGATE_LOCK_UPGRADE')
      expect((error as LockUpgradeError).reason).toBe('upgrade')
      await expect(lock.write.tryAcquire()).rejects.toBeInstanceOf(LockUpgradeError)
      await expect(lock.write.withLease(() => 1)).rejects.toBeInstanceOf(LockUpgradeError)
      expect(await lock.stats()).toEqual({ readers: 1, writer: false, queued: 0 })
    })
    // Two readers both trying to upgrade: both refused, nobody deadlocks.
    const [a, b] = ['a', 'b'].map((owner) => createReadWriteLock(fx().store, 'up2', { owner })) as [
      ReadWriteLock,
      ReadWriteLock,
    ]
    const [ra, rb] = await Promise.all([a.read.acquire(), b.read.acquire()])
    const refused = await Promise.allSettled([a.write.acquire(), b.write.acquire()])
    expect(refused.map((o) => o.status === 'rejected' && (o.reason as LockUpgradeError).code)).toEqual([
      'ERR_TOLLGATE_LOCK_UPGRADE',
      'ERR_TOLLGATE_LOCK_UPGRADE',
    ])
    await Promise.all([ra.release(), rb.release()])
    const w = await a.write.acquire({ timeoutMs: 1000 }) // fine once the read is given back
    // The same owner asking again while it waits is refused too, and the first wait is unharmed.
    const waiting = track(b.write.acquire({ timeoutMs: 10_000 }))
    await eventually(queuedIs(a, 1))
    const again = await b.read.acquire({ timeoutMs: 100 }).catch((e: unknown) => e)
    expect((again as LockUpgradeError).reason).toBe('waiting')
    await w.release()
    await (await waiting.promise).release()
  })

  it('G5: leaves nothing behind: aborted and timed-out waiters of both modes, then zero keys when idle', async () => {
    const lock = createReadWriteLock(fx().store, 'abandon')
    const holder = await lock.write.acquire()
    const controller = new AbortController()
    setMaxListeners(0, controller.signal) // 30 waiters listen to one signal
    const waits = Array.from({ length: 60 }, (_, i) => {
      const side = i % 6 === 0 ? lock.write : lock.read
      return i % 2 ? side.acquire({ signal: controller.signal }) : side.acquire({ timeoutMs: 800 })
    })
    await eventually(queuedIs(lock, 60), 5000)
    controller.abort(new Error('gone'))
    const outcomes = await Promise.allSettled(waits)
    expect(outcomes.every((o) => o.status === 'rejected')).toBe(true)
    await eventually(queuedIs(lock, 0), 2000)
    expect(await lock.stats()).toEqual({ readers: 0, writer: true, queued: 0 })
    await holder.release()
    await eventually(async () => (await storedKeys(fx())) === 0, 2000)

    // Leases that simply run out, and waiters that give up, leave no key either.
    const expiring = createReadWriteLock(fx().store, 'expire', { ttlMs: 300, autoRenew: false })
    await expiring.read.acquire()
    await expiring.read.acquire()
    const w = await createReadWriteLock(fx().store, 'expire-w', {
      ttlMs: 300,
      autoRenew: false,
    }).write.acquire()
    await expiring.write.acquire({ timeoutMs: 50 }).catch(() => undefined)
    expect(w.fencingToken).toBeGreaterThan(0)
    await sleep(350)
    await eventually(async () => (await storedKeys(fx())) === 0, 2000)
  })

  it('validates its options', () => {
    const { store } = fx()
    expect(() => createReadWriteLock(store, 'x', { ttlMs: 0 })).toThrow(ConfigError)
    expect(() => createReadWriteLock(store, 'x', { ttlMs: 0 })).toThrow('"ttlMs"')
    expect(() => createReadWriteLock(store, 'x', { owner: '' })).toThrow('"owner"')
    expect(() => createReadWriteLock(store, '')).toThrow('as the second argument')
    expect(() => createReadWriteLock(store, 'x', 5 as never)).toThrow('as the third argument')
    expect(() => createReadWriteLock(undefined as never, 'x')).toThrow('as the first argument')
    const lock = createReadWriteLock(store, 'x')
    expect(() => lock.read.acquire({ timeoutMs: -1 })).toThrow('"timeoutMs"')
  })
})

describeStores(
  'read/write lock across processes',
  (fx, kind) => {
    it("G1 G2: keeps reader B's lease, and the writer out, when reader A's process is SIGKILLed", async () => {
      const { store, prefix } = fx()
      const ttlMs = 800
      const child = await startWorker()
      child.send({ type: 'acquire', kind, prefix, name: 'killed', mode: 'read', ttlMs, id: 'A' })
      await child.waitFor('acquired')
      const lock = createReadWriteLock(store, 'killed', { ttlMs })
      const b = await lock.read.acquire()
      const writer = track(
        createReadWriteLock(fx().another(), 'killed', { ttlMs }).write.acquire({ timeoutMs: 10_000 }),
      )
      await eventually(queuedIs(lock, 1))
      child.kill('SIGKILL')
      await child.exited
      await eventually(async () => (await lock.stats()).readers === 1, ttlMs + 1000) // A's lease ran out
      await sleep(200)
      expect(writer.settled()).toBe(false)
      expect(b.signal.aborted).toBe(false)
      await b.renew()
      expect(await lock.stats()).toEqual({ readers: 1, writer: false, queued: 1 })
      const releasedAt = Date.now()
      await b.release()
      const lease = await writer.promise
      expect(Date.now() - releasedAt).toBeLessThan(500)
      await lease.release()
    })

    it("G2: lets readers in within TTL + tolerance after the writer's process is SIGKILLed", async () => {
      const { store, prefix } = fx()
      const ttlMs = 1000
      const child = await startWorker()
      child.send({ type: 'acquire', kind, prefix, name: 'crash', mode: 'write', ttlMs, id: 'W' })
      await child.waitFor('acquired')
      const lock = createReadWriteLock(store, 'crash', { ttlMs })
      expect(await lock.read.tryAcquire()).toBeUndefined()
      const readers = [lock, createReadWriteLock(fx().another(), 'crash', { ttlMs })].map((l) =>
        l.read.acquire({ timeoutMs: 5000 }),
      )
      await eventually(queuedIs(lock, 2))
      child.kill('SIGKILL')
      await child.exited
      const killedAt = Date.now()
      const leases = await Promise.all(readers)
      expect(Date.now() - killedAt).toBeLessThan(ttlMs + 400)
      expect(await lock.stats()).toEqual({ readers: 2, writer: false, queued: 0 })
      await Promise.all(leases.map((l) => l.release()))
    })
  },
  REDIS_KINDS,
)

describe('read/write lock on the memory store', () => {
  it('G11: keeps one lock per name and store: the same name on two stores is two locks', async () => {
    const [one, two] = [createMemoryStore(), createMemoryStore()]
    const a = await createReadWriteLock(one, 'n').write.acquire()
    const b = await createReadWriteLock(two, 'n').write.tryAcquire()
    expect(b).toBeDefined()
    await Promise.all([a.release(), b?.release()])
    await Promise.all([one.close(), two.close()])
  })
})
