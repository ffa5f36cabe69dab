// G12, exactly-once effects: a script that Redis ran but whose reply was lost is run again by ioredis
// after the reconnect (autoResendUnfulfilledCommands, and Cluster's retry of a closed connection). A
// fault proxy between ioredis and redis-server cuts the connection right after Redis answered, so
// every script of both families runs twice, on standalone and on Cluster. Each test asserts that the
// resent call had the effect of one: counts, queue, holders, and a fence > 0 that increases.
import { afterEach, describe, expect, it } from 'vitest'
import { whenLost } from '../../src/core/client/lease.js'
import { keySpace } from '../../src/core/keys.js'
import {
  createMutex,
  createReadWriteLock,
  createRedisStore,
  createRedlock,
  createReentrantMutex,
  createSemaphore,
  type Lease,
  LeaseLostError,
  type Store,
  StoreUnavailableError,
} from '../../src/index.js'
import { eventually, keysUnder, permitHolders, REDIS_KINDS, sleep, storeFor } from '../helpers/contract.js'
import { startFaultProxy } from '../helpers/fault-proxy.js'
import { NODE_REDIS } from '../helpers/node-redis.js'
import { type ProxiedStore, proxiedStore } from '../helpers/proxied.js'
import { connectIndependent, connectTo, type RedisClient, topology, uniquePrefix } from '../helpers/redis.js'

/** A test of a call resent after the cut. node-redis resends nothing (it fails every call the cut
 * left unanswered), so under TOLLGATE_TEST_CLIENT=node-redis these are left out, and the tests of a
 * lost reply that is not resent run on both kinds instead. */
const resent = it.skipIf(NODE_REDIS)

const opened: { close(): Promise<void> }[] = []
afterEach(async () => {
  await Promise.all(opened.splice(0).map((o) => o.close()))
})

