// G4 on the client side, without Redis: a lease's deadline holds when the timer that watches it runs
// late (a busy event loop), when the machine was suspended (the monotonic clock stopped, the store's
// did not), and a grant that came by message gets its deadline from its own name's clock offset (the
// masters of a Cluster each have their own clock).
import { afterEach, expect, it, vi } from 'vitest'
import { driftMarginMs, monoNow } from '../../src/core/clock.js'
import { waitGroup, type Waiter } from '../../src/core/client/wait-group.js'
import { keySpace } from '../../src/core/keys.js'
import type { Grant, Store } from '../../src/core/protocol/store.js'
import { createMemoryStore, createMutex } from '../../src/index.js'

afterEach(() => {
  vi.restoreAllMocks()
})

it('G4: a lease looked at after its deadline, before the timer that watches it ran, is lost already', async () => {
  const store = createMemoryStore()
  try {
    const lease = await createMutex(store, 'busy', { ttlMs: 200 }).acquire()
    const until = monoNow() + 300
    while (monoNow() < until) {
      // a busy event loop: no timer runs
    }
    expect(lease.signal.aborted).toBe(true)
    expect(lease.signal.reason).toMatchObject({ code: 'ERR_TOLLGATE_LEASE_LOST' })
    await expect(lease.renew()).rejects.toMatchObject({ code: 'ERR_TOLLGATE_LEASE_LOST' })
  } finally {
    await store.close()
  }
})

it('G4: after a suspend (the wall clock moved on, the monotonic one did not), the lease is lost when looked at', async () => {
  const store = createMemoryStore()
  try {
    const lease = await createMutex(store, 'suspended', { ttlMs: 30_000 }).acquire()
    expect(lease.signal.aborted).toBe(false)
    const now = Date.now()
    vi.spyOn(Date, 'now').mockReturnValue(now + 31_000)
    expect(lease.signal.aborted).toBe(true)
  } finally {
    vi.restoreAllMocks()
    await store.close()
  }
})

it('G4: a grant that came by message counts from its own name’s clock offset, not another name’s', async () => {
  // Two names on two masters whose clocks differ by 10 s: each wait group learns its own offset from
  // the replies to its own calls.
  const listeners = new Map<string, (grant: Grant) => void>()
  const store = {
    notificationsHealthy: true,
    subscribe: async (space: { channel: string }, onGrant: (grant: Grant) => void) => {
      listeners.set(space.channel, onGrant)
      return () => {}
    },
  } as unknown as Store
  const offsets = { a: 1_000_000, b: 1_010_000 }
  const deadlines: Record<string, number> = {}
  for (const [name, offset] of Object.entries(offsets)) {
    const space = keySpace('t', 'mutex', name)
    const group = waitGroup(store, space)
    await group.subscribed
    const askedAt = monoNow()
    group.sample(askedAt, askedAt + offset) // the reply of the call that queued
    const waiter: Waiter = {
      token: 'tok',
      op: 'tok',
      client: { waiterTtlMs: 10_000, recheckWaits: () => new Promise(() => {}) },
      grant: undefined,
      deadline: 0,
      gone: false,
      shed: false,
      wake: () => {},
    }
    group.add(waiter)
    const expiresAt = monoNow() + offset + 5_000 // 5 s left on that master's clock
    const before = monoNow()
    listeners.get(space.channel)!({ token: 'tok', op: 'tok', fence: 1, expiresAt })
    const after = monoNow()
    expect(waiter.grant).toBeDefined()
    deadlines[name] = waiter.deadline
    // Never late: at most 5 s from now, less the margin; and not needlessly early.
    expect(waiter.deadline).toBeLessThanOrEqual(after + 5_000 - driftMarginMs(5_000))
    expect(waiter.deadline).toBeGreaterThan(before + 5_000 - driftMarginMs(5_000) - 50)
    group.remove(waiter)
  }
})
