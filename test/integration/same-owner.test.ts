// One owner, several calls: fixed owners (a job id as `owner`), re-entry, grants that reach a
// process twice, and waiters that freeze. Each case is a finding of the core-safety review; the title
// names the guarantee it protects.
import { afterEach, expect, it } from 'vitest'
import {
  AcquireTimeoutError,
  createReadWriteLock,
  createReentrantMutex,
  createSemaphore,
  type Lease,
  type Store,
} from '../../src/index.js'
import { describeStores, sleep } from '../helpers/contract.js'
import { type ProxiedStore, proxiedStore } from '../helpers/proxied.js'
import { monoNow } from '../../src/core/clock.js'
import { keySpace } from '../../src/core/keys.js'

/** Freeze this process's event loop until the local monotonic clock reaches `at` (a stand-in for a GC
 * pause or SIGSTOP): timers and I/O callbacks wait, while calls started right after it go out first. */
function blockUntil(at: number): void {
  while (monoNow() < at) {
    // busy: nothing else runs
  }
}

/** Local monotonic ms at which the lease counts as run out (its deadline, G4). */
function localExpiry(lease: Lease): number {
  return (lease as unknown as { localDeadline: number }).localDeadline
}

const proxied: ProxiedStore[] = []
afterEach(async () => {
  await Promise.all(proxied.splice(0).map((p) => p.close()))
})

