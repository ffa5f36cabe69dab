// A fair queue on the memory store (src/core/memory/permit-sets.ts, permit-fair.ts, fair-queue.ts):
// who gets the next permit when not everyone can (issue 38). Orders and counts, not timings: the store
// is driven call by call on a fake clock, and every grant is read from what it publishes.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { type Discipline, fairToken } from '../../src/core/fair.js'
import { keySpace } from '../../src/core/keys.js'
import type { FairQueue } from '../../src/core/memory/fair-queue.js'
import { MemoryPermitSets } from '../../src/core/memory/permit-sets.js'
import type { AcquireReply, FairCall, Grant } from '../../src/core/protocol/store.js'

const space = keySpace('tollgate', 'sem', 'fair')
const FAIR: FairCall = { maxQueued: 0 }
const TTL = 60_000
const WAITER_TTL = 30_000

let messages: { grants: Grant[]; shed: readonly string[] }[]
let sets: MemoryPermitSets
let ids = 0

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['performance'] })
  messages = []
  sets = new MemoryPermitSets((_space, grants, shed = []) => messages.push({ grants, shed }))
})
afterEach(() => {
  vi.useRealTimers()
})

function token(d: Partial<Discipline> & { weight?: number } = {}): string {
  const { weight = 1, priority = 4, flow = '-', flowWeight = 1, flowMax = 0 } = d
  return fairToken(`t${++ids}`, weight, { priority, flow, flowWeight, flowMax })
}

function acquire(
  tok: string,
  permits = 1,
  options: { fair?: FairCall | undefined; waiterTtlMs?: number } = {},
): AcquireReply {
  const fair = 'fair' in options ? options.fair : FAIR
  return sets.acquireNow(space, {
    token: tok,
    ttlMs: TTL,
    permits,
    enqueue: true,
    waiterTtlMs: options.waiterTtlMs ?? WAITER_TTL,
    fair,
  })
}

/** Release `tok` (`plain`: by a process without `overload`) and return the tokens the release
 * granted, in order. */
function release(tok: string, permits = 1, fair: FairCall | 'plain' = FAIR): string[] {
  const before = messages.length
  sets.releaseNow(space, tok, permits, undefined, fair === 'plain' ? undefined : fair)
  return messages.slice(before).flatMap((m) => m.grants.map((g) => g.token))
}

function fairState(): FairQueue {
  const fair = sets.sets.get(space.base)?.fair
  if (!fair) throw new Error('no fair queue')
  return fair
}

const position = (reply: AcquireReply) => ('position' in reply ? reply.position : Number.NaN)
const flowOf = (tok: string) => tok.split('.')[2]