for (const kind of REDIS_KINDS as ('standalone' | 'cluster')[]) {
  describe(`exactly-once effects under resends [${kind}]`, () => {
    /** A proxied store (the one whose replies get dropped) and a direct store on the same prefix. */
    async function setup(options: Parameters<typeof proxiedStore>[2] = {}) {
      const prefix = uniquePrefix().slice(0, -1)
      const proxied: ProxiedStore = await proxiedStore(kind, prefix, options)
      opened.push(proxied)
      const direct = storeFor(kind, prefix)
      opened.push(direct.store)
      return {
        prefix,
        proxied,
        store: proxied.store,
        direct: direct.store,
        client: direct.client as RedisClient,
      }
    }
    /** The first key of a name's scripts (KEYS[1]): in every call of that name, and in no SUBSCRIBE. */
    const keyOf = (prefix: string, family: string, name: string) =>
      keySpace(prefix, family, name).key(family === 'rw' ? 'r' : 'h')

    resent(
      'G12 G7: a resent uncontended mutex acquire gives one lease with a fence > 0, and release frees it',
      async () => {
        const { prefix, proxied, store, direct, client } = await setup()
        const mutex = createMutex(store, 'fast')
        const dropped = proxied.dropReply(keyOf(prefix, 'mutex', 'fast'))
        const lease = await mutex.acquire({ timeoutMs: 5000 })
        await dropped
        expect(lease.fencingToken).toBeGreaterThan(0)
        await lease.release()
        const other = await createMutex(direct, 'fast').tryAcquire()
        expect(other?.fencingToken).toBeGreaterThan(lease.fencingToken)
        await other?.release()
        await eventually(async () => (await keysUnder(client, prefix)).length === 0)
      },
    )

    resent('G12 G5: a resent queued acquire keeps its place in the FIFO queue', async () => {
      const { prefix, proxied, store, direct } = await setup()
      const name = 'queued'
      const holder = await createMutex(direct, name).acquire()
      const order: string[] = []
      const dropped = proxied.dropReply(keyOf(prefix, 'mutex', name))
      const first = createMutex(store, name)
        .acquire({ timeoutMs: 5000 })
        .then((lease) => (order.push('first'), lease))
      await dropped // first's script ran; its reply is lost and ioredis will resend it
      const second = createMutex(direct, name)
        .acquire({ timeoutMs: 5000 })
        .then((lease) => (order.push('second'), lease))
      await sleep(200) // the resend has run
      await holder.release()
      const a = await first
      expect(order).toEqual(['first'])
      expect(a.fencingToken).toBeGreaterThan(holder.fencingToken)
      await a.release()
      const b = await second
      expect(b.fencingToken).toBeGreaterThan(a.fencingToken)
      await b.release()
    })

    it('G12 G1: a batch of semaphore acquires cut mid-pipeline ends with each call counted once', async () => {
      const { prefix, proxied, store, client } = await setup()
      const name = 'batch'
      const semaphore = createSemaphore(store, name, { permits: 3 })
      // The first reply passes, then the connection is cut: the calls behind it ran (or not), and
      // every unanswered one is resent.
      const cut = (proxied.proxies.length === 1 ? proxied.proxies : proxied.proxies).map((p) =>
        p.cutAfterReplies(1),
      )
      const calls = Array.from({ length: 6 }, () => semaphore.acquire({ timeoutMs: 8000 }))
      await Promise.race(cut)
      for (const p of proxied.proxies) p.disarm()
      const settled: Lease[] = []
      for (const call of calls.slice(0, 3)) settled.push(await call)
      await eventually(async () => (await semaphore.stats()).queued === 3)
      expect((await semaphore.stats()).holders).toBe(3)
      for (const lease of settled) await lease.release()
      const rest = await Promise.all(calls.slice(3))
      const fences = [...settled, ...rest].map((l) => l.fencingToken)
      expect(fences.every((f) => f > 0)).toBe(true)
      expect(new Set(fences).size).toBe(6)
      for (const lease of rest) await lease.release()
      await eventually(async () => (await keysUnder(client, prefix)).length === 0)
    })

    resent('G12 G1: a resent reentrant release gives back one count, not two', async () => {
      const { prefix, proxied, store, direct } = await setup()
      const name = 'rrelease'
      const mine = createReentrantMutex(store, name, { owner: 'job-1' })
      const outer = await mine.acquire()
      const inner = await mine.acquire()
      expect(inner.fencingToken).toBe(outer.fencingToken)
      const dropped = proxied.dropReply(keyOf(prefix, 'mutex', name))
      await inner.release()
      await dropped
      // The outer acquisition still holds: another owner must not get in.
      expect((await createReentrantMutex(direct, name, { owner: 'job-2' }).tryAcquire())?.fencingToken).toBe(
        undefined,
      )
      await outer.release()
      const other = await createReentrantMutex(direct, name, { owner: 'job-2' }).tryAcquire()
      expect(other).toBeDefined()
      await other?.release()
    })

    resent(
      'G12: a resent renewal and a resent re-check change nothing but expiry and heartbeat',
      async () => {
        const { prefix, proxied, store, direct, client } = await setup()
        const name = 'renew'
        const lease = await createMutex(store, name, { ttlMs: 5000, autoRenew: false }).acquire()
        const before = lease.expiresAt
        await sleep(20)
        const dropped = proxied.dropReply(keyOf(prefix, 'mutex', name))
        await lease.renew()
        await dropped
        expect(lease.expiresAt).toBeGreaterThan(before)
        // A waiter on the proxied store: its heart-beat re-check loses a reply.
        const waiter = createMutex(store, name, { waiterTtlMs: 300 })
        const waiting = waiter.acquire({ timeoutMs: 5000 })
        await sleep(30)
        await proxied.dropReply(keyOf(prefix, 'mutex', name))
        await lease.release()
        const next = await waiting
        expect(next.fencingToken).toBeGreaterThan(lease.fencingToken)
        expect((await createMutex(direct, name).tryAcquire())?.fencingToken).toBeUndefined()
        await next.release()
        await eventually(async () => (await keysUnder(client, prefix)).length === 0)
      },
    )

    resent('G12: a resent setPermits sets the limit once', async () => {
      const { prefix, proxied, store, direct } = await setup()
      const name = 'limit'
      const semaphore = createSemaphore(store, name, { permits: 1 })
      const held = await semaphore.acquire()
      const waiting = createSemaphore(direct, name, { permits: 1 }).acquire({ timeoutMs: 5000 })
      await sleep(30)
      const dropped = proxied.dropReply(keyOf(prefix, 'sem', name))
      await semaphore.setPermits(2)
      await dropped
      const admitted = await waiting
      const stats = await semaphore.stats()
      expect(stats).toMatchObject({ holders: 2, queued: 0, limit: 2 })
      await admitted.release()
      await held.release()
    })

    resent('G12 G1: a resent write acquire on a free rwlock is one hold: release frees it', async () => {
      const { prefix, proxied, store, direct } = await setup()
      const name = 'rwfree'
      const dropped = proxied.dropReply(keyOf(prefix, 'rw', name))
      const lease = await createReadWriteLock(store, name).write.acquire({ timeoutMs: 5000 })
      await dropped
      expect(lease.fencingToken).toBeGreaterThan(0)
      await lease.release()
      const other = await createReadWriteLock(direct, name).write.tryAcquire()
      expect(other?.fencingToken).toBeGreaterThan(lease.fencingToken)
      await other?.release()
    })

    resent('G12: a resent queued rwlock acquire keeps waiting instead of being refused', async () => {
      const { prefix, proxied, store, direct } = await setup()
      const name = 'rwqueued'
      const writer = await createReadWriteLock(direct, name).write.acquire()
      const dropped = proxied.dropReply(keyOf(prefix, 'rw', name))
      const reading = createReadWriteLock(store, name, { owner: 'reader' }).read.acquire({ timeoutMs: 5000 })
      await dropped
      await sleep(100)
      await writer.release()
      const read = await reading
      expect(read.fencingToken).toBeGreaterThan(writer.fencingToken)
      await read.release()
      const after = await createReadWriteLock(direct, name).write.tryAcquire()
      expect(after).toBeDefined()
      await after?.release()
    })

    resent('G12 G1: a resent reentrant rwlock release gives back one count', async () => {
      const { prefix, proxied, store, direct } = await setup()
      const name = 'rwrelease'
      const lock = createReadWriteLock(store, name, { owner: 'job-1' })
      const outer = await lock.write.acquire()
      const inner = await lock.write.acquire()
      const dropped = proxied.dropReply(keyOf(prefix, 'rw', name))
      await inner.release()
      await dropped
      expect((await createReadWriteLock(direct, name).read.tryAcquire())?.fencingToken).toBeUndefined()
      await outer.release()
      const read = await createReadWriteLock(direct, name).read.tryAcquire()
      expect(read).toBeDefined()
      await read?.release()
    })

    resent('G12: a resent rwlock renewal and re-check change nothing but expiry and heartbeat', async () => {
      const { prefix, proxied, store, direct, client } = await setup()
      const name = 'rwrenew'
      const lease = await createReadWriteLock(store, name, { ttlMs: 5000, autoRenew: false }).write.acquire()
      const before = lease.expiresAt
      await sleep(20)
      const dropped = proxied.dropReply(keyOf(prefix, 'rw', name))
      await lease.renew()
      await dropped
      expect(lease.expiresAt).toBeGreaterThan(before)
      const waiting = createReadWriteLock(store, name, { waiterTtlMs: 300 }).read.acquire({ timeoutMs: 5000 })
      await sleep(30)
      await proxied.dropReply(keyOf(prefix, 'rw', name))
      await lease.release()
      const read = await waiting
      expect(read.fencingToken).toBeGreaterThan(lease.fencingToken)
      expect((await createReadWriteLock(direct, name).write.tryAcquire())?.fencingToken).toBeUndefined()
      await read.release()
      await eventually(async () => (await keysUnder(client, prefix)).length === 0)
    })

    it('G12 G3: a grant whose reply came after commandTimeoutMs is given back when it arrives', async () => {
      const { prefix, proxied, store, direct } = await setup({ commandTimeoutMs: 200 })
      const name = 'late'
      proxied.delay(500, keyOf(prefix, 'mutex', name))
      // The first call on the name marks the connection; its reply (and later ones) come late.
      await expect(createMutex(store, name).acquire({ timeoutMs: 5000 })).rejects.toBeInstanceOf(
        StoreUnavailableError,
      )
      proxied.delay(0)
      await eventually(async () => (await createMutex(direct, name).tryAcquire()) !== undefined, 3000)
    })

    // An acquire whose reply is lost and never resent fails, though Redis ran it: what it took is given
    // back once Redis answers (releases are idempotent). Here the resend fails too: the connection is
    // cut after the script ran, and Redis refuses connections until ioredis gives the call up
    // (maxRetriesPerRequest: 1).
    const resendFails = { client: { maxRetriesPerRequest: 1 } }
    it('G3 G12: an acquire whose reply is lost and whose resend fails is given back once Redis answers', async () => {
      const { prefix, proxied, store, direct } = await setup(resendFails)
      const name = 'unanswered'
      const dropped = proxied.dropReply(keyOf(prefix, 'mutex', name))
      const acquiring = createMutex(store, name).acquire({ timeoutMs: 5000 })
      await dropped
      proxied.refuse()
      await expect(acquiring).rejects.toBeInstanceOf(StoreUnavailableError)
      expect(await createMutex(direct, name).tryAcquire()).toBeUndefined() // Redis ran it: held
      await proxied.heal()
      // Not the default 30 s TTL: free as soon as the give-back reaches Redis.
      await eventually(async () => {
        const lease = await createMutex(direct, name).tryAcquire()
        await lease?.release()
        return lease !== undefined
      }, 5000)
    })

    it('G3 G12: a write acquire whose reply is lost and whose resend fails is given back once Redis answers', async () => {
      const { prefix, proxied, store, direct } = await setup(resendFails)
      const name = 'unanswered-rw'
      const dropped = proxied.dropReply(keyOf(prefix, 'rw', name))
      const acquiring = createReadWriteLock(store, name).write.acquire({ timeoutMs: 5000 })
      await dropped
      proxied.refuse()
      await expect(acquiring).rejects.toBeInstanceOf(StoreUnavailableError)
      await proxied.heal()
      await eventually(async () => {
        const lease = await createReadWriteLock(direct, name).write.tryAcquire()
        await lease?.release()
        return lease !== undefined
      }, 5000)
    })

    if (kind === 'standalone' || NODE_REDIS) {
      // Without resends (autoResendUnfulfilledCommands: false: ioredis Cluster resends a command cut
      // by a closed connection whatever that option says, so with ioredis this runs on standalone
      // only; node-redis never resends).
      it('G3 G12: a queued acquire whose reply is lost and not resent leaves the queue', async () => {
        const { prefix, proxied, store, direct } = await setup({
          client: { autoResendUnfulfilledCommands: false },
        })
        const name = 'unanswered-queued'
        const holder = await createMutex(direct, name).acquire()
        const dropped = proxied.dropReply(keyOf(prefix, 'mutex', name))
        await expect(createMutex(store, name).acquire({ timeoutMs: 5000 })).rejects.toBeInstanceOf(
          StoreUnavailableError,
        )
        await dropped
        await eventually(
          async () => (await direct.permits.inspect(keySpace(prefix, 'mutex', name))).queued === 0,
          3000,
        )
        // The freed permit is not handed to a waiter nobody will ever use.
        await holder.release()
        const next = await createMutex(direct, name).tryAcquire()
        expect(next).toBeDefined()
        await next?.release()
      })
    }

    it('G4: a lease whose release failed still tells its loss listeners when it turns out lost', async () => {
      const { prefix, proxied, store } = await setup({ commandTimeoutMs: 200 })
      const name = 'failed-release'
      const lease = await createMutex(store, name, { autoRenew: false }).acquire()
      const lost: Error[] = []
      whenLost(lease, (error) => lost.push(error))
      proxied.delay(500, keyOf(prefix, 'mutex', name))
      // Redis runs the release; its reply comes after commandTimeoutMs, so the call fails.
      await expect(lease.release()).rejects.toBeInstanceOf(StoreUnavailableError)
      proxied.delay(0)
      await sleep(600)
      // The store no longer holds it: a renewal finds it lost, and the listener hears it (G4).
      await expect(lease.renew()).rejects.toBeInstanceOf(LeaseLostError)
      expect(lost).toHaveLength(1)
      expect(lease.signal.aborted).toBe(true)
    })
  })
}

