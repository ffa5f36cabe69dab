// The memory twin of lua/permit-*.lua (G11): a fair FIFO permit set per name, the same rules step by
// step, on the same clock discipline (a monotonic clock standing in for Redis TIME). Each method
// mirrors the script of the same name; lua/lib/permits.lua explains the rules.
import type { KeySpace } from '../keys.js'
import type {
  AcquireReply,
  AcquireRequest,
  Acquisition,
  Grant,
  PermitFamily,
  PermitStats,
  RecheckReply,
  ReleaseResult,
  RenewReply,
  WaiterState,
} from '../protocol/store.js'
import { nowMs, nowUs } from './clock.js'
import { queuePosition } from './rwlocks.js'
import { tokenWeight } from '../weight.js'

interface Holder {
  expiresAt: number
  fence: number
  /** Permits the hold counts for (its token's weight). */
  weight: number
  /** A reentrant owner's acquisitions holding through the token (lua a:<tok>); undefined for a fresh
   * token, which is its own acquisition. */
  ops: string[] | undefined
}
interface Waiter {
  heartbeat: number
  ttlMs: number
  /** A reentrant owner's acquisitions waiting on the token (lua t:<tok>); undefined for a fresh token. */
  ops: string[] | undefined
}
/** One name's state: the in-memory twin of the H, Q, W and M keys. */
interface PermitSet {
  holders: Map<string, Holder>
  /** Permits held: the holders' weights (lua ZCARD H). */
  used: number
  /** Insertion order is ticket order (FIFO). */
  queue: Map<string, Waiter>
  lastFence: number
  /** No holder expires and no waiter lapses before this (a lower bound: renewals only push expiries
   * later), so purge() scans only when something may be due, not on every call. */
  purgeAt: number
}

/** P of lib/permits.lua: an override, or the fleet's adaptive limit and the version of its step. */
interface StoredLimit {
  permits: number
  adaptive: boolean
  version: number
}

export class MemoryPermitSets implements PermitFamily {
  /** State per name (space.base). */
  readonly sets = new Map<string, PermitSet>()
  /** Run-time permits per name (setPermits): configuration, kept while the name is idle. */
  /** Run-time limits per name (P in lib/permits.lua): an override, or the fleet's adaptive limit
   * (`until`: it runs out then, as the key's expiry in Redis). */
  private readonly limits = new Map<string, StoredLimit & { until: number }>()

  constructor(
    /** Deliver grants to the space's subscribers (asynchronously, like a pub/sub message). */
    private readonly publish: (space: KeySpace, grants: Grant[]) => void,
  ) {}

  /** lua permit-acquire.lua for one token: a token that holds or waits gets its grant or place back
   * (with a new `op`, the acquisition re-enters or waits with the owner's); a fresh one takes a permit
   * or queues. */
  async acquire(space: KeySpace, r: AcquireRequest): Promise<AcquireReply> {
    return this.acquireNow(space, r)
  }

  /** acquire(), answered synchronously (PermitFamily.acquireNow). */
  acquireNow(space: KeySpace, r: AcquireRequest): AcquireReply {
    const now = nowMs()
    const set = this.open(space, now)
    const permits = this.limit(space, r.permits)
    this.admit(space, set, permits, now)
    const held = set.holders.get(r.token)
    if (held) {
      if (r.op !== undefined && !held.ops?.includes(r.op)) {
        held.ops = [...(held.ops ?? []), r.op]
        held.expiresAt = Math.max(held.expiresAt, now + r.ttlMs)
      }
      return { granted: true, fence: held.fence, expiresAt: held.expiresAt, now, holders: set.used }
    }
    const waiting = set.queue.get(r.token)
    if (waiting) {
      let position = queuePosition(set.queue, r.token)
      if (r.op !== undefined && !waiting.ops?.includes(r.op)) {
        if (!r.enqueue) position = -1
        else {
          waiting.ops = [...(waiting.ops ?? []), r.op]
          waiting.heartbeat = Math.max(waiting.heartbeat, now + r.waiterTtlMs)
        }
      }
      return { granted: false, position, nextExpiry: nextExpiry(set), now }
    }
    const weight = tokenWeight(r.token)
    if (set.queue.size === 0 && set.used + weight <= permits) {
      const holder = {
        expiresAt: now + r.ttlMs,
        fence: nextFence(set),
        weight,
        ops: r.op === undefined ? undefined : [r.op],
      }
      set.holders.set(r.token, holder)
      set.used += weight
      set.purgeAt = Math.min(set.purgeAt, holder.expiresAt)
      return {
        granted: true,
        fence: holder.fence,
        expiresAt: holder.expiresAt,
        now,
        holders: set.used,
      }
    }
    if (!r.enqueue) return { granted: false, position: -1, nextExpiry: nextExpiry(set), now }
    // As in Lua: a permit handed over later starts with at most the heartbeat ttl, renewed from there.
    set.purgeAt = Math.min(set.purgeAt, now + r.waiterTtlMs)
    set.queue.set(r.token, {
      heartbeat: now + r.waiterTtlMs,
      ttlMs: Math.min(r.ttlMs, r.waiterTtlMs),
      ops: r.op === undefined ? undefined : [r.op],
    })
    return {
      granted: false,
      position: set.queue.size - 1,
      nextExpiry: nextExpiry(set),
      now,
    }
  }

