// The fair queue's parts in memory (src/core/memory/sorted-set.ts, fair-queue.ts): the sorted set
// must order exactly as a Redis ZSET does (the differential test compares the two stores step by
// step), and the discipline's arithmetic must be the design's integers.
import { describe, expect, it } from 'vitest'
import { FairQueue, REBASE_AT, SATURATED_BASE, classOffset } from '../../src/core/memory/fair-queue.js'
import { SortedSet } from '../../src/core/memory/sorted-set.js'

/** A deterministic generator, so a failure replays. */
function random(seed: number): () => number {
  let s = seed >>> 0
  return () => {
    s = (s + 0x6d2b79f5) >>> 0
    let t = s
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

describe('SortedSet', () => {
  it('orders, ranks and seeks as a naive sorted array does, over random operations', () => {
    const rnd = random(38)
    const set = new SortedSet()
    const naive = new Map<string, number>()
    const sorted = () =>
      [...naive].sort(([a, x], [b, y]) => (x !== y ? x - y : a < b ? -1 : a > b ? 1 : 0)).map(([m]) => m)
    // Members share prefixes and scores (ties break by code unit, as Redis's bytes for ASCII).
    const member = () => `${'abc'[Math.floor(rnd() * 3)]}${Math.floor(rnd() * 40)} ${Math.floor(rnd() * 5)}`
    for (let step = 0; step < 3000; step++) {
      const m = member()
      const r = rnd()
      if (r < 0.55) {
        const score = Math.floor(rnd() * 8) * 2 ** 50 - 3 * 2 ** 50 + Math.floor(rnd() * 4)
        set.add(m, score)
        naive.set(m, score)
      } else {
        expect(set.delete(m)).toBe(naive.delete(m))
      }
      if (step % 50 !== 0) continue
      const order = sorted()
      expect([...set.entries()].map(([x]) => x)).toEqual(order)
      expect(set.size).toBe(order.length)
      for (const [i, x] of order.entries()) expect(set.rank(x)).toBe(i)
      expect(set.rank('absent')).toBe(-1)
      expect(set.first(5)).toEqual(order.slice(0, 5))
      expect(set.last()?.[0]).toBe(order.at(-1))
      const cut = Math.floor(rnd() * 8) * 2 ** 50 - 3 * 2 ** 50 + 1
      expect(set.countUpTo(cut)).toBe(order.filter((x) => (naive.get(x) as number) <= cut).length)
      expect(set.rangeByScore(cut - 2 ** 50, cut, 4)).toEqual(
        order
          .filter((x) => (naive.get(x) as number) >= cut - 2 ** 50 && (naive.get(x) as number) <= cut)
          .slice(0, 4),
      )
      const below = order.filter((x) => (naive.get(x) as number) <= cut).at(-1)
      expect(set.lastUpTo(cut)?.[0]).toBe(below)
    }
  })

  it("finds members by prefix in byte order among equal scores (a flow's parked waiters)", () => {
    const rnd = random(7)
    const set = new SortedSet()
    const all: string[] = []
    for (let i = 0; i < 500; i++) {
      const m = `f${Math.floor(rnd() * 20)} ${String(Math.floor(rnd() * 1e6)).padStart(16, '0')} t${i}`
      set.add(m, 0)
      all.push(m)
    }
    all.sort((a, b) => (a < b ? -1 : 1))
    for (const flow of ['f1', 'f7', 'f19', 'f20']) {
      const want = all.filter((m) => m.startsWith(`${flow} `))
      expect(set.withPrefix(`${flow} `, 3)).toEqual(want.slice(0, 3))
      expect(set.withPrefix(`${flow} `, 1000)).toEqual(want)
    }
  })
})

describe('FairQueue arithmetic', () => {
  const d = (flow: string, priority = 6) => ({ weight: 1, priority, flow, flowWeight: 1, flowMax: 0 })
  const offset = classOffset(6)

  it('scores (4 - p) * 2^50 + S - S mod 32 + ticket mod 32, with S = max(V, F) and F += w * 4096 / fw', () => {
    const fair = new FairQueue()
    expect(fair.enqueue('a1', d('a'), 1)).toBe(offset + 1)
    expect(fair.enqueue('a2', d('a'), 2)).toBe(offset + 4096 + 2)
    expect(fair.enqueue('b1', { ...d('b'), weight: 5, flowWeight: 3 }, 35)).toBe(offset + 3)
    expect(fair.tags.score('6:b')).toBe(offset + Math.floor((5 * 4096) / 3))
    expect(fair.enqueue('p', undefined, 36)).toBe(36)
    fair.grant('a1', d('a'), offset + 1)
    fair.endAdmission()
    expect(fair.v[6]).toBe(1)
    // A plain waiter sits in the standard class (offset 0), far behind critical, ahead of sheddable.
    expect(fair.enqueue('s', d('s', 2), 37)).toBe(classOffset(2) + 5)
    expect(fair.order.first(5)).toEqual(['b1', 'a2', 'p', 's'])
  })

  it('orders start tags in steps of 32 units, then by arrival: scores never tie on token bytes', () => {
    const fair = new FairQueue()
    const grant = (token: string, flow: string) => {
      fair.grant(token, d(flow), fair.order.score(token) as number)
      fair.endAdmission()
    }
    fair.enqueue('b1', d('b'), 1)
    fair.enqueue('c1', d('c'), 2)
    grant('b1', 'b')
    fair.enqueue('a1', d('a'), 3) // S = V = 1 (b1's ticket part): F(a) = 4097
    grant('c1', 'c')
    grant('a1', 'a')
    // S 4097 and S 4096: as S + ticket mod 32 both scored 4101 (then x-b2 first by its bytes).
    expect(fair.enqueue('y-a2', d('a'), 4)).toBe(offset + 4096 + 4)
    expect(fair.enqueue('x-b2', d('b'), 5)).toBe(offset + 4096 + 5)
    expect(fair.order.first(2)).toEqual(['y-a2', 'x-b2'])
  })

  it('falls back to arrival order past the tag range, and rebases a quiet class to 0', () => {
    const fair = new FairQueue()
    fair.v[6] = SATURATED_BASE - 2 * 4096
    fair.enqueue('a1', d('a'), 1)
    fair.enqueue('a2', d('a'), 2) // S + cost reaches the saturation base
    fair.enqueue('b1', d('b'), 3)
    expect(fair.sat[6]).toBe(true)
    expect(fair.order.first(3)).toEqual(['a1', 'a2', 'b1'])
    expect(fair.order.score('b1')).toBe(offset + SATURATED_BASE + 3)
    for (const [token, score] of [...fair.order.entries()]) fair.grant(token, d(token.slice(0, 1)), score)
    fair.endAdmission()
    expect(fair.sat[6]).toBe(false)
    expect(fair.v[6]).toBe(0)
    expect(fair.tags.size).toBe(0)
  })

  it('rebases 100 finish tags a call, and a waiter arriving meanwhile keeps its order', () => {
    const fair = new FairQueue()
    fair.v[6] = REBASE_AT
    for (let i = 0; i < 250; i++) {
      const flow = `f${i}`
      fair.enqueue(flow, d(flow), i)
      fair.grant(flow, d(flow), fair.order.score(flow) as number)
    }
    // No tag is at or below V yet; the class is quiet and V >= 2^40: V jumps to the largest tag, and
    // 100 tags go per call until none is left, then V is 0.
    const largest = fair.tags.last()?.[1] as number
    fair.endAdmission()
    expect(fair.tags.size).toBe(150)
    expect(fair.v[6]).toBe(largest - offset)
    fair.rebase()
    fair.rebase()
    expect(fair.tags.size).toBe(0)
    expect(fair.v[6]).toBe(0)
    expect(fair.enqueue('late', d('late'), 7)).toBe(offset + 7)
  })
})