describe('fair queue on the memory store', () => {
  it('serves classes strictly by priority, FIFO inside a class', () => {
    const holder = token()
    expect(acquire(holder).granted).toBe(true)
    const queued: string[] = []
    for (let i = 0; i < 3; i++)
      for (const priority of [2, 4, 6]) {
        const tok = token({ priority })
        queued.push(tok)
        acquire(tok)
      }
    // A critical arriving behind sheddables is placed ahead of them.
    expect(position(acquire(token({ priority: 6 })))).toBe(3)
    const order: string[] = []
    let current = holder
    for (let i = 0; i < 10; i++) {
      const [next] = release(current)
      order.push(next as string)
      current = next as string
    }
    const classes = order.map((t) => Number(t.split('.')[1]))
    expect(classes).toEqual([6, 6, 6, 6, 4, 4, 4, 2, 2, 2])
    // FIFO inside a class: the three sheddables in their arrival order.
    expect(order.slice(7)).toEqual(queued.filter((t) => t.split('.')[1] === '2'))
  })

  it('keeps a quiet flow within the number of flows while a noisy one has 300 queued', () => {
    let current = token({ flow: 'noisyFlow00' })
    acquire(current)
    for (let i = 0; i < 300; i++) acquire(token({ flow: 'noisyFlow00' }))
    const quiet = Array.from({ length: 9 }, (_, i) => `quietFlow0${i}`)
    const served = new Map<string, number>()
    const worst: number[] = []
    for (const flow of quiet) worst.push(position(acquire(token({ flow }))))
    for (let grant = 0; grant < 2000; grant++) {
      const [next] = release(current)
      current = next as string
      const flow = flowOf(current) as string
      served.set(flow, (served.get(flow) ?? 0) + 1)
      // Each flow asks again as soon as it is served: the noisy one keeps 300 queued.
      worst.push(flow === 'noisyFlow00' ? 0 : position(acquire(token({ flow }))))
      if (flow === 'noisyFlow00') acquire(token({ flow }))
    }
    // Ahead of it: at most one waiter of each other flow in its round, and the noisy flow's next.
    expect(Math.max(...worst)).toBeLessThanOrEqual(10)
    // Ten backlogged flows share alike: 200 grants each.
    for (const flow of quiet) expect(served.get(flow)).toBeGreaterThanOrEqual(199)
    expect(fairState().q.get('4:noisyFlow00')).toBe(300)
  })

  it('shares by flow weight: 3 to 1 while both are backlogged', () => {
    let current = token({ flow: 'heavyFlow00', flowWeight: 3 })
    acquire(current)
    for (let i = 0; i < 30; i++) {
      acquire(token({ flow: 'heavyFlow00', flowWeight: 3 }))
      acquire(token({ flow: 'lightFlow00' }))
    }
    let heavy = 0
    for (let grant = 0; grant < 3000; grant++) {
      const [next] = release(current)
      current = next as string
      const flow = flowOf(current) as string
      if (flow === 'heavyFlow00') heavy++
      acquire(token({ flow, flowWeight: flow === 'heavyFlow00' ? 3 : 1 }))
    }
    expect(Math.abs(heavy - 2250)).toBeLessThanOrEqual(2)
  })

  it('a flow that re-enters with one waiter after each admission gets no more than its share', () => {
    let current = token({ flow: 'backlogFlow' })
    acquire(current)
    for (let i = 0; i < 20; i++) acquire(token({ flow: 'backlogFlow' }))
    acquire(token({ flow: 'oneAtATime0' }))
    let single = 0
    for (let grant = 0; grant < 1000; grant++) {
      current = release(current)[0] as string
      const flow = flowOf(current) as string
      if (flow === 'oneAtATime0') single++
      acquire(token({ flow }))
    }
    expect(single).toBeLessThanOrEqual(501)
    expect(single).toBeGreaterThanOrEqual(499)
  })

  it('is work-conserving: a lone flow takes every permit, a newcomer starts at V', () => {
    const lone = Array.from({ length: 8 }, () => token({ flow: 'loneFlow000' }))
    expect(lone.slice(0, 4).map((t) => acquire(t, 4).granted)).toEqual([true, true, true, true])
    for (const t of lone.slice(4)) acquire(t, 4)
    expect(release(lone[0] as string, 4)).toEqual([lone[4]])
    // The lone flow's backlog is ahead in tags; a second flow starts at V, so it is next but one.
    expect(position(acquire(token({ flow: 'otherFlow00' }), 4))).toBeLessThanOrEqual(1)
  })

  it('parks a capped flow at its cap, unparks one per release, FIFO inside the flow', async () => {
    const capped = () => token({ flow: 'cappedFlow0', flowMax: 2 })
    const held = [capped(), capped()]
    for (const t of held) expect(acquire(t, 4).granted).toBe(true)
    const waiting = [capped(), capped(), capped()]
    for (const t of waiting) expect(acquire(t, 4).granted).toBe(false)
    // Two permits are free: another flow takes one at once (the capped waiters park, nobody waits).
    const other = token({ flow: 'otherFlow00' })
    expect(acquire(other, 4).granted).toBe(true)
    const stats = await sets.inspectFair(space, FAIR, ['cappedFlow0'])
    expect(stats).toMatchObject({
      parked: 3,
      classes: { 4: 3 },
      flows: { cappedFlow0: { waiting: 3, held: 2, parked: 3 } },
    })
    const recheck = await sets.recheck(space, 4, WAITER_TTL, [{ token: waiting[2] as string }], FAIR)
    expect(recheck.states).toEqual([{ state: 'queued', position: 0 }])
    // Each release of the capped flow hands its place to the flow's oldest parked waiter.
    expect(release(held[0] as string, 4)).toEqual([waiting[0]])
    expect(release(other, 4)).toEqual([])
    expect(release(held[1] as string, 4)).toEqual([waiting[1]])
    expect(release(waiting[0] as string, 4)).toEqual([waiting[2]])
    expect(fairState().h.get('cappedFlow0')).toBe(2)
    expect(fairState().parked.size).toBe(0)
  })

  it('evicts the tail of a lower class under maxQueued, and sheds it exactly once', async () => {
    const bounded: FairCall = { maxQueued: 2 }
    const holder = token()
    acquire(holder, 1, { fair: bounded })
    const [s1, s2] = [token({ priority: 2 }), token({ priority: 2 })] as [string, string]
    acquire(s1, 1, { fair: bounded })
    acquire(s2, 1, { fair: bounded })
    const c1 = token({ priority: 6 })
    expect(position(acquire(c1, 1, { fair: bounded }))).toBe(0)
    // The newest sheddable went, with one "<tok> x" line.
    expect(messages.flatMap((m) => m.shed)).toEqual([s2])
    const recheck = await sets.recheck(space, 1, WAITER_TTL, [{ token: s2 }, { token: s1 }], bounded)
    expect(recheck.states).toEqual([{ state: 'shed' }, { state: 'queued', position: 1 }])
    // A resent acquire of the evicted token is shed again and never queues; a resend of the arrival
    // evicts nobody else; a release of the evicted token does nothing.
    expect(acquire(s2, 1, { fair: bounded })).toMatchObject({ granted: false, shed: 'evicted' })
    expect(position(acquire(c1, 1, { fair: bounded }))).toBe(0)
    expect(sets.releaseNow(space, s2, 1, undefined, bounded)).toBe('none')
    expect(messages.flatMap((m) => m.shed)).toEqual([s2])
    // A second critical evicts the other sheddable; a third finds only its own class: refused.
    const c2 = token({ priority: 6 })
    acquire(c2, 1, { fair: bounded })
    expect(acquire(token({ priority: 6 }), 1, { fair: bounded })).toMatchObject({
      granted: false,
      shed: 'queue-full',
    })
    expect(messages.flatMap((m) => m.shed)).toEqual([s2, s1])
    expect(fairState().x[2]).toBe(2)
    // No grant ever names them; the marks go after 2 x waiterTtl.
    expect([...release(holder, 1, bounded), ...release(c1, 1, bounded), ...release(c2, 1, bounded)]).toEqual([
      c1,
      c2,
    ])
    vi.advanceTimersByTime(2 * WAITER_TTL + 1)
    const later = await sets.recheck(space, 1, WAITER_TTL, [{ token: s2 }], bounded)
    expect(later.states).toEqual([{ state: 'gone' }])
  })

  it('refunds a flow whose waiters all timed out: its next request starts at V', () => {
    let current = token({ flow: 'busyFlow000' })
    acquire(current)
    for (let i = 0; i < 10; i++) acquire(token({ flow: 'busyFlow000' }), 1, { waiterTtlMs: 10 * WAITER_TTL })
    for (let i = 0; i < 50; i++) acquire(token({ flow: 'goneFlow000' }), 1, { waiterTtlMs: 1000 })
    vi.advanceTimersByTime(1001)
    for (let i = 0; i < 3; i++) {
      const [next] = release(current)
      current = next as string
      acquire(token({ flow: 'busyFlow000' }), 1, { waiterTtlMs: 10 * WAITER_TTL })
    }
    const fair = fairState()
    expect(fair.q.has('4:goneFlow000')).toBe(false)
    const back = token({ flow: 'goneFlow000' })
    acquire(back)
    const score = fair.order.score(back) as number
    // S + j with S = V (not the 50 requests' worth of tags it was charged for and never got).
    expect(score - (score % 4096)).toBe((fair.v[4] as number) - ((fair.v[4] as number) % 4096))
    expect(fair.order.rank(back)).toBeLessThanOrEqual(1)
  })

  it('a heavy head blocks lower classes and other flows (G5)', () => {
    const holder = token({ weight: 2 })
    expect(acquire(holder, 4).granted).toBe(true)
    const heavy = token({ priority: 6, weight: 3, flow: 'heavyFlow00' })
    const light = token({ priority: 2, flow: 'lightFlow00' })
    acquire(heavy, 4)
    acquire(light, 4)
    // Two permits are free, but the head needs three: nobody passes it.
    expect(position(acquire(token({ priority: 2, flow: 'lightFlow00' }), 4))).toBe(2)
    expect(sets.sets.get(space.base)?.used).toBe(2)
    expect(release(holder, 4)).toEqual([heavy, light])
  })

  it('a plain call never grants a waiter with a discipline', async () => {
    const holder = token()
    acquire(holder)
    const waiter = token({ flow: 'someFlow000' })
    acquire(waiter)
    expect(release(holder, 1, 'plain')).toEqual([])
    expect(sets.sets.get(space.base)?.holders.size).toBe(0)
    const states = await sets.recheck(space, 1, WAITER_TTL, [{ token: waiter }], FAIR)
    expect(states.states[0]).toMatchObject({ state: 'granted' })
  })

  it('keeps no state for flows that went idle: 10,000 flows, then one', () => {
    let current = token({ flow: 'steadyFlow0' })
    acquire(current)
    for (let i = 0; i < 10_000; i++) acquire(token({ flow: `idle${String(i).padStart(7, '0')}` }))
    const fair = fairState()
    expect(fair.tags.size).toBe(10_000)
    for (let grant = 0; grant < 10_000; grant++) current = release(current)[0] as string
    expect(fair.q.size).toBe(0)
    // The flows are idle; a steady flow goes on, and V passes their finish tags.
    acquire(token({ flow: 'steadyFlow0' }))
    for (let grant = 0; grant < 1000; grant++) {
      current = release(current)[0] as string
      acquire(token({ flow: 'steadyFlow0' }))
    }
    expect(fair.tags.size).toBeLessThanOrEqual(1)
    expect(fair.q.size).toBe(1)
    expect(fair.order.size).toBe(1)
    expect(fair.h.size + fair.k.size + fair.parkedScores.size).toBe(0)
  })
})
