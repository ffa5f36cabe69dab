import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import { describe, expect, it } from 'vitest'
import { keySpace } from '../../src/core/keys.js'
import { whenLost } from '../../src/core/client/lease.js'
import {
  AcquireTimeoutError,
  ConfigError,
  createMemoryStore,
  createMutex,
  createReadWriteLock,
  createReentrantMutex,
  createSemaphore,
  type LeaseEvent,
  LeaseLostError,
} from '../../src/index.js'
import { contend, memoryChecker, redisChecker } from '../fixtures/contend.js'
import { type ChildHandle, spawnReadyChild } from '../helpers/child.js'
import {
  describeStores,
  dropPermitHolders,
  eventually,
  keysUnder,
  REDIS_KINDS,
  sleep,
} from '../helpers/contract.js'
import { connectStandalone } from '../helpers/redis.js'

const WORKER = new URL('../fixtures/lock-worker.ts', import.meta.url)

const startWorker = () => spawnReadyChild(WORKER)

describeStores('mutex', (fx, kind) => {
  it('G1: admits one holder at a time across 50 contenders, several connections and processes', async () => {
    const { store, prefix } = fx()
    const name = 'exclusive'
    const durationMs = 3000
    if (kind === 'memory') {
      const checker = memoryChecker()
      const result = await contend([createMutex(store, name)], checker, {
        contenders: 50,
        durationMs,
        maxHoldMs: 2,
      })
      expect(result.violations).toBe(0)
      expect(result.maxInside).toBe(1)
      expect(Math.min(...result.perContender)).toBeGreaterThan(0)
      expect(checker.fences).toEqual([...checker.fences].sort((a, b) => a - b))
      expect(new Set(checker.fences).size).toBe(checker.fences.length)
      return
    }
    const checkerKey = `${prefix}:checker`
    const workers = await Promise.all([startWorker(), startWorker()])
    const request = {
      type: 'contend',
      kind,
      prefix,
      name,
      connections: 2,
      contenders: 20,
      durationMs,
      maxHoldMs: 2,
      checkerKey,
    }
    for (const w of workers) w.send(request)
    // This process: 10 contenders over 1 connection (2 + 2 + 1 = 5 connections, 3 processes, 50 contenders).
    const local = contend(
      [createMutex(store, name, { acquireTimeoutMs: Number.POSITIVE_INFINITY })],
      redisChecker(connectStandalone(), checkerKey),
      {
        contenders: 10,
        durationMs,
        maxHoldMs: 2,
      },
    )
    const results = [
      await local,
      ...(await Promise.all(workers.map((w) => w.waitFor('contended', 60_000)))),
    ] as unknown as {
      violations: number
      maxInside: number
      perContender: number[]
    }[]
    expect(results.map((r) => r.violations)).toEqual([0, 0, 0])
    expect(Math.max(...results.map((r) => r.maxInside))).toBe(1)
    expect(Math.min(...results.flatMap((r) => r.perContender))).toBeGreaterThan(0)
    // Fencing tokens, logged in the order holders entered, strictly increase across processes (G7).
    const fences = (await connectStandalone().lrange(`${checkerKey}:fences`, 0, -1)).map(Number)
    expect(fences.length).toBe(results.reduce((n, r) => n + r.perContender.reduce((a, b) => a + b, 0), 0))
    for (let i = 1; i < fences.length; i++) expect(fences[i]).toBeGreaterThan(fences[i - 1] as number)
  }, 60_000)

  it('G2: lets another process take over within TTL + tolerance after the holder is SIGKILLed', async () => {
    if (kind === 'memory') return // no second process shares a memory store
    const { store, prefix } = fx()
    const child = await startWorker()
    child.send({ type: 'acquire', kind, prefix, name: 'crash', ttlMs: 1000, id: 'victim' })
    await child.waitFor('acquired')
    const mutex = createMutex(store, 'crash', { ttlMs: 1000 })
    expect(await mutex.tryAcquire()).toBeUndefined()
    child.kill('SIGKILL')
    await child.exited
    const killedAt = Date.now()
    const lease = await mutex.acquire({ timeoutMs: 5000 })
    const waited = Date.now() - killedAt
    expect(waited).toBeLessThan(1000 + 400)
    await lease.release()
  })

  it("G3 G4: never lets an expired owner release or renew the next owner's lease, and aborts its signal", async () => {
    const { store } = fx()
    const mutex = createMutex(store, 'expired', { ttlMs: 200, autoRenew: false })
    const first = await mutex.acquire()
    await sleep(300)
    const second = await mutex.acquire({ timeoutMs: 1000 })
    expect(second.fencingToken).toBeGreaterThan(first.fencingToken)
    await expect(first.renew()).rejects.toBeInstanceOf(LeaseLostError)
    expect(first.signal.aborted).toBe(true)
    expect(first.signal.reason).toBeInstanceOf(LeaseLostError)
    expect((first.signal.reason as LeaseLostError).code).toBe('ERR_TOLLGATE_LEASE_LOST')
    await first.release()
    expect(await mutex.tryAcquire()).toBeUndefined() // still held by second
    expect(second.signal.aborted).toBe(false)
    await second.renew()
    await second.release()
    const third = await mutex.tryAcquire()
    expect(third).toBeDefined()
    await third?.release()
  })

  it('G3 G4: renew() after release() rejects with LeaseLostError and changes nothing, for every primitive', async () => {
    const { store } = fx()
    const lock = createReadWriteLock(store, 'renew-released-rw')
    const sides = [
      createMutex(store, 'renew-released'),
      createReentrantMutex(store, 'renew-released-r'),
      createSemaphore(store, 'renew-released-s', { permits: 2 }),
      lock.read,
      lock.write,
    ]
    for (const side of sides) {
      const lease = (await side.tryAcquire())!
      await lease.release()
      const renewing = lease.renew()
      await expect(renewing).rejects.toBeInstanceOf(LeaseLostError)
      await expect(renewing).rejects.toThrow(/released/)
      // Released, not lost: the signal stays quiet, and the permit is not taken back.
      expect(lease.signal.aborted).toBe(false)
      const next = await side.tryAcquire()
      expect(next).toBeDefined()
      await next!.release()
    }
  })

  it('G4: keeps a lease alive past 3 x TTL by auto-renewal', async () => {
    const { store } = fx()
    const mutex = createMutex(store, 'renewed', { ttlMs: 300 })
    const lease = await mutex.acquire()
    const firstExpiry = lease.expiresAt
    await sleep(1000)
    expect(lease.signal.aborted).toBe(false)
    expect(await createMutex(fx().another(), 'renewed').tryAcquire()).toBeUndefined()
    expect(lease.expiresAt).toBeGreaterThan(firstExpiry + 500)
    await lease.release()
  })

  it('G4: aborts the signal, emits tollgate:lost and calls onLost when renewal finds another owner', async () => {
    const { store, client } = fx()
    const lostEvents: LeaseEvent[] = []
    const onEvent = (event: unknown) => lostEvents.push(event as LeaseEvent)
    subscribe('tollgate:lost', onEvent)
    try {
      const onLostCalls: LeaseLostError[] = []
      const mutex = createMutex(store, 'stolen', { ttlMs: 300, onLost: (error) => onLostCalls.push(error) })
      const lease = await mutex.acquire()
      // The gateway and middleware watch for loss without creating the signal (it is made on demand).
      const heard: LeaseLostError[] = []
      whenLost(lease, (error) => heard.push(error))
      // Simulate the lease running out behind our back (e.g. a Redis failover lost it) and a new owner.
      if (client) {
        const space = keySpace(fx().prefix, 'mutex', 'stolen')
        await dropPermitHolders(client, space)
      } else {
        await (store.permits as unknown as { sets: Map<string, unknown> }).sets.clear()
      }
      const thief = await createMutex(fx().another(), 'stolen', { ttlMs: 5000 }).acquire({ timeoutMs: 1000 })
      await eventually(() => lease.signal.aborted, 2000)
      expect(lease.signal.reason).toBeInstanceOf(LeaseLostError)
      expect(heard).toEqual([lease.signal.reason])
      whenLost(lease, (error) => heard.push(error)) // already lost: told at once
      expect(heard).toHaveLength(2)
      expect(onLostCalls).toHaveLength(1)
      expect(lostEvents.some((e) => e.name === 'stolen' && e.kind === 'mutex')).toBe(true)
      await lease.release() // must not free the thief's lease
      expect(await mutex.tryAcquire()).toBeUndefined()
      await thief.release()
    } finally {
      unsubscribe('tollgate:lost', onEvent)
    }
  })

  it('G5: serves waiters in FIFO order', async () => {
    const { store, prefix } = fx()
    const holder = await createMutex(store, 'fifo').acquire()
    const order: string[] = []
    const waits: Promise<void>[] = []
    const stats = () => store.permits.inspect(keySpace(prefix, 'mutex', 'fifo'))
    for (let i = 0; i < 6; i++) {
      const id = `w${i}`
      const mutex = createMutex(i % 2 ? fx().another() : store, 'fifo')
      waits.push(
        mutex.acquire({ timeoutMs: 10_000 }).then(async (lease) => {
          order.push(id)
          await sleep(5)
          await lease.release()
        }),
      )
      await eventually(async () => (await stats()).queued === i + 1)
    }
    await holder.release()
    await Promise.all(waits)
    expect(order).toEqual(['w0', 'w1', 'w2', 'w3', 'w4', 'w5'])
  })

  it('G5: leaves nothing in the queue when a waiter aborts or times out', async () => {
    const { store, prefix, client } = fx()
    const space = keySpace(prefix, 'mutex', 'abort')
    const mutex = createMutex(store, 'abort')
    const holder = await mutex.acquire()
    const controller = new AbortController()
    const aborted = mutex.acquire({ signal: controller.signal })
    const timedOut = mutex.acquire({ timeoutMs: 150 })
    // Both expectations are attached at once: either call may fail while the test awaits something else.
    const timedOutFails = expect(timedOut).rejects.toBeInstanceOf(AcquireTimeoutError)
    const abortedFails = expect(aborted).rejects.toThrow('client went away')
    await eventually(async () => (await store.permits.inspect(space)).queued === 2)
    controller.abort(new Error('client went away'))
    await abortedFails
    await timedOutFails
    await eventually(async () => (await store.permits.inspect(space)).queued === 0, 2000)
    await holder.release()
    if (client) await eventually(async () => (await keysUnder(client, prefix)).length === 0, 2000)
  })

  it('G8: works with hostile names (braces, 10 kB, unicode, CRLF) and keeps each name in one slot', async () => {
    const { store, prefix, client } = fx()
    const names = ['{a}', 'x}{y', '}', '{', `${'n'.repeat(10_240)}`, 'tenant-ü-🚦', 'a\r\nb', '%7B', ' ']
    for (const name of names) {
      const mutex = createMutex(store, name)
      const lease = await mutex.acquire({ timeoutMs: 2000 })
      expect(lease.name).toBe(name)
      expect(await mutex.tryAcquire()).toBeUndefined()
      if (client) {
        const keys = await keysUnder(client, prefix)
        expect(keys.length).toBeGreaterThan(0)
        expect(Math.max(...keys.map((k) => k.length))).toBeLessThan(400)
      }
      await lease.release()
    }
    // '{' and '%7B' are different names: they must not share a lock.
    const a = await createMutex(store, '{').acquire()
    const b = await createMutex(store, '%7B').tryAcquire()
    expect(b).toBeDefined()
    await Promise.all([a.release(), b?.release()])
  })
})

