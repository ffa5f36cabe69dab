// The admission layer of a fair bucket (docs/middleware.md, "Overload"), on real memory-store semaphores: the
// class-aware local maxQueue (an arrival of a higher class sheds this process's newest waiter of the
// lowest class), maxWaitMs per class, the `shed` rejection, and metric labels bounded whatever flows
// the requests claim. The store's own order (priority, fair shares) is the semaphore's, tested with
// it; here a Gate hands each acquire to a plain semaphore, so only what admission decides is tested.
import { Registry } from 'prom-client'
import { describe, expect, it } from 'vitest'
import { AbortFlag } from '../../src/core/abort.js'
import { ShedError } from '../../src/core/errors.js'
import { PRIORITY_CLASSES } from '../../src/core/fair.js'
import { createMemoryStore, createSemaphore } from '../../src/index.js'
import { Admission } from '../../src/admission/admission.js'
import type { AdmitResult, Bucket, Gate } from '../../src/admission/bucket.js'
import { resolveCommon, type SemaphoreMiddlewareOptions } from '../../src/admission/options.js'

const { critical, standard, sheddable } = PRIORITY_CLASSES

/** A request: its id and class (and flow). */
interface Req {
  id: string
  priority: number
  flow?: string
}

/** An admission of one fair bucket over a real semaphore of `permits`; `granted` records every id
 * the semaphore ever gave a permit to (an independent record: outside admission). */
function fairAdmission(options: SemaphoreMiddlewareOptions<Req> & { permits: number }) {
  const store = createMemoryStore()
  const semaphore = createSemaphore(store, `fair-${Math.random()}`, { permits: options.permits })
  const granted: string[] = []
  let holding = 0
  let most = 0
  const gateOf = (req: Req): Gate => ({
    permits: options.permits,
    acquire: async ({ signal, timeoutMs, onQueued }) => {
      const lease = await semaphore.acquire({ signal, timeoutMs, onQueued })
      granted.push(req.id)
      most = Math.max(most, ++holding)
      return lease
    },
    tryAcquire: async () => {
      const lease = await semaphore.tryAcquire()
      if (lease) granted.push(req.id)
      if (lease) most = Math.max(most, ++holding)
      return lease
    },
  })
  // Every release goes through release() below, which counts it.
  released = () => holding--
  const { permits: _, ...common } = options
  const config = resolveCommon({ ...common, store }, 'semaphore')
  const admission = new Admission<Req>(config, (req): Bucket => ({
    key: '*',
    gate: gateOf(req),
    keyed: false,
    weight: 1,
    fair: { priority: req.priority, flow: req.flow },
  }))
  // (Called as buckets.ts does; looked up, so that the test runs against an admission without it.)
  const overloaded = (admission as { overloaded?: (named: Set<string>) => void }).overloaded
  overloaded?.call(admission, new Set(['acme']))
  return { admission, semaphore, granted, most: () => most, store }
}

let released = (): unknown => undefined
const signal = () => new AbortFlag()
const settled = async (promise: Promise<unknown>): Promise<boolean> => {
  let done = false
  void promise.then(() => (done = true))
  await new Promise((resolve) => setTimeout(resolve, 20))
  return done
}
async function until(check: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !check(); i++) await new Promise((resolve) => setTimeout(resolve, 5))
  expect(check()).toBe(true)
}
const release = async (admission: Admission<Req>, result: AdmitResult) => {
  expect(result.outcome).toBe('admitted')
  released()
  if (result.outcome === 'admitted') await admission.release(result.info)
}

describe('a fair bucket’s local queue (maxQueue) is class-aware', () => {
  it('a critical arrival sheds the newest sheddable waiter once; its permit is never granted', async () => {
    const { admission, semaphore, granted, most, store } = fairAdmission({
      permits: 1,
      maxQueue: 2,
      maxWaitMs: 10_000,
    })
    const holder = await admission.admit({ id: 'holder', priority: standard }, signal())
    const older = admission.admit({ id: 'older', priority: sheddable }, signal())
    await until(() => admission.counters.queued === 1)
    const newer = admission.admit({ id: 'newer', priority: sheddable }, signal())
    await until(() => admission.counters.queued === 2)
    // Full: a request of the same class is refused, and evicts nobody.
    const same = await admission.admit({ id: 'same', priority: sheddable }, signal())
    expect(same.outcome === 'rejected' && same.rejection.reason).toBe('queue_full')
    expect(admission.counters.queued).toBe(2)

    const urgent = admission.admit({ id: 'urgent', priority: critical }, signal())
    const shed = await newer
    expect(shed.outcome === 'rejected' && shed.rejection.reason).toBe('shed')
    expect(admission.counters.rejected.shed).toBe(1)
    expect(await settled(older)).toBe(false) // the older sheddable still waits
    await until(() => admission.counters.queued === 2) // older and urgent

    // The store's queue is FIFO here: older, then urgent; each released in turn.
    await release(admission, holder)
    await release(admission, await older)
    await release(admission, await urgent)
    expect(granted).toEqual(['holder', 'older', 'urgent'])
    expect(granted).not.toContain('newer')
    expect(most()).toBe(1)
    expect(admission.counters.rejected.shed).toBe(1)
    expect(admission.overload?.rejected.get('shed')?.[sheddable]).toBe(1)
    await until(() => admission.counters.queued === 0)
    const stats = await semaphore.stats()
    expect([stats.holders, stats.queued]).toEqual([0, 0])
    await store.close()
  })

  it('answers \'shed\' with 503, Retry-After and reason "shed" in the body', async () => {
    const { admission, store } = fairAdmission({ permits: 1, maxQueue: 1, maxWaitMs: 3000 })
    const holder = await admission.admit({ id: 'holder', priority: standard }, signal())
    const low = admission.admit({ id: 'low', priority: sheddable }, signal())
    await until(() => admission.counters.queued === 1)
    const high = admission.admit({ id: 'high', priority: critical }, signal())
    const shed = await low
    if (shed.outcome !== 'rejected') throw new Error('expected a rejection')
    const answer = admission.rejectionResponse(shed.rejection)
    expect(answer.status).toBe(503)
    expect(answer.headers['Retry-After']).toBe('3')
    expect(JSON.parse(answer.body)).toMatchObject({ reason: 'shed', retryAfterSeconds: 3 })
    await release(admission, holder)
    await release(admission, await high)
    await store.close()
  })
})

