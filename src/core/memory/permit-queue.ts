// A permit set's queue in memory, the twin of lib/permit-queue.lua: expired holders and dead waiters
// out (purge()), free permits to the head of the queue (admit(), FIFO, G5), and when a name is idle.
import type { Grant } from '../protocol/store.js'
import { tokenWeight } from '../weight.js'
import { nowUs } from './clock.js'
import { admitFair } from './permit-fair.js'
import { nextFence, type PermitSet } from './permit-state.js'

/** Drop expired holders and dead waiters (lua purge()), when something may be due (`purgeAt`). */
export function purge(set: PermitSet, now: number): void {
  if (now < set.purgeAt) return
  let next = Number.POSITIVE_INFINITY
  for (const [token, h] of set.holders) {
    if (h.expiresAt <= now) {
      set.holders.delete(token)
      set.used -= h.weight
      if (h.capped) set.fair?.free(h.capped, h.weight)
    } else if (h.expiresAt < next) next = h.expiresAt
  }
  for (const [token, w] of set.queue) {
    if (w.heartbeat <= now) {
      set.queue.delete(token)
      set.fair?.leave(token, w.disc)
    } else if (w.heartbeat < next) next = w.heartbeat
  }
  set.purgeAt = next
}

/** lua admit(): hand free permits to the head of the queue; returns the grants to publish. */
export function admit(set: PermitSet, permits: number, now: number, fairCall: boolean): Grant[] {
  if (set.fair) return admitFair(set, set.fair, permits, now, fairCall)
  const granted: Grant[] = []
  let free = permits - set.used
  for (const [token, waiter] of set.queue) {
    // FIFO with weights: a head whose permits are not free yet waits, and everyone behind it.
    const weight = tokenWeight(token)
    if (weight > free) break
    set.queue.delete(token)
    const holder = { expiresAt: now + waiter.ttlMs, fence: nextFence(set), weight, ops: waiter.ops }
    set.holders.set(token, holder)
    set.used += weight
    set.purgeAt = Math.min(set.purgeAt, holder.expiresAt)
    for (const op of waiter.ops ?? [token])
      granted.push({ token, op, fence: holder.fence, expiresAt: holder.expiresAt })
    free -= weight
  }
  return granted
}

/** Nothing held or queued, and the last fence is behind the clock (lua settle() keeps it otherwise):
 * the name can be forgotten. */
export function isIdle(set: PermitSet): boolean {
  return set.holders.size === 0 && set.queue.size === 0 && set.lastFence < nowUs()
}
