// Weighted acquire (issue 28 #12): a lease of weight w counts for w permits (Redisson's
// acquire(permits), Bottleneck's weight), on every store. G1 holds for the sum of the weights; the
// queue stays FIFO, so a heavy head is not overtaken by light calls (G5); an expired weighted lease
// gives all its permits back at once (G2); a resent weighted acquire counts once (G12).
import { describe, expect, it } from 'vitest'
import {
  AcquireTimeoutError,
  ConfigError,
  createMemoryStore,
  createSemaphore,
  type Lease,
} from '../../src/index.js'
import { describeStores, eventually, keysUnder, sleep } from '../helpers/contract.js'

describeStores('weighted semaphore', (fx, kind) => {
  it('G1: the weights held never exceed permits: 24 clients of weights 1 to 3 on two stores, an independent counter', async () => {
    const { store, another } = fx()
    const permits = 5
    const stores = [store, another()]
    let inside = 0
    let most = 0
    const worker = async (i: number) => {
      const weight = (i % 3) + 1
      const sem = createSemaphore(stores[i % 2]!, 'g1', { permits })
      for (let round = 0; round < 4; round++) {
        await sem.withLease(
          async () => {
            inside += weight
            most = Math.max(most, inside)
            await sleep(2 + ((i * 7 + round) % 5))
            inside -= weight
          },
          { weight, timeoutMs: 20_000 },
        )
      }
    }
    await Promise.all(Array.from({ length: 24 }, (_, i) => worker(i)))
    expect(most).toBeLessThanOrEqual(permits)
    expect(most).toBeGreaterThanOrEqual(3) // the cap was reached, not merely respected
    expect(await createSemaphore(store, 'g1', { permits }).stats()).toMatchObject({ holders: 0, queued: 0 })
  }, 60_000)

  it('G5: a heavy head is not overtaken by light waiters behind it; it gets in once its weight is free', async () => {
    const { store } = fx()
    const sem = createSemaphore(store, 'fifo', { permits: 3 })
    const held = [await sem.acquire(), await sem.acquire()] // 2 of 3 held: 1 free
    const order: string[] = []
    const heavy = sem.acquire({ weight: 3, timeoutMs: 10_000 }).then((lease) => (order.push('heavy'), lease))
    await eventually(async () => (await sem.stats()).queued === 1)
    const light = sem.acquire({ timeoutMs: 10_000 }).then((lease) => (order.push('light'), lease))
    await eventually(async () => (await sem.stats()).queued === 2)
    // One permit is free, but the light waiter is behind the heavy one: it waits.
    expect(await sem.tryAcquire()).toBeUndefined()
    await sleep(100)
    expect(order).toEqual([])
    await held[0]!.release()
    await sleep(50)
    expect(order).toEqual([]) // 2 free: still not enough for the head
    await held[1]!.release()
    const heavyLease = await heavy
    expect(order).toEqual(['heavy'])
    expect(await sem.stats()).toMatchObject({ holders: 3, queued: 1 })
    await heavyLease.release()
    await (await light).release()
    expect(order).toEqual(['heavy', 'light'])
  })

  it('tryAcquire({ weight }) takes w permits only when w are free; stats count permits; a bad weight is a ConfigError', async () => {
    const { store } = fx()
    const sem = createSemaphore(store, 'try', { permits: 4 })
    const three = await sem.tryAcquire({ weight: 3 })
    expect(three).toBeDefined()
    expect(three!.holders).toBe(3)
    expect(await sem.tryAcquire({ weight: 2 })).toBeUndefined()
    const one = await sem.tryAcquire()
    expect(one?.holders).toBe(4)
    expect(await sem.stats()).toMatchObject({ holders: 4 })
    await three!.release()
    expect(await sem.stats()).toMatchObject({ holders: 1 })
    for (const weight of [0, 5, 1.5, '2']) {
      expect(() => sem.acquire({ weight } as never)).toThrow(ConfigError)
      expect(() => sem.tryAcquire({ weight } as never)).toThrow('"weight"')
    }
    expect(() => sem.tryAcquire({ timeoutMs: 1 } as never)).toThrow('"timeoutMs"')
    await one!.release()
    expect(await sem.stats()).toMatchObject({ holders: 0 })
  })

  it('G2: a weighted lease that is not renewed gives all its permits back when it expires', async () => {
    const { store } = fx()
    const sem = createSemaphore(store, 'expiry', { permits: 3, ttlMs: 300, autoRenew: false })
    const lease = await sem.acquire({ weight: 3 })
    expect(await sem.tryAcquire()).toBeUndefined()
    const waiting = sem.acquire({ weight: 3, timeoutMs: 5000 })
    const next: Lease = await waiting
    expect(next.fencingToken).toBeGreaterThan(lease.fencingToken)
    await lease.release() // expired: frees nothing of the next holder's
    expect(await sem.stats()).toMatchObject({ holders: 3 })
    await next.release()
    expect(await sem.stats()).toMatchObject({ holders: 0, queued: 0 })
  })

  it('a waiter whose weight never fits times out and leaves the queue; the ones behind it go on', async () => {
    const { store } = fx()
    const sem = createSemaphore(store, 'timeout', { permits: 2 })
    const held = await sem.acquire()
    const heavy = sem.acquire({ weight: 2, timeoutMs: 300 })
    await eventually(async () => (await sem.stats()).queued === 1)
    const light = sem.acquire({ timeoutMs: 5000 })
    await expect(heavy).rejects.toBeInstanceOf(AcquireTimeoutError)
    const lightLease = await light // once the heavy head left, the free permit is the light one's
    await Promise.all([held.release(), lightLease.release()])
    if (kind !== 'memory') {
      const { client, prefix } = fx()
      await eventually(async () => (await keysUnder(client!, prefix)).length === 0)
    }
  })
})

