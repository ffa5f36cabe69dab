// What must NOT change for a middleware without `priority`, `flow` or `overload` (docs/middleware.md, "Overload":
// a bucket without them costs what it costs today): its buckets' semaphores get the options they got
// before, and each acquire, tryAcquire and acquireNow the same arguments; no per-class series appear.
// The semaphore module is the real one, with its three entry points recorded.
import { Registry } from 'prom-client'
import { describe, expect, it, vi } from 'vitest'
import { AbortFlag } from '../../src/core/abort.js'
import { createMemoryStore } from '../../src/index.js'

const calls: { fn: string; args: unknown[] }[] = []

vi.mock('../../src/primitives/semaphore.js', async (importOriginal) => {
  const real = await importOriginal<typeof import('../../src/primitives/semaphore.js')>()
  const recorded = <F extends (...args: never[]) => unknown>(fn: string, f: F): F =>
    ((...args: Parameters<F>) => {
      calls.push({ fn, args })
      return f(...args)
    }) as F
  return {
    ...real,
    acquireNow: recorded('acquireNow', real.acquireNow),
    bucketSemaphore: (...args: Parameters<typeof real.bucketSemaphore>) => {
      calls.push({ fn: 'bucketSemaphore', args: args.slice(1) })
      const semaphore = real.bucketSemaphore(...args)
      return Object.assign(semaphore, {
        acquire: recorded('acquire', semaphore.acquire),
        tryAcquire: recorded('tryAcquire', semaphore.tryAcquire),
      })
    },
  }
})

const { semaphoreAdmission } = await import('../../src/admission/buckets.js')

/** Each call's arguments as their shape: the keys of an options object, functions and signals named. */
const shapes = () =>
  calls.map(({ fn, args }) => [
    fn,
    ...args.map((arg) =>
      arg && typeof arg === 'object' && 'tryAcquire' in arg
        ? 'semaphore'
        : arg && typeof arg === 'object'
          ? Object.fromEntries(
              Object.entries(arg).map(([k, v]) => [
                k,
                typeof v === 'function' ? 'fn' : k === 'signal' ? 'signal' : v,
              ]),
            )
          : arg,
    ),
  ])

describe('a middleware without the overload options', () => {
  it('passes the semaphore and its acquires exactly what it passed before', async () => {
    const store = createMemoryStore()
    const registry = new Registry()
    const weighed = semaphoreAdmission<number>({
      permits: 2,
      store,
      name: 'plain',
      maxWaitMs: 500,
      weight: (w) => w,
      metrics: { registry },
    })
    const signal = new AbortFlag()
    const first = weighed.admitNow(weighed.bucketOf(1)) // the memory store's synchronous path
    const heavy = weighed.admit(2, signal) // waits: one of two permits is held
    await new Promise((resolve) => setTimeout(resolve, 20))
    if (first?.outcome === 'admitted') await weighed.release(first.info)
    const second = await heavy
    if (second.outcome === 'admitted') await weighed.release(second.info)
    const never = semaphoreAdmission<number>({ permits: 1, store, name: 'never', maxWaitMs: 0 })
    await never.admit(1, signal)

    expect(weighed.bucketOf(1).fair).toBeUndefined()
    expect(shapes()).toEqual([
      ['bucketSemaphore', 'plain:*', { permits: 2, ttlMs: 30_000, acquireTimeoutMs: Infinity }],
      ['acquireNow', 'semaphore', 1],
      ['acquire', { signal: 'signal', timeoutMs: 500, onQueued: 'fn', weight: 2 }],
      ['bucketSemaphore', 'never:*', { permits: 1, ttlMs: 30_000, acquireTimeoutMs: Infinity }],
      ['tryAcquire', undefined],
    ])
    await new Promise((resolve) => setTimeout(resolve, 50)) // prom-client is imported on first use
    const text = await registry.metrics()
    expect(text).not.toContain('_class_')
    expect(text).not.toContain('_flow_')
    expect(text).not.toContain('reason="shed"')
    expect(text).toContain('tollgate_policy_rejected_total{policy="plain",reason="timeout"} 0')
    await store.close()
  })
})
