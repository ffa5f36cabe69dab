// The memory store's synchronous path (the gateway's uncontended hot path): a permit taken and given
// back without a promise, with the same rules as the asynchronous one: never ahead of a waiter, a
// release hands the permit to the next waiter, and a store that cannot answer synchronously (Redis)
// says so instead of guessing.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createMemoryStore, createRedisStore, createSemaphore, type Store } from '../../src/index.js'
import { acquireNow } from '../../src/primitives/semaphore.js'
import { PermitLease } from '../../src/core/client/lease.js'
import { renewals } from '../../src/core/client/renewal.js'
import { semaphoreAdmission } from '../../src/admission/buckets.js'
import { connectStandalone } from '../helpers/redis.js'

describe('synchronous permits on the memory store', () => {
  it('takes a free permit without a promise, and never ahead of a waiter', async () => {
    const store = createMemoryStore()
    const sem = createSemaphore(store, 'sync-fifo', { permits: 1 })
    const first = acquireNow(sem)
    expect(first).toBeInstanceOf(PermitLease)
    expect(acquireNow(sem)).toBeUndefined() // none free
    const waiting = sem.acquire({ timeoutMs: 5000 })
    await until(async () => (await sem.stats()).queued === 1)
    // The holder gives its permit back synchronously: it goes to the waiter, not to a newcomer.
    expect((first as PermitLease).releaseNow()).toBe(true)
    expect(acquireNow(sem)).toBeUndefined()
    const second = await waiting
    expect((await sem.stats()).holders).toBe(1)
    await second.release()
    expect((await sem.stats()).holders).toBe(0)
    const third = acquireNow(sem)
    expect(third).toBeDefined()
    // Released once: the second release is a no-op, and release() after releaseNow() resolves.
    expect((third as PermitLease).releaseNow()).toBe(true)
    expect((third as PermitLease).releaseNow()).toBe(false)
    await third?.release()
    expect((await sem.stats()).holders).toBe(0)
    await store.close()
  })

  it('counts exactly under many concurrent callers mixing both paths', async () => {
    const store = createMemoryStore()
    const sem = createSemaphore(store, 'sync-mixed', { permits: 3 })
    let holding = 0
    let most = 0
    await Promise.all(
      Array.from({ length: 60 }, async (_, i) => {
        const lease =
          (i % 2 === 0 ? acquireNow(sem) : undefined) ?? (await sem.acquire({ timeoutMs: 10_000 }))
        holding++
        most = Math.max(most, holding)
        await new Promise((resolve) => setTimeout(resolve, 1))
        holding--
        if (i % 3 === 0 && lease instanceof PermitLease && lease.releaseNow()) return
        await lease.release()
      }),
    )
    expect(most).toBe(3)
    expect((await sem.stats()).holders).toBe(0)
    await store.close()
  })

  it('an admission releases a memory lease at once (nothing pending), and admits without a promise', async () => {
    const store = createMemoryStore()
    const admission = semaphoreAdmission<object>({ store, permits: 2, name: 'sync-admission' })
    const bucket = admission.bucketOf({})
    const result = admission.admitNow(bucket)
    expect(result?.outcome).toBe('admitted')
    if (result?.outcome !== 'admitted') throw new Error('not admitted')
    expect(result.left).toBe(1)
    expect(admission.counters.inFlight).toBe(1)
    expect(admission.release(result.info)).toBeUndefined()
    expect(admission.counters.inFlight).toBe(0)
    expect((await admission.semaphoreOf!('*').stats()).holders).toBe(0)
    await store.close()
  })
})

describe('a store without a synchronous path (Redis)', () => {
  let store: Store
  beforeAll(() => {
    store = createRedisStore(connectStandalone(), { prefix: `sync-${process.pid}` })
  })
  afterAll(() => store.close())

  it('answers nothing synchronously, and the asynchronous path works as before', async () => {
    const sem = createSemaphore(store, 'sync-redis', { permits: 1 })
    expect(acquireNow(sem)).toBeUndefined()
    const lease = await sem.acquire()
    const renewing = renewals.size
    expect(lease instanceof PermitLease && lease.releaseNow()).toBe(false)
    // A "not now" changes nothing: the lease is still renewed and still ours to release.
    expect(renewals.size).toBe(renewing)
    expect((lease as PermitLease).active).toBe(true)
    expect((await sem.stats()).holders).toBe(1)
    await lease.release()
    expect((await sem.stats()).holders).toBe(0)
  })
})

async function until(check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 5000
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met within 5 s')
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}
