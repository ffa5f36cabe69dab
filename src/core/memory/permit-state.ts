// One name's permit set in memory: its holders, its queue and its fences, the twin of the keys of
// lib/permits.lua (H Q W M F), with lib/permit-fence.lua's fences and lib/permit-holds.lua's earliest
// lease.
import { nowUs } from './clock.js'
import type { FairQueue, TokenDiscipline } from './fair-queue.js'

export interface Holder {
  expiresAt: number
  fence: number
  /** Permits the hold counts for (its token's weight). */
  weight: number
  /** A reentrant owner's acquisitions holding through the token (lua a:<tok>); undefined for a fresh
   * token, which is its own acquisition. */
  ops: string[] | undefined
  /** A capped flow's hold in a fair queue (its permits count against the flow's cap until it ends). */
  capped?: TokenDiscipline
}
export interface Waiter {
  heartbeat: number
  ttlMs: number
  /** A reentrant owner's acquisitions waiting on the token (lua t:<tok>); undefined for a fresh token. */
  ops: string[] | undefined
  /** Its ticket (lua M n): arrival order, a fair queue's tie-break. */
  ticket: number
  /** Its discipline, when it joined a fair queue through a fair call. */
  disc?: TokenDiscipline
}
/** One name's state: the in-memory twin of the H, Q, W and M keys. */
export interface PermitSet {
  holders: Map<string, Holder>
  /** Permits held: the holders' weights (lua ZCARD H). */
  used: number
  /** Insertion order is ticket order (FIFO). With `fair`, every waiter, parked ones included: the
   * fair queue keeps the order, this map the waiters' specs. */
  queue: Map<string, Waiter>
  /** The last ticket (lua M n). */
  tickets: number
  /** The discipline's state, from the first fair call on the name until it is idle. */
  fair?: FairQueue
  lastFence: number
  /** No holder expires and no waiter lapses before this (a lower bound: renewals only push expiries
   * later), so purge() scans only when something may be due, not on every call. */
  purgeAt: number
}

/** lua next_fence(): one more than the last, and never below the microsecond clock (G7). */
export function nextFence(set: PermitSet): number {
  set.lastFence = Math.max(set.lastFence + 1, nowUs())
  return set.lastFence
}

/** lua next_expiry(): the earliest lease expiry among the holders, 0 when none. */
export function nextExpiry(set: PermitSet): number {
  let min = 0
  for (const h of set.holders.values()) if (min === 0 || h.expiresAt < min) min = h.expiresAt
  return min
}