  /** lua permit-release.lua for one token. */
  async release(space: KeySpace, token: string, permits: number, op?: string): Promise<ReleaseResult> {
    return this.releaseNow(space, token, permits, op)
  }

  /** release(), answered synchronously (PermitFamily.releaseNow). */
  releaseNow(space: KeySpace, token: string, permits: number, op?: string): ReleaseResult {
    const now = nowMs()
    const set = this.open(space, now)
    let result: ReleaseResult = 'none'
    const held = set.holders.get(token)
    if (held) {
      if (op !== undefined && held.ops) {
        if (!held.ops.includes(op)) return 'none'
        held.ops = held.ops.filter((id) => id !== op)
        if (held.ops.length > 0) return 'decremented'
      }
      set.holders.delete(token)
      set.used -= held.weight
      result = 'freed'
    } else {
      const waiter = set.queue.get(token)
      if (waiter) {
        if (op !== undefined && waiter.ops) {
          if (!waiter.ops.includes(op)) return 'none'
          waiter.ops = waiter.ops.filter((id) => id !== op)
          if (waiter.ops.length > 0) return 'dequeued'
        }
        set.queue.delete(token)
        result = 'dequeued'
      }
    }
    this.admit(space, set, this.limit(space, permits), now)
    this.settle(space, set)
    return result
  }

  async renew(space: KeySpace, ttlMs: number, holds: readonly Acquisition[]): Promise<RenewReply> {
    const now = nowMs()
    const set = this.sets.get(space.base)
    const expiresAt = holds.map(({ token, op }) => {
      const held = set?.holders.get(token)
      if (!held || held.expiresAt <= now) return 0
      if (op !== undefined && held.ops && !held.ops.includes(op)) return 0
      held.expiresAt = Math.max(held.expiresAt, now + ttlMs)
      return held.expiresAt
    })
    return { now, expiresAt }
  }

  async recheck(
    space: KeySpace,
    permits: number,
    waiterTtlMs: number,
    waits: readonly Acquisition[],
  ): Promise<RecheckReply> {
    const now = nowMs()
    const set = this.open(space, now)
    this.admit(space, set, this.limit(space, permits), now)
    const states = waits.map(({ token, op }): WaiterState => {
      const held = set.holders.get(token)
      if (held && (op === undefined || held.ops?.includes(op)))
        return { state: 'granted', fence: held.fence, expiresAt: held.expiresAt }
      const waiter = set.queue.get(token)
      if (!waiter || (op !== undefined && !waiter.ops?.includes(op))) return { state: 'gone' }
      waiter.heartbeat = Math.max(waiter.heartbeat, now + waiterTtlMs)
      return { state: 'queued', position: queuePosition(set.queue, token) }
    })
    const reply = { now, nextExpiry: nextExpiry(set), states }
    this.settle(space, set)
    return reply
  }