describe('exactly-once effects under resends [redlock]', () => {
  it('G12 G7: a RedLock acquire and release resent on one node leave that node clean', async () => {
    const prefix = uniquePrefix().slice(0, -1)
    const proxy = await startFaultProxy(topology().independents[0] as never)
    opened.push({ close: () => proxy.stop() })
    const viaProxy = connectTo({ host: proxy.host, port: proxy.port }, { retryStrategy: () => 20 })
    const stores: Store[] = [
      createRedisStore(viaProxy, { prefix }),
      createRedisStore(connectIndependent(1), { prefix }),
      createRedisStore(connectIndependent(2), { prefix }),
    ]
    for (const s of stores) opened.push(s)
    const lock = createRedlock(stores, 'rl', { ttlMs: 5000, perNodeTimeoutMs: 1000 })
    const space = keySpace(prefix, 'redlock', 'rl')
    const key = space.key('h') // every call of the name carries it
    // Every node has the functions and its version checked before the resends: on a fresh server the
    // first call also loads the libraries, and RedLock may then answer from the other two first.
    await (await lock.acquire({ timeoutMs: 5000 })).release()
    const dropped = proxy.dropReply(key)
    const lease = await lock.acquire({ timeoutMs: 5000 })
    await dropped
    expect(lease.fencingToken).toBeGreaterThan(0)
    const node0 = connectIndependent(0)
    expect(await permitHolders(node0, space)).toBe(1)
    const droppedRelease = proxy.dropReply(key)
    await lease.release()
    await droppedRelease
    await eventually(async () => (await keysUnder(node0, prefix)).length === 0)
    const again = await lock.tryAcquire()
    expect(again?.fencingToken).toBeGreaterThan(lease.fencingToken)
    await again?.release()
  })
})