describeStores('weighted semaphore, large and batched (review of 9ffb7f3)', (fx) => {
  it('G5: a head of weight 1000 (the most) is admitted once 1000 permits are free, and blocks the light one behind it until then', async () => {
    const { store } = fx()
    const sem = createSemaphore(store, 'big', { permits: 2000 })
    const held = [await sem.acquire({ weight: 1000 }), await sem.acquire()] // 1001 held, 999 free
    const order: string[] = []
    const heavy = sem.acquire({ weight: 1000, timeoutMs: 10_000 }).then((l) => (order.push('heavy'), l))
    await eventually(async () => (await sem.stats()).queued === 1)
    const light = sem.acquire({ timeoutMs: 10_000 }).then((l) => (order.push('light'), l))
    await eventually(async () => (await sem.stats()).queued === 2)
    await held[1]!.release() // 1000 free: the head fits (it never did before the fix: a 1000 cap)
    const heavyLease = await heavy
    expect(order).toEqual(['heavy'])
    await held[0]!.release()
    await (await light).release()
    await heavyLease.release()
    expect(await sem.stats()).toMatchObject({ holders: 0, queued: 0 })
    expect(() => sem.acquire({ weight: 1001 })).toThrow('an integer from 1 to 1000')
  })

  it('G1 G11: 80 concurrent acquires of weight 100, then 80 concurrent releases (batched calls stay within the script limits)', async () => {
    const { store } = fx()
    const sem = createSemaphore(store, 'batched', { permits: 10_000 })
    const leases = await Promise.all(
      Array.from({ length: 80 }, () => sem.acquire({ weight: 100, timeoutMs: 5000 })),
    )
    expect(await sem.stats()).toMatchObject({ holders: 8000 })
    await Promise.all(leases.map((lease) => lease.release()))
    expect(await sem.stats()).toMatchObject({ holders: 0, queued: 0 })
  })

  it('G11: tryAcquires merged into one call are each on their own: a light one after a heavy refused one gets in', async () => {
    const { store } = fx()
    const sem = createSemaphore(store, 'tries', { permits: 3 })
    const held = await sem.acquire()
    const tries = await Promise.all([
      sem.tryAcquire({ weight: 3 }),
      sem.tryAcquire({ weight: 3 }),
      sem.tryAcquire(),
    ])
    expect(tries.map((lease) => lease !== undefined)).toEqual([false, false, true])
    await Promise.all([held.release(), tries[2]!.release()])
  })

  it('the weight is read once from the options (a getter cannot change it after the check)', async () => {
    const { store } = fx()
    const sem = createSemaphore(store, 'getter', { permits: 2 })
    let reads = 0
    const options = {
      get weight() {
        return reads++ === 0 ? 1 : -4
      },
    }
    const lease = await sem.acquire(options)
    expect(lease.token).not.toContain('*')
    expect(await sem.stats()).toMatchObject({ holders: 1 })
    await lease.release()
  })
})

describe('weighted semaphore: an unweighted acquire is unchanged', () => {
  it('weight 1 is a plain token (no marker), the same path as before', async () => {
    const store = createMemoryStore()
    const sem = createSemaphore(store, 'plain', { permits: 2 })
    const lease = await sem.acquire({ weight: 1 })
    expect(lease.token).not.toContain('*')
    await lease.release()
    const both = await sem.acquire({ weight: 2 })
    expect(both.token).toMatch(/\*2$/)
    await both.release()
    await store.close()
  })
})