describe('maxWaitMs per class', () => {
  it('times out a sheddable waiter at its own wait while a critical one keeps waiting', async () => {
    const { admission, store } = fairAdmission({
      permits: 1,
      maxWaitMs: { critical: 10_000, sheddable: 50 },
    })
    const holder = await admission.admit({ id: 'holder', priority: standard }, signal())
    const low = admission.admit({ id: 'low', priority: sheddable }, signal())
    const high = admission.admit({ id: 'high', priority: critical }, signal())
    const timedOut = await low
    expect(timedOut.outcome === 'rejected' && timedOut.rejection.reason).toBe('timeout')
    expect(timedOut.outcome === 'rejected' && timedOut.rejection.retryAfterS).toBe(1)
    expect(await settled(high)).toBe(false)
    await release(admission, holder)
    await release(admission, await high)
    await store.close()
  })
})

describe("a fair gate's ShedError", () => {
  it("maps 'evicted' to shed and 'queue-full' to queue_full", async () => {
    const reasons: string[] = []
    for (const reason of ['evicted', 'queue-full'] as const) {
      const gate: Gate = {
        permits: 1,
        acquire: () => Promise.reject(new ShedError('*', reason)),
        tryAcquire: () => Promise.resolve(undefined),
      }
      const config = resolveCommon({ store: createMemoryStore(), name: 'shed-map' }, 'semaphore')
      const admission = new Admission<Req>(config, (req) => ({
        key: '*',
        gate,
        keyed: false,
        weight: 1,
        fair: { priority: req.priority, flow: undefined },
      }))
      const result = await admission.admit({ id: 'r', priority: sheddable }, signal())
      reasons.push(result.outcome === 'rejected' ? result.rejection.reason : result.outcome)
    }
    expect(reasons).toEqual(['shed', 'queue_full'])
  })
})

describe('per class and per flow metrics', () => {
  it('label flows the config names, every other flow "other": hostile flows add no series', async () => {
    const registry = new Registry()
    const { admission, store } = fairAdmission({
      permits: 1,
      maxWaitMs: 0,
      name: 'bounded',
      metrics: { registry },
    })
    const holder = await admission.admit({ id: 'h', priority: critical, flow: 'acme' }, signal())
    for (let i = 0; i < 200; i++)
      await admission.admit({ id: `x${i}`, priority: i % 8, flow: `evil-${i}\n"}` }, signal())
    await new Promise((resolve) => setTimeout(resolve, 50)) // prom-client is imported on first use
    const text = await registry.metrics()
    const flows = new Set([...text.matchAll(/flow="([^"]*)"/g)].map((m) => m[1]))
    expect([...flows].sort()).toEqual(['acme', 'other'])
    const classes = new Set([...text.matchAll(/class="([^"]*)"/g)].map((m) => m[1]))
    expect(classes.size).toBeLessThanOrEqual(8)
    expect(text).toContain('tollgate_policy_class_admitted_total{policy="bounded",class="critical"} 1')
    expect(text).toContain(
      'tollgate_policy_flow_rejected_total{policy="bounded",flow="other",reason="busy"} 200',
    )
    expect(text).toContain(
      'tollgate_policy_class_rejected_total{policy="bounded",class="p7",reason="busy"} 25',
    )
    expect(text).toContain('tollgate_policy_class_wait_seconds_count{policy="bounded",class="critical"} 1')
    // The existing series keep their labels.
    expect(text).toContain('tollgate_policy_rejected_total{policy="bounded",reason="busy"} 200')
    await release(admission, holder)
    await store.close()
  })
})
