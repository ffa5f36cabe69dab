// RedLock's arithmetic, as pure functions (unit-tested without Redis): the majority, the drift
// allowance, when an attempt is decided, the validity left, and what a round of renewals means.
import type { QuorumTally } from '../../core/errors.js'

/** Grants needed out of `nodes`: floor(nodes / 2) + 1. */
export function majority(nodes: number): number {
  return Math.floor(nodes / 2) + 1
}

/** The clock drift allowed for a lease of `ttlMs`: ceil(ttlMs x driftFactor) + clockDriftMs. */
export function driftOf(ttlMs: number, driftFactor: number, clockDriftMs: number): number {
  return Math.ceil(ttlMs * driftFactor) + clockDriftMs
}

/** Whole ms of validity left `elapsedMs` after an attempt started: ttl − drift − elapsed (<= 0: none). */
export function validityMs(ttlMs: number, driftMs: number, elapsedMs: number): number {
  return Math.floor(ttlMs - driftMs - elapsedMs)
}

/** An attempt is decided as soon as a majority granted, a majority can no longer grant, or every node
 * answered (or timed out). */
export function decided(tally: QuorumTally): boolean {
  const open = tally.nodes - tally.granted - tally.busy - tally.failed
  return tally.granted >= tally.quorum || tally.granted + open < tally.quorum || open === 0
}

/** What one token's renewal round on every node came to: still held by a majority (within validity),
 * surely lost (too few nodes can still hold it), or unsure (too few answered: retry until the lease's
 * deadline, which the last successful renewal's majority still guarantees). */
export function renewalVerdict(
  held: number,
  gone: number,
  nodes: number,
  quorum: number,
  validity: number,
): 'held' | 'lost' | 'unsure' {
  if (held >= quorum && validity > 0) return 'held'
  if (nodes - gone < quorum) return 'lost'
  return 'unsure'
}