describeStores('reentrant mutex', (fx) => {
  it('G1: re-enters in one async chain (3 deep) and frees only after the third release', async () => {
    const { store } = fx()
    const mutex = createReentrantMutex(store, 're')
    // An explicit owner is a different owner whatever async scope the probe runs in.
    const probe = () => createReentrantMutex(fx().another(), 're', { owner: 'probe' }).tryAcquire()
    await mutex.withLease(async (outer) => {
      await mutex.withLease(async (middle) => {
        await mutex.withLease(async (inner) => {
          expect(new Set([outer.token, middle.token, inner.token]).size).toBe(1)
          expect(inner.fencingToken).toBe(outer.fencingToken)
        })
        expect(await probe()).toBeUndefined() // count 2 left
      })
      expect(await probe()).toBeUndefined() // count 1 left
    })
    const after = await probe()
    expect(after).toBeDefined()
    await after?.release()
  })

  it('G1: excludes two concurrent chains in one process', async () => {
    const { store } = fx()
    const mutex = createReentrantMutex(store, 'chains')
    const checker = memoryChecker()
    let violations = 0
    await Promise.all(
      Array.from({ length: 8 }, () =>
        (async () => {
          for (let i = 0; i < 10; i++) {
            await mutex.withLease(async (lease) => {
              if ((await checker.enter(lease.fencingToken)) > 1) violations++
              await sleep(1)
              await mutex.withLease(async () => {}) // nested re-entry inside the chain
              await checker.leave()
            })
          }
        })(),
      ),
    )
    expect(violations).toBe(0)
  })

  it('G1: counts concurrent acquires of one owner that wait together, and frees only after both release', async () => {
    const { store } = fx()
    const blocker = await createMutex(store, 'together-unused').acquire() // unrelated name: no effect
    const other = await createReentrantMutex(store, 'together', { owner: 'other' }).acquire()
    const mine = createReentrantMutex(fx().another(), 'together', { owner: 'job-1' })
    const both = Promise.all([mine.acquire({ timeoutMs: 5000 }), mine.acquire({ timeoutMs: 5000 })])
    await sleep(100) // both calls are queued behind `other` under the same token
    await other.release()
    const [a, b] = await both
    expect(a.token).toBe(b.token)
    const probe = () => createReentrantMutex(store, 'together', { owner: 'probe' }).tryAcquire()
    await a.release()
    expect(await probe()).toBeUndefined() // b still holds its count
    await b.release()
    const free = await probe()
    expect(free).toBeDefined()
    await Promise.all([free?.release(), blocker.release()])
  })

  it('G1: one name is one lock: a mutex and a reentrant mutex of one name exclude each other, and FIFO spans both', async () => {
    const { store } = fx()
    const plain = createMutex(store, 'shared-name')
    const reentrant = createReentrantMutex(fx().another(), 'shared-name', { owner: 'job-1' })
    const held = await plain.acquire()
    expect(await reentrant.tryAcquire()).toBeUndefined()
    const order: string[] = []
    const waiting = [
      reentrant.acquire({ timeoutMs: 5000 }).then((lease) => (order.push('reentrant'), lease)),
      plain.acquire({ timeoutMs: 5000 }).then((lease) => (order.push('plain'), lease)),
    ]
    const space = keySpace(fx().prefix, 'mutex', 'shared-name')
    await eventually(async () => (await store.permits.inspect(space)).queued === 2)
    await held.release()
    const first = await waiting[0]!
    expect(await plain.tryAcquire()).toBeUndefined()
    const again = await reentrant.acquire({ timeoutMs: 100 }) // the owner re-enters its own hold
    await Promise.all([again.release(), first.release()])
    await (await waiting[1]!).release()
    expect(order).toEqual(['reentrant', 'plain'])
  })

  it('one name is one kind of lock in a process: a semaphore or read/write lock cannot take a mutex’s name', () => {
    const { store } = fx()
    const keep = [createMutex(store, 'taken'), createReentrantMutex(store, 'taken')]
    expect(() => createSemaphore(store, 'taken', { permits: 2 })).toThrow(ConfigError)
    expect(() => createSemaphore(store, 'taken', { permits: 2 })).toThrow(/"taken" is a mutex on this store/)
    expect(() => createReadWriteLock(store, 'taken')).toThrow(/"taken" is a mutex on this store/)
    const rw = createReadWriteLock(store, 'rw-taken')
    expect(() => createMutex(store, 'rw-taken')).toThrow(/"rw-taken" is a read\/write lock on this store/)
    // Another store (another prefix, or another Redis) is another namespace.
    expect(createSemaphore(createMemoryStore({ prefix: 'elsewhere' }), 'taken', { permits: 2 }).name).toBe(
      'taken',
    )
    expect(keep.length + (rw ? 1 : 0)).toBe(3)
  })

  it('G5: re-entry skips the queue: an owner that holds re-enters at once while another owner waits (as documented)', async () => {
    const { store } = fx()
    const owner = createReentrantMutex(store, 'reenter-first', { owner: 'job-1' })
    const other = createReentrantMutex(fx().another(), 'reenter-first', { owner: 'job-2' })
    const first = await owner.acquire()
    let otherIn = false
    const waiting = other.acquire({ timeoutMs: 5000 }).then((lease) => ((otherIn = true), lease))
    const space = keySpace(fx().prefix, 'mutex', 'reenter-first')
    await eventually(async () => (await store.permits.inspect(space)).queued === 1)
    const again = await owner.acquire({ timeoutMs: 200 }) // not behind job-2
    expect(again.fencingToken).toBe(first.fencingToken)
    await first.release()
    await sleep(50)
    expect(otherIn).toBe(false) // the owner's second acquisition still holds
    await again.release()
    await (await waiting).release()
  })

  it('G1: re-enters for an explicit owner across separate calls', async () => {
    const { store } = fx()
    const a = createReentrantMutex(store, 'owned', { owner: 'job-7' })
    const first = await a.acquire()
    const second = await a.acquire({ timeoutMs: 100 })
    expect(second.fencingToken).toBe(first.fencingToken)
    expect(await createReentrantMutex(store, 'owned', { owner: 'job-8' }).tryAcquire()).toBeUndefined()
    await second.release()
    expect(await createReentrantMutex(store, 'owned', { owner: 'job-8' }).tryAcquire()).toBeUndefined()
    await first.release()
    const free = await createReentrantMutex(store, 'owned', { owner: 'job-8' }).tryAcquire()
    expect(free).toBeDefined()
    await free?.release()
  })
})