  async inspect(space: KeySpace): Promise<PermitStats> {
    const now = nowMs()
    const set = this.sets.get(space.base)
    const stored = this.stored(space, now)
    const limit = stored && !stored.adaptive ? stored.permits : undefined
    const adaptive = stored?.adaptive ? stored.permits : undefined
    if (!set) return { holders: 0, queued: 0, limit, adaptive }
    let holders = 0
    let queued = 0
    for (const h of set.holders.values()) if (h.expiresAt > now) holders += h.weight
    for (const w of set.queue.values()) if (w.heartbeat > now) queued++
    return { holders, queued, limit, adaptive }
  }

  async setLimit(
    space: KeySpace,
    permits: number | undefined,
    own: number,
    adaptive?: { ttlMs: number; version: number },
  ): Promise<boolean> {
    const now = nowMs()
    let written = true
    if (adaptive) {
      const current = this.stored(space, now)
      if (current && !current.adaptive)
        written = false // an override wins while it is set
      else if (current && current.version >= adaptive.version)
        written = false // a later step's limit is there
      else if (permits !== undefined)
        this.limits.set(space.base, {
          permits,
          adaptive: true,
          until: now + adaptive.ttlMs,
          version: adaptive.version,
        })
    } else if (permits === undefined) {
      // Drops an override, never the fleet's adaptive limit.
      if (!this.stored(space, now)?.adaptive) this.limits.delete(space.base)
    } else
      this.limits.set(space.base, {
        permits,
        adaptive: false,
        until: Number.POSITIVE_INFINITY,
        version: -1,
      })
    const set = this.sets.get(space.base)
    if (!set || set.queue.size === 0) return written
    purge(set, now)
    this.admit(space, set, this.limit(space, own), now)
    this.settle(space, set)
    return written
  }

  /** The run-time limit of a name, if one is set and has not run out. */
  private stored(space: KeySpace, now: number): StoredLimit | undefined {
    const stored = this.limits.get(space.base)
    if (stored && stored.until <= now) {
      this.limits.delete(space.base)
      return undefined
    }
    return stored
  }

  private limit(space: KeySpace, requested: number): number {
    return this.stored(space, nowMs())?.permits ?? requested
  }

  /** Forget names whose leases and waiters simply ran out, as Redis expires their keys. */
  sweep(now: number): void {
    for (const [base, set] of this.sets) {
      purge(set, now)
      if (isIdle(set)) this.sets.delete(base)
    }
  }

  /** The set for a name after dropping expired holders and dead waiters (lua purge()). */
  private open(space: KeySpace, now: number): PermitSet {
    let set = this.sets.get(space.base)
    if (!set) {
      set = {
        holders: new Map(),
        used: 0,
        queue: new Map(),
        lastFence: 0,
        purgeAt: Number.POSITIVE_INFINITY,
      }
      this.sets.set(space.base, set)
      return set
    }
    purge(set, now)
    return set
  }

  /** lua admit(): hand free permits to the head of the queue and notify asynchronously. */
  private admit(space: KeySpace, set: PermitSet, permits: number, now: number): void {
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
    if (granted.length > 0) this.publish(space, granted)
  }

  /** lua settle(): forget a name once nothing is held or queued. */
  private settle(space: KeySpace, set: PermitSet): void {
    if (isIdle(set)) this.sets.delete(space.base)
  }
}

/** Nothing held or queued, and the last fence is behind the clock (lua settle() keeps it otherwise). */
function isIdle(set: PermitSet): boolean {
  return set.holders.size === 0 && set.queue.size === 0 && set.lastFence < nowUs()
}

function purge(set: PermitSet, now: number): void {
  if (now < set.purgeAt) return
  let next = Number.POSITIVE_INFINITY
  for (const [token, h] of set.holders) {
    if (h.expiresAt <= now) {
      set.holders.delete(token)
      set.used -= h.weight
    } else if (h.expiresAt < next) next = h.expiresAt
  }
  for (const [token, w] of set.queue) {
    if (w.heartbeat <= now) set.queue.delete(token)
    else if (w.heartbeat < next) next = w.heartbeat
  }
  set.purgeAt = next
}

function nextFence(set: PermitSet): number {
  set.lastFence = Math.max(set.lastFence + 1, nowUs())
  return set.lastFence
}

function nextExpiry(set: PermitSet): number {
  let min = 0
  for (const h of set.holders.values()) if (min === 0 || h.expiresAt < min) min = h.expiresAt
  return min
}
