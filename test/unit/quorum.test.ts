// RedLock's arithmetic without Redis: majority, drift, validity, when an attempt is decided, and what a
// renewal round means.
import { describe, expect, it } from 'vitest'
import {
  decided,
  driftOf,
  majority,
  renewalVerdict,
  validityMs,
} from '../../src/primitives/redlock/quorum.js'

const tally = (granted: number, busy: number, failed: number, nodes = 5) => ({
  granted,
  busy,
  failed,
  nodes,
  quorum: majority(nodes),
  validityExpired: false,
})

describe('G1: RedLock quorum', () => {
  it.each([
    [3, 2],
    [4, 3],
    [5, 3],
    [7, 4],
  ])('a majority of %i nodes is %i', (nodes, quorum) => {
    expect(majority(nodes)).toBe(quorum)
  })

  it('allows ceil(ttl x driftFactor) + clockDriftMs of drift, and what is left is the validity', () => {
    expect(driftOf(10_000, 0.01, 2)).toBe(102)
    expect(driftOf(1, 0.01, 2)).toBe(3)
    expect(validityMs(10_000, 102, 50.7)).toBe(9847)
    expect(validityMs(100, 3, 200)).toBeLessThanOrEqual(0)
  })

  it('decides as soon as a majority granted, a majority is out of reach, or every node answered', () => {
    expect(decided(tally(3, 0, 0))).toBe(true) // majority
    expect(decided(tally(2, 0, 0))).toBe(false) // 3 still open
    expect(decided(tally(2, 2, 0))).toBe(false) // 1 open could make 3
    expect(decided(tally(1, 2, 1))).toBe(true) // 1 open cannot make 3
    expect(decided(tally(2, 2, 1))).toBe(true) // all answered
  })

  it('keeps a renewed lease with a majority within validity, loses it when a majority cannot hold it', () => {
    expect(renewalVerdict(3, 2, 5, 3, 100)).toBe('held')
    expect(renewalVerdict(3, 0, 5, 3, 0)).toBe('unsure') // majority, but validity used up
    expect(renewalVerdict(2, 3, 5, 3, 100)).toBe('lost')
    expect(renewalVerdict(2, 1, 5, 3, 100)).toBe('unsure') // 2 did not answer: retry
  })
})