describeStores(
  'mutex across processes',
  (fx, kind) => {
    it('G5: admits waiters from several processes in the order they queued', async () => {
      const { store, prefix } = fx()
      const space = keySpace(prefix, 'mutex', 'xfifo')
      const orderKey = `${prefix}:order`
      const holder = await createMutex(store, 'xfifo').acquire()
      const workers = await Promise.all([startWorker(), startWorker()])
      const ids = ['p0', 'p1', 'p2', 'p3']
      for (let i = 0; i < ids.length; i++) {
        ;(workers[i % 2] as ChildHandle).send({
          type: 'acquire',
          kind,
          prefix,
          name: 'xfifo',
          id: ids[i],
          orderKey,
        })
        await eventually(async () => (await store.permits.inspect(space)).queued === i + 1)
      }
      await holder.release()
      for (let i = 0; i < ids.length; i++) {
        const worker = workers[i % 2] as ChildHandle
        await worker.waitFor('acquired')
        worker.send({ type: 'release', id: ids[i] })
        await worker.waitFor('released')
      }
      expect(await connectStandalone().lrange(orderKey, 0, -1)).toEqual(ids)
    })
  },
  REDIS_KINDS,
)

describeStores(
  'closed store',
  (fx) => {
    it('G3: fails its waiters instead of leaving them waiting forever', async () => {
      const holder = await createMutex(fx().another(), 'closing').acquire()
      const { store } = fx()
      const waiting = createMutex(store, 'closing').acquire({ timeoutMs: Number.POSITIVE_INFINITY })
      const space = keySpace(fx().prefix, 'mutex', 'closing')
      await eventually(async () => (await fx().another().permits.inspect(space)).queued === 1)
      // The expectation is attached before close(): the waiter may fail while close() still awaits
      // Redis, and a rejection without a handler at that moment is an unhandled rejection.
      const failed = expect(waiting).rejects.toThrow(/closed/)
      await store.close()
      await failed
      await holder.release()
    })
  },
  REDIS_KINDS,
)

