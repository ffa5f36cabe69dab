// The renewal scheduler without a store (fake timers): renews at a third of the lease, batches leases
// of one group and ttl into one call, retries failures until the deadline, then declares the lease
// lost; a released lease is never renewed again.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { type RenewGroup, type Renewable, RenewalScheduler } from '../../src/core/client/renewal.js'
import type { Acquisition, RenewReply } from '../../src/core/protocol/store.js'

class FakeLease implements Renewable {
  localDeadline: number
  active = true
  lost: string | undefined
  renewed = 0
  constructor(
    readonly name: string,
    readonly token: string,
    readonly context: RenewGroup,
    ttlMs: number,
    readonly op?: string,
  ) {
    this.localDeadline = Date.now() + ttlMs
  }
  applyRenewal(now: number, expiresAt: number): void {
    if (expiresAt === 0) return this.lose('gone')
    this.renewed++
    this.localDeadline = Date.now() + (expiresAt - now)
  }
  lose(reason: string): void {
    this.lost = reason
    this.active = false
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
  now: Date.now(),
  expiresAt: holds.map(() => Date.now() + ttlMs),
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
    const leases = [new FakeLease('n', 'a', g, 3000), new FakeLease('n', 'b', g, 3000, 'op-b')]
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

  it('retries a failing renewal until the deadline, then declares the lease lost', async () => {
    const scheduler = new RenewalScheduler()
    const { g, calls } = group(1000, () => new Error('store down'))
    const lease = new FakeLease('n', 'a', g, 1000)
    scheduler.add(lease)
    await vi.advanceTimersByTimeAsync(1200)
    expect(calls.length).toBeGreaterThan(2)
    expect(lease.lost).toBeDefined()
    expect(scheduler.size).toBe(0)
  })

  it('declares a lease the store no longer knows lost at once', async () => {
    const scheduler = new RenewalScheduler()
    const { g } = group(900, (holds) => ({ now: Date.now(), expiresAt: holds.map(() => 0) }))
    const lease = new FakeLease('n', 'a', g, 900)
    scheduler.add(lease)
    await vi.advanceTimersByTimeAsync(400)
    expect(lease.lost).toBe('gone')
  })

  it('never renews a lease once it was deleted (released)', async () => {
    const scheduler = new RenewalScheduler()
    const { g, calls } = group(600, ok(600))
    const lease = new FakeLease('n', 'a', g, 600)
    scheduler.add(lease)
    scheduler.delete(lease)
    await vi.advanceTimersByTimeAsync(2000)
    expect(calls).toEqual([])
  })
})
