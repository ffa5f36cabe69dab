// The renewal scheduler without a store (fake timers): renews at a third of the lease, batches leases
// of one group and ttl into one call, retries failures, declares a lease lost at its deadline whatever
// its renewal call is doing (G4), counts a deadline from when the renewal was asked, and keeps its
// timer on the earliest of many leases; a released lease is never renewed again.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { localDeadline, monoNow } from '../../src/core/clock.js'
import { type RenewGroup, type Renewable, RenewalScheduler } from '../../src/core/client/renewal.js'
import type { Acquisition, RenewReply } from '../../src/core/protocol/store.js'

/** The store's clock in these tests: the local one, shifted (the scheduler must not care). */
const STORE_OFFSET = 123_456
const storeNow = () => monoNow() + STORE_OFFSET

class FakeLease implements Renewable {
  localDeadline: number
  active = true
  lost: string | undefined
  lostAt = Number.NaN
  renewed = 0
  constructor(
    readonly scheduler: RenewalScheduler,
    readonly name: string,
    readonly token: string,
    readonly context: RenewGroup,
    ttlMs: number,
    readonly op?: string,
  ) {
    this.localDeadline = monoNow() + ttlMs
  }
  applyRenewal(askedAt: number, now: number, expiresAt: number): void {
    if (!this.active) return
    if (expiresAt === 0) return this.lose('gone')
    this.renewed++
    this.localDeadline = localDeadline(askedAt, now, expiresAt)
  }
  pastDeadline(now: number): boolean {
    return now >= this.localDeadline
  }
  lose(reason: string): void {
    if (!this.active) return
    this.lost = reason
    this.lostAt = monoNow()
    this.active = false
    this.scheduler.delete(this)
  }
}

function group(ttlMs: number, answer: (holds: readonly Acquisition[]) => RenewReply | Error) {
  const calls: Acquisition[][] = []
  const g: RenewGroup = {
    ttlMs,
    renewTokens: async (_ttl, holds) => {
      calls.push([...holds])
      const reply = answer(holds)
      if (reply instanceof Error) throw reply
      return reply
    },
  }
  return { g, calls }
}

const ok = (ttlMs: number) => (holds: readonly Acquisition[]) => ({
  now: storeNow(),
  expiresAt: holds.map(() => storeNow() + ttlMs),
})