describe('mutex options', () => {
  it.each([
    [{ ttlMs: 0 }, 'ttlMs'],
    [{ ttlMs: -5 }, 'ttlMs'],
    [{ ttlMs: Number.NaN }, 'ttlMs'],
    [{ ttlMs: 1.5 }, 'ttlMs'],
    [{ waiterTtlMs: 10 }, 'waiterTtlMs'],
    [{ acquireTimeoutMs: -1 }, 'acquireTimeoutMs'],
    [{ autoRenew: 'yes' }, 'autoRenew'],
  ])('rejects %o with a ConfigError naming %s', async (options, option) => {
    const { createMemoryStore } = await import('../../src/index.js')
    const store = createMemoryStore()
    expect(() => createMutex(store, 'x', options as never)).toThrow(ConfigError)
    expect(() => createMutex(store, 'x', options as never)).toThrow(`"${option}"`)
    await store.close()
  })

  it('rejects an empty name and a missing store', async () => {
    const { createMemoryStore } = await import('../../src/index.js')
    const store = createMemoryStore()
    expect(() => createMutex(store, '')).toThrow('as the second argument')
    expect(() => createMutex(undefined as never, 'x')).toThrow('as the first argument')
    expect(() => createReentrantMutex(store, 'x', { owner: '' })).toThrow('"owner"')
    await store.close()
  })
})
