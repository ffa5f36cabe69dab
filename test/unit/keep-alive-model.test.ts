// A randomised model of permit keep-alive's bookkeeping (src/admission/keep-alive.ts), driven step by
// step on fake timers: requests take kept leases or are granted fresh ones, finish and are kept or
// refused, buckets are flushed, kept leases are lost, time jumps, keep-alive closes. After every step
// the invariants are checked against an independent account of every lease. The leases here are
// bare PermitLease objects (no store behind them): the store's side is proven on real Redis in
// test/integration/keep-alive.test.ts; this covers the interleavings those tests cannot reach.
import { afterEach, expect, it, vi } from 'vitest'
import { KeptPermits } from '../../src/admission/keep-alive.js'
import { PermitLease } from '../../src/core/client/lease.js'

/** A PermitLease without a store. */
type ModelLease = PermitLease

/** The private fields `active` reads, set by the model (released, lost). */
const fields = (lease: ModelLease) => lease as unknown as { releasing: unknown; lostWith: unknown }

function modelLease(): ModelLease {
  const lease = Object.create(PermitLease.prototype) as ModelLease
  Object.assign(lease, { releasing: undefined, lostWith: undefined, lossListeners: undefined })
  return lease
}

/** What the test reads of KeptPermits' private state. */
interface Internals {
  pools: Map<string, { stack: { lease: ModelLease | undefined; kept: boolean }[]; live: number }>
  timer: unknown
}

/** A plain check: expect() per step of 40 x 6,000 steps cost most of the test's time. */
function assert(condition: boolean, message: string): void {
  if (!condition) throw new Error(message)
}

function random(seed: number): () => number {
  return () => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff
    return seed / 0x7fffffff
  }
}

afterEach(() => {
  vi.useRealTimers()
})

const SWEEP_SLACK_MS = 10 // MIN_SWEEP_MS in keep-alive.ts

for (let seed = 1; seed <= 40; seed++) {
  it(`seed ${seed}: no lease pooled twice, in use, given back or past its time; the count and timer agree`, () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] })
    const r = random(seed)
    const keepAliveMs = seed % 2 ? 1 + Math.floor(r() * 50) : 1 + Math.floor(r() * 5000)
    const inUse = new Map<ModelLease, string>()
    const returned = new Set<ModelLease>()
    const until = new Map<ModelLease, number>()
    const giveBack = (lease: ModelLease) => {
      assert(!returned.has(lease), 'given back twice')
      assert(!inUse.has(lease), 'given back while in use')
      returned.add(lease)
      fields(lease).releasing = true
    }
    const kept = new KeptPermits(keepAliveMs, (lease) => {
      giveBack(lease as ModelLease)
      return undefined
    })
    const internals = kept as unknown as Internals
    const pooled = (key: string) =>
      (internals.pools.get(key)?.stack ?? []).filter((e) => e.kept).map((e) => e.lease as ModelLease)
    const fresh = (key: string) => {
      const lease = modelLease()
      kept.grant(key, lease)
      until.set(lease, performance.now() + keepAliveMs)
      return lease
    }
    const check = () => {
      const seen = new Set<ModelLease>()
      const now = performance.now()
      for (const [key, pool] of internals.pools) {
        const leases = pooled(key)
        assert(pool.live === leases.length, `live count ${pool.live}, kept entries ${leases.length}`)
        assert(pool.live > 0, 'an empty pool is kept')
        assert(pool.stack.length <= 2 * pool.live + 17, 'swept entries pile up')
        for (const lease of leases) {
          assert(!seen.has(lease), 'in two pools')
          seen.add(lease)
          assert(!inUse.has(lease), 'pooled and in use')
          assert(!returned.has(lease), 'pooled after it went back')
          assert(until.get(lease)! + SWEEP_SLACK_MS + 0.001 > now, 'pooled past its time and the sweep')
        }
      }
      assert(kept.size === seen.size, `size ${kept.size}, pooled ${seen.size}`)
      assert(seen.size === 0 || internals.timer !== undefined, 'leases kept and no sweep due')
    }
    const keys = ['a', 'b', 'c']
    for (let step = 0; step < 6000; step++) {
      const key = keys[Math.floor(r() * keys.length)]!
      const p = r()
      if (p < 0.3) {
        // A request: a kept lease, live and within its time, or a fresh grant.
        const lease = kept.take(key) as ModelLease | undefined
        if (lease) {
          assert(!returned.has(lease), 'handed out after it went back')
          assert(fields(lease).lostWith === undefined, 'handed out while lost')
          assert(until.get(lease)! > performance.now(), 'handed out past its time')
        }
        inUse.set(lease ?? fresh(key), key)
      } else if (p < 0.32) {
        // A burst of grants, half of them refused at once (requests that waited).
        for (let i = 0; i < 60; i++) {
          const lease = fresh(key)
          if (r() < 0.5) inUse.set(lease, key)
          else giveBack(lease)
        }
      } else if (p < 0.6 && inUse.size > 0) {
        // A request ends: kept, or refused (a local waiter in 10 %) and given back by the admission.
        const [lease, leaseKey] = [...inUse][Math.floor(r() * inUse.size)]!
        inUse.delete(lease)
        if (!kept.keep(leaseKey, lease, r() < 0.1)) giveBack(lease)
      } else if (p < 0.63) {
        kept.flush(key)
      } else if (p < 0.66) {
        const lease = pooled(key)[0]
        if (lease) fields(lease).lostWith = new Error('lost while kept')
      } else if (p < 0.6672 && seed % 5 === 0 && step > 4000) {
        void kept.close()
      } else {
        vi.advanceTimersByTime(
          r() < 0.9 ? Math.floor(r() * 3) : Math.floor(r() * r() * r() * 2 * keepAliveMs),
        )
      }
      check()
    }
    // Traffic stops: every lease goes back within keepAliveMs and the sweep's slack, and no timer stays.
    for (const [lease, key] of inUse) {
      inUse.delete(lease)
      if (!kept.keep(key, lease, false)) giveBack(lease)
    }
    vi.advanceTimersByTime(keepAliveMs + SWEEP_SLACK_MS + 2)
    check()
    expect(kept.size).toBe(0)
    expect(internals.timer).toBeUndefined()
  })
}

it('a pool that never empties does not pile up the entries the sweep removed', () => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] })
  const kept = new KeptPermits(100, () => undefined)
  const internals = kept as unknown as Internals
  // A fresh lease kept every 10 ms, none ever taken: about 10 live at any time, the oldest swept
  // from the bottom of the stack as they expire.
  for (let i = 0; i < 1000; i++) {
    const lease = modelLease()
    kept.grant('a', lease)
    expect(kept.keep('a', lease, false)).toBe(true)
    vi.advanceTimersByTime(10)
  }
  const pool = internals.pools.get('a')!
  expect(pool.live).toBeLessThanOrEqual(11)
  expect(pool.stack.length).toBeLessThanOrEqual(2 * pool.live + 17)
})
