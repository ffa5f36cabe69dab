// The memory twin of lua/rwlock-*.lua (G11): one writer-preferring read/write lock per name, the same
// rules step by step. Each method mirrors the script of the same name; lua/lib/rwlock.lua explains them.
import type { KeySpace } from '../keys.js'
import type {
  Grant,
  RecheckReply,
  ReleaseResult,
  RenewReply,
  RwAcquireReply,
  RwAcquireRequest,
  RwMode,
  RwStats,
  Acquisition,
  RwLockFamily,
  WaiterState,
} from '../protocol/store.js'
import { nowMs, nowUs } from './clock.js'

interface Hold {
  expiresAt: number
  fence: number
  /** The acquisitions holding through it (lua ar:/aw:); released one by one, freed with the last. */
  ops: string[]
}
interface Waiter {
  mode: RwMode
  heartbeat: number
  /** Lease length when the lock is handed over: min(ttl, waiter ttl), as in Lua. */
  ttlMs: number
  /** The acquisitions waiting on the token (handed the lock together). */
  ops: string[]
}
/** One lock's state: the in-memory twin of the R, X, Q, W and M keys of lua/lib/rwlock.lua. */
interface RwState {
  holds: Record<RwMode, Map<string, Hold>>
  /** Insertion order is ticket order (one FIFO queue for both modes). */
  queue: Map<string, Waiter>
  lastFence: number
}

/**
 * The read/write locks of a memory store: the same rules as lua/rwlock-*.lua, in-process (G11).
 * Each method mirrors the script of the same name; see lua/lib/rwlock.lua for the rules.
 */
export class MemoryRwLocks implements RwLockFamily {
  private readonly locks = new Map<string, RwState>()

  private readonly clock = { nowMs, nowUs }

  constructor(
    /** Deliver grants to the space's subscribers (asynchronously, like a pub/sub message). */
    private readonly publish: (space: KeySpace, grants: Grant[]) => void,
  ) {}

  /** Number of locks with state: the memory twin of "keys left in Redis". */
  get size(): number {
    return this.locks.size
  }

  async acquire(space: KeySpace, r: RwAcquireRequest): Promise<RwAcquireReply> {
    const now = this.clock.nowMs()
    const lock = this.open(space, now)
    this.admit(space, lock, now)
    const mine = lock.holds[r.mode].get(r.token)
    if (mine) {
      if (!mine.ops.includes(r.op)) {
        mine.ops.push(r.op)
        mine.expiresAt = Math.max(mine.expiresAt, now + r.ttlMs)
      }
      return { granted: true, fence: mine.fence, expiresAt: mine.expiresAt, now }
    }
    const write = lock.holds.write.get(r.token)
    if (r.mode === 'read' && write) {
      const hold = { expiresAt: now + r.ttlMs, fence: write.fence, ops: [r.op] }
      lock.holds.read.set(r.token, hold)
      return { granted: true, fence: hold.fence, expiresAt: hold.expiresAt, now }
    }
    if (r.mode === 'write' && lock.holds.read.has(r.token)) return { granted: false, refused: 'upgrade', now }

    const waiting = lock.queue.get(r.token)
    if (waiting) {
      if (waiting.mode !== r.mode) return { granted: false, refused: 'waiting', now }
      if (!waiting.ops.includes(r.op)) {
        if (!r.enqueue) return { granted: false, position: -1, nextExpiry: nextExpiry(lock), now }
        waiting.ops.push(r.op)
        waiting.heartbeat = Math.max(waiting.heartbeat, now + r.waiterTtlMs)
      }
      return {
        granted: false,
        position: queuePosition(lock.queue, r.token),
        nextExpiry: nextExpiry(lock),
        now,
      }
    }
    if (
      lock.queue.size === 0 &&
      lock.holds.write.size === 0 &&
      (r.mode === 'read' || lock.holds.read.size === 0)
    ) {
      const hold = { expiresAt: now + r.ttlMs, fence: this.nextFence(lock), ops: [r.op] }
      lock.holds[r.mode].set(r.token, hold)
      return { granted: true, fence: hold.fence, expiresAt: hold.expiresAt, now }
    }
    if (!r.enqueue) return { granted: false, position: -1, nextExpiry: nextExpiry(lock), now }
    const heartbeat = now + r.waiterTtlMs
    lock.queue.set(r.token, {
      mode: r.mode,
      heartbeat,
      ttlMs: Math.min(r.ttlMs, r.waiterTtlMs),
      ops: [r.op],
    })
    return { granted: false, position: lock.queue.size - 1, nextExpiry: nextExpiry(lock), now }
  }

  async release(space: KeySpace, token: string, mode: RwMode, op: string): Promise<ReleaseResult> {
    const now = this.clock.nowMs()
    const lock = this.open(space, now)
    const result = this.giveBack(lock, token, mode, op)
    this.admit(space, lock, now)
    this.settle(space, lock)
    return result
  }

  /** lua rwlock-release.lua give_back(): one acquisition of the hold or the wait goes. */
  private giveBack(lock: RwState, token: string, mode: RwMode, op: string): ReleaseResult {
    const held = lock.holds[mode].get(token)
    if (held) {
      if (!held.ops.includes(op)) return 'none'
      held.ops = held.ops.filter((id) => id !== op)
      if (held.ops.length > 0) return 'decremented'
      lock.holds[mode].delete(token)
      return 'freed'
    }
    const waiting = lock.queue.get(token)
    if (!waiting || waiting.mode !== mode || !waiting.ops.includes(op)) return 'none'
    waiting.ops = waiting.ops.filter((id) => id !== op)
    if (waiting.ops.length === 0) lock.queue.delete(token)
    return 'dequeued'
  }

