// Calls made in one event-loop turn: the Redis store sends the acquires (and the releases) of one name
// as one script call. Whatever it batches, the result must be the one of separate calls in call order,
// and the memory store must agree.
import type { Redis } from 'ioredis'
import { expect, it } from 'vitest'
import { keySpace } from '../../src/core/keys.js'
import type { AcquireRequest } from '../../src/core/protocol/store.js'
import {
  createMutex,
  createReadWriteLock,
  createReentrantMutex,
  createRedisStore,
  createSemaphore,
  type Lease,
} from '../../src/index.js'
import { describeStores, eventually, sleep } from '../helpers/contract.js'
import { connectStandalone } from '../helpers/redis.js'

const range = (n: number) => Array.from({ length: n }, (_, i) => i)

describeStores('calls in one event-loop turn', (fx) => {
  it('G1 G7: 40 tryAcquires on 7 permits: exactly the first 7 callers win, fences rise in call order', async () => {
    const { store } = fx()
    const sem = createSemaphore(store, 'burst', { permits: 7 })
    const leases = await Promise.all(range(40).map(() => sem.tryAcquire()))
    const won = leases.flatMap((lease, i) => (lease ? [i] : []))
    expect(won).toEqual(range(7))
    const fences = leases.flatMap((lease) => (lease ? [lease.fencingToken] : []))
    for (let i = 1; i < fences.length; i++) expect(fences[i]).toBeGreaterThan(fences[i - 1]!)
    expect((await sem.stats()).holders).toBe(7)

    // Released together, every permit is back: 7 new tryAcquires in one turn all win.
    await Promise.all(leases.map((lease) => lease?.release()))
    expect((await sem.stats()).holders).toBe(0)
    const again = await Promise.all(range(8).map(() => sem.tryAcquire()))
    expect(again.map((lease) => lease !== undefined)).toEqual([...range(7).map(() => true), false])
    await Promise.all(again.map((lease) => lease?.release()))
  })

  it('G5: 30 acquires on 3 permits queue in call order; releases in one turn hand every permit on', async () => {
    const { store } = fx()
    const sem = createSemaphore(store, 'fifo', { permits: 3 })
    const order: number[] = []
    const held: Lease[] = []
    let inside = 0
    let maxInside = 0
    const all = range(30).map((i) =>
      sem.acquire({ timeoutMs: 20_000 }).then((lease) => {
        order.push(i)
        inside++
        maxInside = Math.max(maxInside, inside)
        held.push(lease)
      }),
    )
    let released = 0
    while (released < 30) {
      // Wait for the next three grants (or the last ones), then give them back in one turn.
      await eventually(() => held.length === Math.min(3, 30 - released))
      const batch = held.splice(0)
      inside -= batch.length
      released += batch.length
      await Promise.all(batch.map((lease) => lease.release()))
    }
    await Promise.all(all)
    expect(order).toEqual(range(30))
    expect(maxInside).toBe(3)
    expect(await sem.stats()).toMatchObject({ holders: 0, queued: 0 })
  })

  it('G3: a token released twice in one turn is freed once', async () => {
    const { store, prefix } = fx()
    const space = keySpace(prefix, 'sem', 'twice')
    const request = (token: string): AcquireRequest => ({
      token,
      ttlMs: 10_000,
      permits: 2,
      enqueue: false,
      waiterTtlMs: 5_000,
    })
    const got = await Promise.all([
      store.permits.acquire(space, request('a')),
      store.permits.acquire(space, request('b')),
    ])
    expect(got.map((reply) => reply.granted)).toEqual([true, true])
    const results = await Promise.all([
      store.permits.release(space, 'a', 2),
      store.permits.release(space, 'a', 2),
      store.permits.release(space, 'b', 2),
      store.permits.release(space, 'a', 2),
    ])
    expect(results).toEqual(['freed', 'none', 'freed', 'none'])
    expect((await store.permits.inspect(space)).holders).toBe(0)
  })

  it('G1 G3: calls of one name keep their call order across kinds (acquire, tryAcquire, release, renew)', async () => {
    const { store, prefix } = fx()
    const request = (token: string, permits: number, enqueue: boolean): AcquireRequest => ({
      token,
      ttlMs: 10_000,
      permits,
      enqueue,
      waiterTtlMs: 5_000,
    })
    // A later tryAcquire never beats an earlier queued acquire.
    const one = keySpace(prefix, 'sem', 'order-1')
    const first = await Promise.all([
      store.permits.acquire(one, request('a1', 2, true)),
      store.permits.acquire(one, request('a2', 2, true)),
      store.permits.acquire(one, request('t', 2, false)),
    ])
    expect(first.map((reply) => reply.granted)).toEqual([true, true, false])

    // A tryAcquire after a release finds the freed permit, also when a batch of tryAcquires opened
    // before the release.
    const two = keySpace(prefix, 'sem', 'order-2')
    expect((await store.permits.acquire(two, request('x', 1, false))).granted).toBe(true)
    const second = await Promise.all([
      store.permits.acquire(two, request('t1', 1, false)),
      store.permits.acquire(two, request('t2', 1, false)),
      store.permits.release(two, 'ghost', 1),
      store.permits.release(two, 'x', 1),
      store.permits.acquire(two, request('t3', 1, false)),
    ])
    expect(second.map((reply) => (typeof reply === 'string' ? reply : reply.granted))).toEqual([
      false,
      false,
      'none',
      'freed',
      true,
    ])

    // A renew after a release of the same token, in one turn, finds it gone.
    const [, released, renewed] = await Promise.all([
      store.permits.release(two, 'ghost', 1),
      store.permits.release(two, 't3', 1),
      store.permits.renew(two, 10_000, [{ token: 't3' }]),
    ])
    expect(released).toBe('freed')
    expect(renewed.expiresAt).toEqual([0])
    await store.permits.release(one, 'a1', 2)
    await store.permits.release(one, 'a2', 2)
  })

  it('G11: an un-awaited lease.release() then tryAcquire() in the same turn finds the permit free, for every primitive', async () => {
    const { store } = fx()
    const lock = createReadWriteLock(store, 'order-rw')
    const cases = [
      { label: 'mutex', side: createMutex(store, 'order-mutex') },
      { label: 'semaphore', side: createSemaphore(store, 'order-sem', { permits: 1 }) },
      { label: 'reentrant mutex', side: createReentrantMutex(store, 'order-rmutex') },
      { label: 'write lock', side: lock.write },
      // A reader is kept out by a writer: the writer's release and the reader's try share the turn.
      { label: 'read lock', side: lock.read, holder: lock.write },
    ]
    for (const { label, side, holder = side } of cases) {
      for (let round = 0; round < 5; round++) {
        const held = await holder.tryAcquire()
        expect(held, `${label}: the holder, round ${round}`).toBeDefined()
        const released = held!.release() // not awaited: the next call is made in the same turn
        const next = side.tryAcquire()
        await released
        const lease = await next
        expect(lease, `${label}: the try after the release, round ${round}`).toBeDefined()
        await lease!.release()
      }
    }
  })

  it('G2: a burst finds the permits of many expired holders (more than one purge would drop)', async () => {
    const { store, prefix } = fx()
    const space = keySpace(prefix, 'sem', 'expired')
    const request = (token: string, ttlMs: number): AcquireRequest => ({
      token,
      ttlMs,
      permits: 301,
      enqueue: false,
      waiterTtlMs: 5_000,
    })
    // One long lease keeps the holder set (and its 300 expired entries) alive.
    expect((await store.permits.acquire(space, request('keep', 10_000))).granted).toBe(true)
    const short = await Promise.all(
      range(300).map((i) => store.permits.acquire(space, request(`old${i}`, 100))),
    )
    expect(short.every((reply) => reply.granted)).toBe(true)
    await sleep(400) // well past the 100 ms leases, on any clock
    const burst = await Promise.all(
      range(250).map((i) => store.permits.acquire(space, request(`new${i}`, 10_000))),
    )
    expect(burst.filter((reply) => reply.granted)).toHaveLength(250)
    expect((await store.permits.inspect(space)).holders).toBe(251)
    await Promise.all(
      ['keep', ...range(250).map((i) => `new${i}`)].map((t) => store.permits.release(space, t, 301)),
    )
  })

  it('G1: reentrant acquires and releases of one owner in one turn count every entry', async () => {
    const { store, prefix } = fx()
    const mutex = createReentrantMutex(store, 'owned', { owner: 'job-7' })
    const stranger = createReentrantMutex(store, 'owned', { owner: 'job-8' })
    const neighbour = createSemaphore(store, 'owned-next-door', { permits: 1 })
    const [a, b, c, n] = await Promise.all([
      mutex.acquire(),
      mutex.acquire(),
      mutex.acquire(),
      neighbour.tryAcquire(),
    ])
    expect(new Set([a.fencingToken, b.fencingToken, c.fencingToken]).size).toBe(1)
    expect(n).toBeDefined() // another name is another lock
    await Promise.all([a.release(), b.release(), n?.release()])
    expect(await stranger.tryAcquire()).toBeUndefined() // one entry is still held
    await c.release()
    const lease = await stranger.tryAcquire()
    expect(lease).toBeDefined()
    await lease?.release()
    expect((await store.permits.inspect(keySpace(prefix, 'mutex', 'owned'))).holders).toBe(0)
  })

  it('G1: acquires of different names in one turn each get their own permit', async () => {
    const { store } = fx()
    const sems = range(20).map((i) => createSemaphore(store, `n${i % 10}`, { permits: 1 }))
    const leases = await Promise.all(sems.map((sem) => sem.tryAcquire()))
    expect(leases.map((lease) => lease !== undefined)).toEqual(range(20).map((i) => i < 10))
    await Promise.all(leases.map((lease) => lease?.release()))
  })
})

