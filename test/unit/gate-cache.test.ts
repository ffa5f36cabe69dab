// The bounded two-generation cache of gates per bucket (admission/buckets.ts).
import { describe, expect, it } from 'vitest'
import { GateCache } from '../../src/admission/buckets.js'

describe('GateCache', () => {
  it('creates a gate once per key and hands the same one back', () => {
    let created = 0
    const cache = new GateCache((key) => ({ key, n: created++ }), 10)
    const a = cache.get('a')
    expect(cache.get('a')).toBe(a)
    expect(cache.get('b')).not.toBe(a)
    expect(created).toBe(2)
  })

  it('stays within its bound under a flood of keys, and keeps a key in use', () => {
    const cache = new GateCache((key) => ({ key }), 100)
    const hot = cache.get('hot')
    for (let i = 0; i < 10_000; i++) {
      cache.get(`tenant-${i}`)
      if (i % 40 === 0) expect(cache.get('hot')).toBe(hot) // used within every generation
      expect(cache.size).toBeLessThanOrEqual(100)
    }
    expect(cache.get('hot')).toBe(hot)
  })

  it('forgets a key unused for two generations (a new gate: leases live in the store)', () => {
    const cache = new GateCache((key) => ({ key }), 4)
    const cold = cache.get('cold')
    for (let i = 0; i < 4; i++) cache.get(`k${i}`)
    expect(cache.get('cold')).not.toBe(cold)
  })
})
