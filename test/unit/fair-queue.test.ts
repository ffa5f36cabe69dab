// The fair queue's parts in memory (src/core/memory/sorted-set.ts, fair-queue.ts): the sorted set
// must order exactly as a Redis ZSET does (the differential test compares the two stores step by
// step), and the discipline's arithmetic must be the design's integers.
import { describe, expect, it } from 'vitest'
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