describe('G4: renewal scheduler', () => {
  beforeEach(() => {
    vi.useFakeTimers()
  })
  afterEach(() => {
    vi.useRealTimers()
  })

  it('renews every lease of one group and ttl in one call, at about a third of the lease', async () => {
    const scheduler = new RenewalScheduler()
    const { g, calls } = group(3000, ok(3000))
    const leases = [
      new FakeLease(scheduler, 'n', 'a', g, 3000),
      new FakeLease(scheduler, 'n', 'b', g, 3000, 'op-b'),
    ]
    for (const lease of leases) scheduler.add(lease)
    await vi.advanceTimersByTimeAsync(900)
    expect(calls).toEqual([])
    await vi.advanceTimersByTimeAsync(200)
    expect(calls).toEqual([
      [
        { token: 'a', op: undefined },
        { token: 'b', op: 'op-b' },
      ],
    ])
    expect(leases.map((l) => l.renewed)).toEqual([1, 1])
    for (const lease of leases) scheduler.delete(lease)
  })

  it('splits 1,000 leases due at once into calls of at most 200 (each under a millisecond of Redis time)', async () => {
    const scheduler = new RenewalScheduler()
    const { g, calls } = group(3000, ok(3000))
    const leases = Array.from({ length: 1_000 }, (_, i) => new FakeLease(scheduler, 'n', `t${i}`, g, 3000))
    for (const lease of leases) scheduler.add(lease)
    await vi.advanceTimersByTimeAsync(1100)
    // Before (a84b268's parent): 500 a call, measured at up to 1.7 ms of Redis time each.
    expect(calls.map((call) => call.length)).toEqual([200, 200, 200, 200, 200])
    expect(leases.every((lease) => lease.renewed === 1)).toBe(true)
    for (const lease of leases) scheduler.delete(lease)
  })

  it('retries a failing renewal until the deadline, then declares the lease lost', async () => {
    const scheduler = new RenewalScheduler()
    const { g, calls } = group(1000, () => new Error('store down'))
    const lease = new FakeLease(scheduler, 'n', 'a', g, 1000)
    scheduler.add(lease)
    await vi.advanceTimersByTimeAsync(1200)
    expect(calls.length).toBeGreaterThan(2)
    expect(lease.lost).toBeDefined()
    expect(scheduler.size).toBe(0)
  })

  it('declares a lease the store no longer knows lost at once', async () => {
    const scheduler = new RenewalScheduler()
    const { g } = group(900, (holds) => ({ now: storeNow(), expiresAt: holds.map(() => 0) }))
    const lease = new FakeLease(scheduler, 'n', 'a', g, 900)
    scheduler.add(lease)
    await vi.advanceTimersByTimeAsync(400)
    expect(lease.lost).toBe('gone')
  })

  it('never renews a lease once it was deleted (released)', async () => {
    const scheduler = new RenewalScheduler()
    const { g, calls } = group(600, ok(600))
    const lease = new FakeLease(scheduler, 'n', 'a', g, 600)
    scheduler.add(lease)
    scheduler.delete(lease)
    await vi.advanceTimersByTimeAsync(2000)
    expect(calls).toEqual([])
  })

  it('G4: loses a lease at its deadline while its renewal call hangs (a partition), not when the call gives up', async () => {
    const scheduler = new RenewalScheduler()
    const calls: number[] = []
    const g: RenewGroup = {
      ttlMs: 1500,
      renewTokens: () => {
        calls.push(monoNow())
        return new Promise<RenewReply>(() => {}) // never answers
      },
    }
    const start = monoNow()
    const lease = new FakeLease(scheduler, 'n', 'a', g, 1500)
    scheduler.add(lease)
    await vi.advanceTimersByTimeAsync(5000)
    expect(calls).toHaveLength(1)
    expect(lease.lost).toMatch(/no renewal was confirmed before its deadline/)
    expect(lease.lostAt - start).toBeGreaterThanOrEqual(1500 - 1)
    expect(lease.lostAt - start).toBeLessThanOrEqual(1500 + 1)
    expect(scheduler.size).toBe(0)
  })

  it('G4: counts a renewed deadline from when the renewal was asked, not from when its reply came', async () => {
    const scheduler = new RenewalScheduler()
    let asked = 0
    const g: RenewGroup = {
      ttlMs: 1500,
      renewTokens: async (ttlMs, holds) => {
        asked = monoNow()
        const reply = { now: storeNow(), expiresAt: holds.map(() => storeNow() + ttlMs) }
        await new Promise((resolve) => setTimeout(resolve, 900)) // the reply is held in the network
        return reply
      },
    }
    const lease = new FakeLease(scheduler, 'n', 'a', g, 1500)
    scheduler.add(lease)
    await vi.advanceTimersByTimeAsync(500 + 900 + 10)
    expect(lease.renewed).toBe(1)
    // The store extended it to asked + 1500 on its clock; the margin is 1 % + 5 ms.
    expect(lease.localDeadline).toBe(asked + 1500 - 20)
    scheduler.delete(lease)
  })

  it('G4: 2,000 leases of mixed TTLs are each renewed before their deadline, one timer for all', async () => {
    const scheduler = new RenewalScheduler()
    const groups = [300, 700, 1100, 5000].map((ttl) => group(ttl, ok(ttl)))
    const leases = Array.from({ length: 2000 }, (_, i) => {
      const { g } = groups[i % groups.length]!
      return new FakeLease(scheduler, `n${i % 7}`, `t${i}`, g, g.ttlMs)
    })
    const timers = vi.getTimerCount()
    for (const lease of leases) scheduler.add(lease)
    expect(vi.getTimerCount() - timers).toBe(1)
    await vi.advanceTimersByTimeAsync(12_000)
    expect(leases.filter((lease) => lease.lost !== undefined)).toEqual([])
    // Every lease was renewed about once per third of its TTL.
    for (const lease of leases)
      expect(lease.renewed).toBeGreaterThanOrEqual(Math.floor(12_000 / lease.context.ttlMs))
    // Released in any order, the last one takes the timer with it.
    for (const lease of leases.reverse()) scheduler.delete(lease)
    expect(scheduler.size).toBe(0)
    expect(vi.getTimerCount()).toBe(timers)
  })

  it('G4: a loss reported by one fire may release other due leases: they are never renewed after that', async () => {
    const scheduler = new RenewalScheduler()
    const hanging: RenewGroup = { ttlMs: 900, renewTokens: () => new Promise<RenewReply>(() => {}) }
    const { g, calls } = group(900, ok(900))
    const events: string[] = []
    const recording: RenewGroup = {
      ttlMs: 900,
      renewTokens: (ttl, holds) => {
        for (const hold of holds) events.push(`renew ${hold.token}`)
        return g.renewTokens(ttl, holds)
      },
    }
    // The doomed lease's renewal hangs, so it is lost at its deadline (300 ms); the sibling's renewal
    // is due in that same fire. On loss, the user releases every lease it holds (a common pattern).
    const doomed = new FakeLease(scheduler, 'n', 'doomed', hanging, 300)
    const sibling = new FakeLease(scheduler, 'n', 'sibling', recording, 900)
    const lose = doomed.lose.bind(doomed)
    doomed.lose = (reason) => {
      lose(reason)
      events.push('release sibling')
      scheduler.delete(sibling)
      sibling.active = false
    }
    scheduler.add(doomed)
    scheduler.add(sibling)
    await vi.advanceTimersByTimeAsync(5000)
    expect(doomed.lost).toMatch(/no renewal was confirmed/)
    expect(events.slice(events.indexOf('release sibling'))).toEqual(['release sibling'])
    expect(calls.length).toBeLessThanOrEqual(1)
    expect(scheduler.size).toBe(0)
  })
})
