import type { KeySpace } from './keys.js'
import { MemoryRwLocks, queuePosition } from './memory-rwlock.js'
import { defined, isPlainObjectOrUndefined, keyPrefix } from './options.js'
import type {
  AcquireReply,
  AcquireRequest,
  Grant,
  PermitStats,
  RecheckReply,
  ReleaseResult,
  RenewReply,
  RwAcquireReply,
  RwAcquireRequest,
  RwMode,
  RwStats,
  Store,
  Unsubscribe,
  Acquisition,
  WaiterState,
} from './store.js'

export interface MemoryStoreOptions {
  /** @default 'tollgate' */
  prefix?: string
}

/**
 * The embedded store for a single process: the same fair permit set as lua/permit-*.lua and the same
 * read/write lock as lua/rwlock-*.lua, in memory (G11). Limits are per process: use
 * createRedisStore() to share them across instances.
 */
export function createMemoryStore(options?: MemoryStoreOptions): Store {
  isPlainObjectOrUndefined('options', options)
  const config = { prefix: 'tollgate', ...defined(options) }
  return new MemoryStore(keyPrefix('prefix', config.prefix))
}

interface Holder {
  expiresAt: number
  fence: number
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
  /** Insertion order is ticket order (FIFO). */
  queue: Map<string, Waiter>
  lastFence: number
}

// Epoch milliseconds from a monotonic source: wall-clock jumps do not move leases.
const origin = performance.timeOrigin
const nowMs = () => Math.floor(origin + performance.now())
const nowUs = () => Math.floor((origin + performance.now()) * 1000)

class MemoryStore implements Store {
  readonly kind = 'memory'
  /** Our clock is monotonic (performance.now); Date.now() may have been stepped since start. */
  get clockOffsetMs(): number {
    return nowMs() - Date.now()
  }
  readonly notificationsHealthy = true
  private readonly sets = new Map<string, PermitSet>()
  /** Run-time permits per name (setPermits): configuration, kept while the name is idle. */
  private readonly limits = new Map<string, number>()
  private readonly listeners = new Map<string, Set<(grant: Grant) => void>>()
  private readonly rw = new MemoryRwLocks({ nowMs, nowUs }, (space, grants) => this.publish(space, grants))
  // Names whose leases simply ran out are forgotten by a sweep, as Redis expires their keys.
  private readonly sweeper = setInterval(() => this.sweep(), 1000).unref()

  constructor(readonly prefix: string) {}

  /** lua permit-acquire.lua for one token: a token that holds or waits gets its grant or place back
   * (with a new `op`, the acquisition re-enters or waits with the owner's); a fresh one takes a permit
   * or queues. */
  async acquire(space: KeySpace, r: AcquireRequest): Promise<AcquireReply> {
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
      return { granted: true, fence: held.fence, expiresAt: held.expiresAt, now, holders: set.holders.size }
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
    if (set.queue.size === 0 && set.holders.size < permits) {
      const holder = {
        expiresAt: now + r.ttlMs,
        fence: nextFence(set),
        ops: r.op === undefined ? undefined : [r.op],
      }
      set.holders.set(r.token, holder)
      return {
        granted: true,
        fence: holder.fence,
        expiresAt: holder.expiresAt,
        now,
        holders: set.holders.size,
      }
    }
    if (!r.enqueue) return { granted: false, position: -1, nextExpiry: nextExpiry(set), now }
    // As in Lua: a permit handed over later starts with at most the heartbeat ttl, renewed from there.
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
    const limit = this.limits.get(space.base)
    if (!set) return { holders: 0, queued: 0, limit }
    let holders = 0
    let queued = 0
    for (const h of set.holders.values()) if (h.expiresAt > now) holders++
    for (const w of set.queue.values()) if (w.heartbeat > now) queued++
    return { holders, queued, limit }
  }

  async setLimit(space: KeySpace, permits: number | undefined): Promise<void> {
    if (permits === undefined) {
      this.limits.delete(space.base)
      return
    }
    this.limits.set(space.base, permits)
    const now = nowMs()
    const set = this.open(space, now)
    this.admit(space, set, permits, now)
    this.settle(space, set)
  }

  async rwAcquire(space: KeySpace, request: RwAcquireRequest): Promise<RwAcquireReply> {
    return this.rw.acquire(space, request)
  }

  async rwRelease(space: KeySpace, token: string, mode: RwMode, op: string): Promise<ReleaseResult> {
    return this.rw.release(space, token, mode, op)
  }

  async rwRenew(
    space: KeySpace,
    mode: RwMode,
    ttlMs: number,
    holds: readonly Acquisition[],
  ): Promise<RenewReply> {
    return this.rw.renew(space, mode, ttlMs, holds)
  }

  async rwRecheck(
    space: KeySpace,
    waiterTtlMs: number,
    waits: readonly Acquisition[],
  ): Promise<RecheckReply> {
    return this.rw.recheck(space, waiterTtlMs, waits)
  }

  async rwInspect(space: KeySpace): Promise<RwStats> {
    return this.rw.inspect(space)
  }

  private limit(space: KeySpace, requested: number): number {
    return this.limits.get(space.base) ?? requested
  }

  async subscribe(space: KeySpace, onGrant: (grant: Grant) => void): Promise<Unsubscribe> {
    let set = this.listeners.get(space.channel)
    if (!set) {
      set = new Set()
      this.listeners.set(space.channel, set)
    }
    set.add(onGrant)
    return () => {
      const current = this.listeners.get(space.channel)
      if (current?.delete(onGrant) && current.size === 0) this.listeners.delete(space.channel)
    }
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper)
    this.listeners.clear()
  }

  private sweep(): void {
    const now = nowMs()
    for (const [base, set] of this.sets) {
      purge(set, now)
      if (isIdle(set)) this.sets.delete(base)
    }
    this.rw.sweep(now)
  }

  /** Number of names with state (permit sets and read/write locks): the memory twin of "keys left in
   * Redis". */
  get size(): number {
    return this.sets.size + this.rw.size
  }

  /** The set for a name after dropping expired holders and dead waiters (lua purge()). */
  private open(space: KeySpace, now: number): PermitSet {
    let set = this.sets.get(space.base)
    if (!set) {
      set = { holders: new Map(), queue: new Map(), lastFence: 0 }
      this.sets.set(space.base, set)
      return set
    }
    purge(set, now)
    return set
  }

  /** lua admit(): hand free permits to the head of the queue and notify asynchronously. */
  private admit(space: KeySpace, set: PermitSet, permits: number, now: number): void {
    const granted: Grant[] = []
    let free = permits - set.holders.size
    for (const [token, waiter] of set.queue) {
      if (free <= 0) break
      set.queue.delete(token)
      const holder = { expiresAt: now + waiter.ttlMs, fence: nextFence(set), ops: waiter.ops }
      set.holders.set(token, holder)
      for (const op of waiter.ops ?? [token])
        granted.push({ token, op, fence: holder.fence, expiresAt: holder.expiresAt })
      free--
    }
    if (granted.length > 0) this.publish(space, granted)
  }

  /** Tell the space's subscribers about grants. */
  private publish(space: KeySpace, grants: Grant[]): void {
    const listeners = this.listeners.get(space.channel)
    if (!listeners) return
    // Delivered later, like a pub/sub message: never inside the caller's call stack.
    setImmediate(() => {
      for (const grant of grants) for (const listener of listeners) listener(grant)
    })
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
  for (const [token, h] of set.holders) if (h.expiresAt <= now) set.holders.delete(token)
  for (const [token, w] of set.queue) if (w.heartbeat <= now) set.queue.delete(token)
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
