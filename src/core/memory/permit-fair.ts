// A permit set's fair queue in memory (a name called with `fair`), the permit set's side of
// lib/fair.lua: admission in the queue's order, the bounded queue's eviction, and the shed marks.
import type { Grant } from '../protocol/store.js'
import { tokenWeight } from '../weight.js'
import { FairQueue, type TokenDiscipline } from './fair-queue.js'
import { type Holder, nextFence, type PermitSet, type Waiter } from './permit-state.js'
import { SortedSet } from './sorted-set.js'

/** Shed marks one fair call prunes at most (lua: ZRANGEBYSCORE X -inf now LIMIT 0 100). */
export const SHED_PRUNE = 100

/** The fair queue of a name that had only plain waiters so far: they keep their tickets as scores. */
export function fairQueueOf(set: PermitSet): FairQueue {
  const fair = new FairQueue()
  for (const [token, waiter] of set.queue) fair.enqueue(token, undefined, waiter.ticket)
  return fair
}

/** lua admit() on a fair queue: the head of `order` first, each class before the next, fairly inside.
 * A capped flow's head at its cap parks and admission goes on; a live head whose permits are not free
 * stops it, lower classes included (G5). A plain call (a process without `overload`) never grants a
 * waiter with a discipline: it stops at the first. */
export function admitFair(
  set: PermitSet,
  fair: FairQueue,
  permits: number,
  now: number,
  fairCall: boolean,
): Grant[] {
  const granted: Grant[] = []
  let free = permits - set.used
  while (free > 0) {
    const head = fair.order.head()
    if (!head) break
    const [token, score] = head
    const waiter = set.queue.get(token) as Waiter
    const d = waiter.disc
    if (waiter.heartbeat <= now) {
      set.queue.delete(token)
      fair.leave(token, d)
      continue
    }
    if (d && !fairCall) break
    if (d && fair.mustPark(d)) {
      fair.park(token, d, score)
      continue
    }
    const weight = d ? d.weight : tokenWeight(token)
    if (weight > free) break
    set.queue.delete(token)
    fair.grant(token, d, score)
    const holder: Holder = { expiresAt: now + waiter.ttlMs, fence: nextFence(set), weight, ops: waiter.ops }
    if (d && d.flowMax > 0) holder.capped = d
    set.holders.set(token, holder)
    set.used += weight
    set.purgeAt = Math.min(set.purgeAt, holder.expiresAt)
    for (const op of waiter.ops ?? [token])
      granted.push({ token, op, fence: holder.fence, expiresAt: holder.expiresAt })
    free -= weight
  }
  if (fairCall) fair.endAdmission()
  return granted
}

/** lua fair.lua: the waiter a fair token that finds the queue at `maxQueued` may evict: a full queue
 * keeps the waiters that would be served first, so the tail (the last to be served) goes when the
 * arrival would be served before it: a lower class, or in the same class a flow further over its
 * share (never the arrival's own flow: its tail is ahead of it). One eviction per token, only if
 * that makes room. Undefined: the arrival is refused. */
export function victim(
  set: PermitSet,
  fair: FairQueue,
  d: TokenDiscipline,
  ticket: number,
  maxQueued: number,
): string | undefined {
  if (fair.order.size - 1 >= maxQueued) return undefined
  const last = fair.order.last()
  if (last === undefined) return undefined
  const [tail, tailScore] = last
  if (!set.queue.get(tail)?.disc) return undefined
  return fair.wouldScore(d, ticket) < tailScore ? tail : undefined
}

/** lua fair.lua evict(): the waiter leaves the queue unserved (refunded as any departure) and counts
 * as an eviction of its class (ShedMarks marks it). */
export function evict(set: PermitSet, fair: FairQueue, token: string): void {
  const waiter = set.queue.get(token) as Waiter
  set.queue.delete(token)
  fair.leave(token, waiter.disc)
  const p = (waiter.disc as TokenDiscipline).priority
  fair.x[p] = (fair.x[p] as number) + 1
}

/** Fair queues' shed marks per name (lua X): evicted token -> until when a resent acquire or a
 * re-check of it answers shed. Kept apart from the sets: a mark outlives an idle name. */
export class ShedMarks {
  private readonly marks = new Map<string, SortedSet>()

  /** `token` of the name `base` was evicted: it is shed until `until`. */
  add(base: string, token: string, until: number): void {
    let marks = this.marks.get(base)
    if (!marks) {
      marks = new SortedSet()
      this.marks.set(base, marks)
    }
    marks.add(token, until)
  }

  /** `token` of the name `base` is marked shed at `now`. */
  has(base: string, token: string, now: number): boolean {
    return (this.marks.get(base)?.score(token) ?? 0) > now
  }

  /** Drop marks of `base` that ran out, at most `most`; the name's marks go with the last. */
  prune(base: string, now: number, most: number): void {
    const marks = this.marks.get(base)
    if (!marks) return
    for (const token of marks.rangeByScore(Number.NEGATIVE_INFINITY, now, most)) marks.delete(token)
    if (marks.size === 0) this.marks.delete(base)
  }

  /** Drop every name's marks that ran out. */
  sweep(now: number): void {
    for (const base of this.marks.keys()) this.prune(base, now, Number.POSITIVE_INFINITY)
  }
}
