// The fair token's grammar (core/fair.ts): what every store script and the memory twin read a
// discipline from, so each field must round-trip exactly and nothing a user names can break it.
import { describe, expect, it } from 'vitest'
import { ConfigError } from '../../src/core/errors.js'
import {
  DEFAULT_FLOW,
  FLOW_ID_LENGTH,
  fairToken,
  flowId,
  parseFairToken,
  priorityName,
  priorityNumber,
  tagCost,
} from '../../src/core/fair.js'
import { tokenWeight } from '../../src/core/weight.js'

describe('fair tokens', () => {
  it('round-trip every field, and weight.ts reads the weight of a fair token', () => {
    const discipline = { priority: 6, flow: flowId('acme'), flowWeight: 3, flowMax: 8 }
    const token = fairToken('k3Jx9.a', 5, discipline)
    expect(parseFairToken(token)).toEqual({ id: 'k3Jx9.a', weight: 5, ...discipline })
    expect(tokenWeight(token)).toBe(5)
    // (Before: Number('5.6.<flow>.3.8') is NaN, so a fair token of weight 5 counted 1.)
    expect(tokenWeight(fairToken('id', 1, { ...discipline, flow: DEFAULT_FLOW }))).toBe(1)
  })

  it('a plain token, weighted or not, has no discipline', () => {
    expect(parseFairToken('abc')).toBeUndefined()
    expect(parseFairToken('abc*7')).toBeUndefined()
    expect(tokenWeight('abc*7')).toBe(7)
  })

  it('a hostile flow name becomes 11 url-safe characters: no separator, no growth', () => {
    for (const name of ['a.b.c', 'x y\n', '*'.repeat(256), 'tenant-1', '🙂']) {
      const id = flowId(name)
      expect(id).toMatch(new RegExp(`^[A-Za-z0-9_-]{${FLOW_ID_LENGTH}}$`))
      const token = fairToken('id', 2, { priority: 2, flow: id, flowWeight: 1, flowMax: 0 })
      expect(parseFairToken(token)?.flow).toBe(id)
    }
    expect(flowId('a')).not.toBe(flowId('b'))
    expect(flowId('')).toBe(DEFAULT_FLOW)
  })

  it('priorities: the three names, 0-7, anything else an error naming the option', () => {
    expect(priorityNumber('critical')).toBe(6)
    expect(priorityNumber(undefined)).toBe(4)
    expect(priorityNumber(0)).toBe(0)
    expect(priorityName(2)).toBe('sheddable')
    expect(priorityName(7)).toBe('p7')
    for (const bad of [8, -1, 1.5, 'urgent', 'toString'])
      expect(() => priorityNumber(bad as never, 'priority')).toThrow(ConfigError)
    expect(() => priorityNumber('urgent' as never)).toThrow(/"priority".*'critical', 'standard', 'sheddable'/)
  })

  it('tag costs are integers, one permit at weight 1 is 4096 units', () => {
    expect(tagCost(1, 1)).toBe(4096)
    expect(tagCost(1, 100)).toBe(40)
    expect(tagCost(3, 7)).toBe(1755)
  })
})