  async renew(
    space: KeySpace,
    mode: RwMode,
    ttlMs: number,
    acquisitions: readonly Acquisition[],
  ): Promise<RenewReply> {
    const now = this.clock.nowMs()
    const holds = this.locks.get(space.base)?.holds[mode]
    const expiresAt = acquisitions.map(({ token, op = token }) => {
      const held = holds?.get(token)
      if (!held || held.expiresAt <= now || !held.ops.includes(op)) return 0
      held.expiresAt = Math.max(held.expiresAt, now + ttlMs)
      return held.expiresAt
    })
    return { now, expiresAt }
  }

  async recheck(space: KeySpace, waiterTtlMs: number, waits: readonly Acquisition[]): Promise<RecheckReply> {
    const now = this.clock.nowMs()
    const lock = this.open(space, now)
    this.admit(space, lock, now)
    const states = waits.map(({ token, op = token }): WaiterState => {
      for (const held of [lock.holds.write.get(token), lock.holds.read.get(token)]) {
        if (held?.ops.includes(op)) return { state: 'granted', fence: held.fence, expiresAt: held.expiresAt }
      }
      const waiter = lock.queue.get(token)
      if (!waiter?.ops.includes(op)) return { state: 'gone' }
      waiter.heartbeat = Math.max(waiter.heartbeat, now + waiterTtlMs)
      return { state: 'queued', position: queuePosition(lock.queue, token) }
    })
    const reply = { now, nextExpiry: nextExpiry(lock), states }
    this.settle(space, lock)
    return reply
  }

  async inspect(space: KeySpace): Promise<RwStats> {
    const now = this.clock.nowMs()
    const lock = this.locks.get(space.base)
    if (!lock) return { readers: 0, writer: false, queued: 0 }
    const live = (entries: Iterable<{ expiresAt?: number; heartbeat?: number }>) => {
      let n = 0
      for (const e of entries) if ((e.expiresAt ?? e.heartbeat ?? 0) > now) n++
      return n
    }
    return {
      readers: live(lock.holds.read.values()),
      writer: live(lock.holds.write.values()) > 0,
      queued: live(lock.queue.values()),
    }
  }

  /** Forget locks whose leases and waiters simply ran out, as Redis expires their keys. */
  sweep(now: number): void {
    for (const [base, lock] of this.locks) {
      purge(lock, now)
      if (idle(lock, this.clock.nowUs())) this.locks.delete(base)
    }
  }

  /** The lock of a name after dropping expired holders and dead waiters (lua purge()). */
  private open(space: KeySpace, now: number): RwState {
    let lock = this.locks.get(space.base)
    if (!lock) {
      lock = { holds: { read: new Map(), write: new Map() }, queue: new Map(), lastFence: 0 }
      this.locks.set(space.base, lock)
      return lock
    }
    purge(lock, now)
    return lock
  }

  /** lua admit(): nothing while a writer holds; a writer at the head only when no reader holds; else
   * the whole run of readers at the head, up to the first queued writer. */
  private admit(space: KeySpace, lock: RwState, now: number): void {
    const granted: Grant[] = []
    let taken = 0
    if (lock.holds.write.size > 0) return
    for (const [token, waiter] of lock.queue) {
      if (waiter.mode === 'write' && (taken > 0 || lock.holds.read.size > 0)) break
      lock.queue.delete(token)
      const hold = { expiresAt: now + waiter.ttlMs, fence: this.nextFence(lock), ops: waiter.ops }
      lock.holds[waiter.mode].set(token, hold)
      taken++
      for (const op of waiter.ops) granted.push({ token, op, fence: hold.fence, expiresAt: hold.expiresAt })
      if (waiter.mode === 'write') break
    }
    if (granted.length > 0) this.publish(space, granted)
  }

  /** lua settle(): forget a lock once nothing is held or queued. */
  private settle(space: KeySpace, lock: RwState): void {
    if (idle(lock, this.clock.nowUs())) this.locks.delete(space.base)
  }

  private nextFence(lock: RwState): number {
    lock.lastFence = Math.max(lock.lastFence + 1, this.clock.nowUs())
    return lock.lastFence
  }
}

function purge(lock: RwState, now: number): void {
  for (const holds of [lock.holds.read, lock.holds.write])
    for (const [token, h] of holds) if (h.expiresAt <= now) holds.delete(token)
  for (const [token, w] of lock.queue) if (w.heartbeat <= now) lock.queue.delete(token)
}

/** Nothing held or queued, and the last fence is behind the clock (a run of readers takes fences
 * ahead of it; lua settle() keeps the last one until the clock has passed it, G7). */
function idle(lock: RwState, nowUs: number): boolean {
  return (
    lock.holds.read.size === 0 &&
    lock.holds.write.size === 0 &&
    lock.queue.size === 0 &&
    lock.lastFence < nowUs
  )
}

/** 0-based place of a token in an insertion-ordered queue (ZRANK), -1 when absent. */
export function queuePosition(queue: ReadonlyMap<string, unknown>, token: string): number {
  let i = 0
  for (const t of queue.keys()) {
    if (t === token) return i
    i++
  }
  return -1
}

function nextExpiry(lock: RwState): number {
  let min = 0
  for (const holds of [lock.holds.read, lock.holds.write])
    for (const h of holds.values()) if (min === 0 || h.expiresAt < min) min = h.expiresAt
  return min
}