describeStores('one owner, several calls', (fx, kind) => {
  /** The store that owner O uses: on Redis, through a fault proxy that delays pub/sub messages, so a
   * grant that also arrives in a command reply reaches O twice, the pub/sub copy last. */
  async function storeForO(): Promise<Store> {
    if (kind === 'memory') return fx().store
    const p = await proxiedStore(kind as 'standalone' | 'cluster', fx().prefix)
    proxied.push(p)
    p.delay(80, 'subscribe')
    return p.store
  }

  it('G1 G12: a fixed owner never takes a stale copy of an earlier read grant for a later wait (rwlock)', async () => {
    const { store } = fx()
    const oStore = await storeForO()
    const name = 'stale-read'
    const p = createReadWriteLock(store, name, { owner: 'P', ttlMs: 300, autoRenew: false })
    const o = createReadWriteLock(oStore, name, { owner: 'O', ttlMs: 5000 })
    const q = createReadWriteLock(store, name, { owner: 'Q', ttlMs: 5000 })
    await p.write.acquire() // P holds write and dies: its lease runs out, nobody releases it
    // O's read waits and O's own re-check admits it at P's expiry (reply), pub/sub brings a copy.
    const first = await o.read.acquire({ timeoutMs: 3000 })
    await sleep(150) // the delayed pub/sub copy lands
    await first.release()
    const write = await q.write.acquire({ timeoutMs: 2000 })
    // O's next read must wait for Q's write: a stale grant would let it in at once.
    await expect(o.read.acquire({ timeoutMs: 400 })).rejects.toBeInstanceOf(AcquireTimeoutError)
    await write.release()
    const again = await o.read.acquire({ timeoutMs: 2000 })
    expect(again.fencingToken).toBeGreaterThan(write.fencingToken)
    await again.release()
  })

  it('G1 G12: a hand-off in the same process is taken once, even after the fence key expired (reentrant mutex)', async () => {
    const { store } = fx()
    const oStore = await storeForO()
    const name = 'handoff'
    const h = createReentrantMutex(oStore, name, { owner: 'H', ttlMs: 300 })
    const o = createReentrantMutex(oStore, name, { owner: 'O', ttlMs: 300 })
    const q = createReentrantMutex(store, name, { owner: 'Q', ttlMs: 300 })
    const held = await h.acquire()
    await sleep(450) // past H's first lease term: auto-renewed, while the last-fence key expired
    const waiting = o.acquire({ timeoutMs: 3000 })
    await sleep(100)
    await held.release() // hands the mutex to O in this process: the reply, then pub/sub
    const mine = await waiting
    await sleep(150) // the pub/sub copy lands
    await mine.release()
    const other = await q.acquire({ timeoutMs: 2000 })
    await sleep(450) // Q past its first lease term too
    await expect(o.acquire({ timeoutMs: 400 })).rejects.toBeInstanceOf(AcquireTimeoutError)
    await other.release()
  })

  for (const family of ['reentrant mutex', 'rwlock read'] as const) {
    it(`G1: two concurrent acquires by one fixed owner hold two counts (${family})`, async () => {
      const { store } = fx()
      const second = fx().another()
      // Warm the second store's connection, so that its call goes out at once below.
      if (family === 'reentrant mutex') await createReentrantMutex(second, 'warm').tryAcquire()
      else await createReadWriteLock(second, 'warm').read.tryAcquire()
      const name = `count-${family}`
      const make = (s: Store, owner: string, extra: object = {}) => {
        if (family === 'reentrant mutex') return createReentrantMutex(s, name, { owner, ...extra })
        return createReadWriteLock(s, name, { owner, ...extra }).read
      }
      const writer = (s: Store, owner: string, extra: object = {}) =>
        family === 'reentrant mutex'
          ? createReentrantMutex(s, name, { owner, ...extra })
          : createReadWriteLock(s, name, { owner, ...extra }).write
      const holder = await writer(store, 'H', { ttlMs: 300, autoRenew: false }).acquire()
      const first = make(store, 'O').acquire({ timeoutMs: 5000 })
      await sleep(50) // queued
      // The holder's lease runs out without a release. O's second acquire runs its script before
      // O's own wait group can re-check (its timer is due at the expiry, but the loop is frozen).
      blockUntil(localExpiry(holder) + 20)
      const secondCall = make(second, 'O').acquire({ timeoutMs: 5000 })
      const [a, b] = await Promise.all([first, secondCall])
      await a.release()
      // O still holds through b: another owner's writer must not get in.
      expect((await writer(store, 'X').tryAcquire())?.fencingToken).toBeUndefined()
      await b.release()
      const x = await writer(store, 'X').tryAcquire()
      expect(x).toBeDefined()
      await x?.release()
    })
  }

  it('G1: a reentrant tryAcquire while the same owner waits leaves no count behind', async () => {
    const { store } = fx()
    const name = 'try-while-waiting'
    const h = createReentrantMutex(store, name, { owner: 'H' })
    const o = createReentrantMutex(store, name, { owner: 'O' })
    const x = createReentrantMutex(store, name, { owner: 'X' })
    const held = await h.acquire()
    const waiting = o.acquire({ timeoutMs: 3000 })
    await sleep(50)
    expect(await o.tryAcquire()).toBeUndefined()
    await held.release()
    const mine = await waiting
    await mine.release()
    const other = await x.tryAcquire()
    expect(other).toBeDefined()
    await other?.release()
  })

  it('G2 G3: a waiter frozen while the lock was handed to it never gets an expired lease', async () => {
    if (kind !== 'memory') return // Redis: see the SIGSTOP test in fixed-owner.test.ts
    const { store } = fx()
    const name = 'frozen'
    const holder = createSemaphore(store, name, { permits: 1 })
    const waiter = createSemaphore(store, name, { permits: 1, waiterTtlMs: 200 })
    const held = await holder.acquire()
    const waiting = waiter.acquire({ timeoutMs: 5000 })
    await sleep(50)
    await held.release() // hands the permit over with the waiter's short lease (waiterTtlMs)...
    blockUntil(monoNow() + 600) // ...and the process freezes before the grant is delivered
    const lease = await waiting
    expect(localExpiry(lease)).toBeGreaterThan(monoNow())
    expect(lease.signal.aborted).toBe(false)
    expect((await waiter.stats()).holders).toBe(1)
    await lease.release()
  })

  it('G5: each semaphore object of a name heart-beats its waiters with its own waiterTtlMs', async () => {
    const { store, client, prefix } = fx()
    const name = 'two-ttls'
    const holder = await createSemaphore(store, name, { permits: 1 }).acquire()
    const short = createSemaphore(store, name, { permits: 1, waiterTtlMs: 300 })
    const long = createSemaphore(store, name, { permits: 1, waiterTtlMs: 6000 })
    const a = short.acquire({ timeoutMs: 5000 })
    await sleep(30)
    const b = long.acquire({ timeoutMs: 5000 })
    await sleep(700) // several heartbeats of the short one
    const deadlines = await waiterDeadlines(store, client, prefix, name)
    expect(deadlines).toHaveLength(2)
    const [first, second] = deadlines as [number, number]
    expect(first).toBeLessThanOrEqual(300 + 50) // the short waiter's own ttl, not the long one's
    expect(second).toBeGreaterThan(3000)
    await holder.release()
    await (await a).release()
    await (await b).release()
  })

  it('G5 G12: an owner whose wait lapsed (its queue keys expired) waits afresh, in either mode (rwlock)', async () => {
    const { store } = fx()
    const space = keySpace(fx().prefix, 'rw', 'lapsed')
    const request = { token: 'O', ttlMs: 5000, enqueue: true, waiterTtlMs: 200 }
    expect(
      (await store.rwlock.acquire(space, { ...request, token: 'P', op: 'p1', mode: 'write' })).granted,
    ).toBe(true)
    expect(await store.rwlock.acquire(space, { ...request, op: 'o1', mode: 'read' })).toMatchObject({
      position: 0,
    })
    await sleep(400) // no heartbeat: the wait is over, and on Redis its queue keys expired
    // Not refused as "already waiting for the other mode", not joined to a wait that is over.
    expect(await store.rwlock.acquire(space, { ...request, op: 'o2', mode: 'write' })).toMatchObject({
      granted: false,
      position: 0,
    })
    expect(await store.rwlock.release(space, 'O', 'write', 'o2')).toBe('dequeued')
    expect(await store.rwlock.release(space, 'P', 'write', 'p1')).toBe('freed')
  })

  it('G11: expired holders are dropped before a release hands permits on, on every store', async () => {
    const { store } = fx()
    const name = 'expired-before-handoff'
    const semaphore = createSemaphore(store, name, { permits: 2, ttlMs: 5000 })
    const short = await createSemaphore(store, name, { permits: 2, ttlMs: 200, autoRenew: false }).acquire()
    const other = await semaphore.acquire()
    const first = semaphore.acquire({ timeoutMs: 5000 })
    const second = semaphore.acquire({ timeoutMs: 5000 })
    await sleep(50)
    blockUntil(localExpiry(short) + 100) // nobody re-checks while the short lease runs out
    await other.release()
    expect(await semaphore.stats()).toMatchObject({ holders: 2, queued: 0 })
    await (await first).release()
    await (await second).release()
  })

  it('G4: a lease its owner lost is not renewed through a later acquisition of the same owner', async () => {
    const { store } = fx()
    const space = keySpace(fx().prefix, 'mutex', 'renew-own-acquisition')
    const request = { token: 'O', permits: 1, enqueue: true, waiterTtlMs: 5000 }
    expect((await store.permits.acquire(space, { ...request, op: 'o1', ttlMs: 200 })).granted).toBe(true)
    await sleep(300) // o1's lease ran out
    expect((await store.permits.acquire(space, { ...request, token: 'P', ttlMs: 5000 })).granted).toBe(true)
    expect(await store.permits.release(space, 'P', 1)).toBe('freed')
    expect((await store.permits.acquire(space, { ...request, op: 'o3', ttlMs: 5000 })).granted).toBe(true)
    // o1 was lost (P held in between): its renewal must say so, though the owner holds again.
    expect((await store.permits.renew(space, 5000, [{ token: 'O', op: 'o1' }])).expiresAt).toEqual([0])
    expect((await store.permits.renew(space, 5000, [{ token: 'O', op: 'o3' }])).expiresAt[0]).toBeGreaterThan(
      0,
    )
    expect(await store.permits.release(space, 'O', 1, 'o3')).toBe('freed')
  })

  it('G2: a re-check never reports a grant whose lease already ran out', async () => {
    const { store } = fx()
    const space = keySpace(fx().prefix, 'sem', 'recheck-expired')
    const request = { token: 'a', ttlMs: 100, permits: 3, enqueue: true, waiterTtlMs: 1000 }
    // A longer lease keeps the name's keys alive past the short one.
    expect((await store.permits.acquire(space, { ...request, token: 'b', ttlMs: 5000 })).granted).toBe(true)
    expect((await store.permits.acquire(space, request)).granted).toBe(true)
    await sleep(250)
    // Room is left (2 of 3), so nothing purged the expired holder yet.
    const reply = await store.permits.recheck(space, 3, 1000, [{ token: 'a' }])
    expect(reply.states[0]?.state).not.toBe('granted')
    await store.permits.release(space, 'a', 3)
    await store.permits.release(space, 'b', 3)
  })
})

/** ms left of each waiter's heartbeat deadline, in queue order (Redis: ZSCORE W; memory: its twin). */
async function waiterDeadlines(
  store: Store,
  client: unknown,
  prefix: string,
  name: string,
): Promise<number[]> {
  const space = keySpace(prefix, 'sem', name)
  if (client) {
    const redis = client as import('ioredis').Redis
    const tokens = await redis.zrange(space.key('q'), 0, -1)
    const [seconds, micros] = await redis.time()
    const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)
    const scores = await Promise.all(tokens.map((t) => redis.zscore(space.key('w'), t)))
    return scores.map((s) => Number(s) - now)
  }
  const sets = (
    store.permits as unknown as { sets: Map<string, { queue: Map<string, { heartbeat: number }> }> }
  ).sets
  const queue = sets.get(space.base)?.queue ?? new Map()
  return [...queue.values()].map((w) => w.heartbeat - (performance.timeOrigin + performance.now()))
}
