// A semaphore with `overload` on the real stores (issue 38, design 6.2): priority classes are served
// strictly, flows fairly, a capped flow waits while others use the free permits, and a fleet-wide
// `maxQueued` sheds the lowest class once. Two stores on separate connections stand for two
// processes. Needs the stores' fair paths (lua/lib/fair.lua and src/core/memory/fair-queue.ts).
import { expect, it } from 'vitest'
import { createSemaphore, type Lease, type Semaphore, ShedError, type Store } from '../../src/index.js'
import { describeStores, eventually } from '../helpers/contract.js'

const queued = (sem: Semaphore, n: number) => eventually(async () => (await sem.stats()).queued === n)

/** `promise`'s outcome pushed to `order` under `label` when it settles. */
function track(order: string[], label: string, promise: Promise<Lease>): Promise<Lease> {
  return promise.then(
    (lease) => (order.push(label), lease),
    (error: unknown) => {
      order.push(`${label}:${error instanceof ShedError ? error.reason : String(error)}`)
      throw error
    },
  )
}

describeStores('fair semaphore', (fx) => {
  const make = (store: Store, overload = {}, permits = 1) =>
    createSemaphore(store, 'api', { permits, waiterTtlMs: 3000, overload })

  it('a critical request is never left waiting behind sheddable ones, whoever queued first', async () => {
    const { store, another } = fx()
    const a = make(store)
    const b = make(another())
    const held = await a.acquire()
    const order: string[] = []
    const sheddable = [1, 2, 3].map((i) =>
      track(order, `s${i}`, a.acquire({ priority: 'sheddable', timeoutMs: 10_000 })),
    )
    await queued(a, 3)
    const critical = track(order, 'c', b.acquire({ priority: 'critical', timeoutMs: 10_000 }))
    await queued(a, 4)
    expect(await a.stats()).toMatchObject({
      classes: { sheddable: { waiting: 3 }, critical: { waiting: 1 } },
    })
    await held.release()
    await (await critical).release()
    for (const lease of sheddable) await (await lease).release()
    expect(order).toEqual(['c', 's1', 's2', 's3'])
  })

  it('eviction: past maxQueued a critical evicts the newest sheddable, once; the arrival of an equal class is refused', async () => {
    const { store, another } = fx()
    const a = make(store, { maxQueued: 2 })
    const b = make(another(), { maxQueued: 2 })
    const held = await a.acquire()
    const order: string[] = []
    const s1 = track(order, 's1', a.acquire({ priority: 'sheddable', timeoutMs: 10_000 }))
    await queued(a, 1)
    const s2 = track(order, 's2', a.acquire({ priority: 'sheddable', timeoutMs: 10_000 }))
    await queued(a, 2)
    const c = track(order, 'c', b.acquire({ priority: 'critical', timeoutMs: 10_000 }))
    const shed = await s2.catch((error: unknown) => error)
    expect(shed).toBeInstanceOf(ShedError)
    expect(shed).toMatchObject({ reason: 'evicted' })
    // The queue is full of classes at or above a sheddable's: refused at once, nobody evicted.
    const refused = await b.acquire({ priority: 'sheddable', timeoutMs: 10_000 }).catch((e: unknown) => e)
    expect(refused).toMatchObject({ reason: 'queue-full' })
    expect(await a.stats()).toMatchObject({ queued: 2, evicted: { sheddable: 1 } })
    await held.release()
    await (await c).release()
    await (await s1).release()
    expect(order).toEqual(['s2:evicted', 'c', 's1'])
    expect(await a.stats()).toMatchObject({ holders: 0, queued: 0 })
  })

  it('a quiet flow is served within its share while a noisy flow floods', async () => {
    const { store } = fx()
    const sem = make(store)
    const held = await sem.acquire()
    const order: string[] = []
    const noisy = Array.from({ length: 6 }, (_, i) =>
      track(order, `n${i}`, sem.acquire({ flow: 'noisy', timeoutMs: 10_000 })),
    )
    await queued(sem, 6)
    const quiet = track(order, 'q', sem.acquire({ flow: 'quiet', timeoutMs: 10_000 }))
    await queued(sem, 7)
    await held.release()
    // Each lease goes back as soon as it is granted, so the next one in the queue's order gets in.
    await Promise.all([...noisy, quiet].map((lease) => lease.then((l) => l.release())))
    // SFQ: the quiet flow starts at the class's virtual time, behind at most one noisy request.
    expect(order.indexOf('q')).toBeLessThanOrEqual(1)
    expect(order.filter((label) => label.startsWith('n'))).toEqual(['n0', 'n1', 'n2', 'n3', 'n4', 'n5'])
  })

  it('flowMax: a capped flow waits at its cap while other flows use the free permits', async () => {
    const { store } = fx()
    const sem = make(store, { flowMax: { free: 1 } }, 3)
    const first = await sem.acquire({ flow: 'free' })
    const second = sem.acquire({ flow: 'free', timeoutMs: 10_000 })
    await queued(sem, 1)
    const paid = await sem.tryAcquire({ flow: 'paid' })
    expect(paid).toBeDefined() // work-conserving: the cap holds back only its own flow
    const free = await sem.flow('free')
    expect(free.held).toBe(1)
    expect(free.waiting + free.parked).toBeGreaterThanOrEqual(1) // queued, or parked at its cap
    await first.release()
    await (await second).release()
    await paid!.release()
    expect(await sem.flow('free')).toEqual({ waiting: 0, held: 0, parked: 0 })
  })
})