/** Counts the writes (write and writev) of a connection's socket from count() on, until restore(). */
function socketWrites(client: Redis) {
  type Method = (this: unknown, ...args: unknown[]) => unknown
  const socket = client.stream as unknown as { _write: Method; _writev: Method }
  const write = socket._write
  const writev = socket._writev
  const counter = {
    writes: 0,
    count() {
      socket._write = function (this: unknown, ...args: unknown[]) {
        counter.writes++
        return write.apply(this, args)
      }
      socket._writev = function (this: unknown, ...args: unknown[]) {
        counter.writes++
        return writev.apply(this, args)
      }
    },
    restore() {
      socket._write = write
      socket._writev = writev
    },
  }
  return counter
}

it("one turn's batches of several names leave the Redis store in one socket write (the socket is corked around them)", async () => {
  const client = connectStandalone()
  await client.ping()
  const store = createRedisStore(client, { prefix: `cork-${process.pid}` })
  const socket = socketWrites(client)
  try {
    const a = createSemaphore(store, 'cork-a', { permits: 5 })
    const b = createSemaphore(store, 'cork-b', { permits: 5 })
    await Promise.all([a.stats(), b.stats()]) // scripts loaded, connection warm
    socket.count()
    // The first call of each name goes straight (coalescer.ts: nothing of its name in flight): the
    // first is written now, the second, made while the first is on the way, is held until the
    // microtasks are done (holdWrite()). The other four of each name wait for the end of the turn,
    // where they leave as two script calls: one write, not two.
    const leases = [...range(5).map(() => a.tryAcquire()), ...range(5).map(() => b.tryAcquire())]
    expect(socket.writes).toBe(1)
    await Promise.resolve()
    const straight = socket.writes
    expect(straight).toBe(2)
    const got = await Promise.all(leases)
    expect(socket.writes - straight).toBe(1)
    expect(got.every((lease) => lease !== undefined)).toBe(true)
    await Promise.all(got.map((lease) => lease?.release()))
  } finally {
    socket.restore()
    await store.close()
  }
})

it('calls of many names sent straight while others are on the way leave in a few socket writes, not one each', async () => {
  const client = connectStandalone()
  await client.ping()
  const store = createRedisStore(client, { prefix: `hold-${process.pid}` })
  const socket = socketWrites(client)
  try {
    const names = range(20).map((i) => createSemaphore(store, `hold-${i}`, { permits: 1 }))
    await Promise.all(names.map((sem) => sem.stats())) // scripts loaded, connection warm
    socket.count()
    // 20 names, one call each: every call goes straight (nothing of its name in flight). The first
    // is written at once; the 19 made while it is on the way are held, and leave in one write per
    // 16 calls, the rest when the microtasks are done: 3 writes, where each call was one.
    const leases = names.map((sem) => sem.tryAcquire())
    const got = await Promise.all(leases)
    expect(socket.writes).toBe(3)
    expect(got.every((lease) => lease !== undefined)).toBe(true)
    await Promise.all(got.map((lease) => lease?.release()))
    // In the order they were made, whatever was held: each name's release found its own permit.
    expect((await Promise.all(names.map((sem) => sem.stats()))).map((s) => s.holders)).toEqual(
      range(20).map(() => 0),
    )
  } finally {
    socket.restore()
    await store.close()
  }
})
