// The memory twin of lua/permit-*.lua (G11): a fair FIFO permit set per name, the same rules step by
// step, on the same clock discipline (a monotonic clock standing in for Redis TIME). Each method
// mirrors the script of the same name; lua/lib/permits.lua explains the rules.
//
// By concept, as lua/lib/ is: a name's state (permit-state.ts: holders, queue, fences), its queue
// (permit-queue.ts: purge, admit, idle), its run-time limit (permit-limits.ts). A name called with
// `fair` (a semaphore with `overload`) also gets a FairQueue (fair-queue.ts, the twin of
// lua/lib/fair.lua) that orders its waiters, admitted, evicted and marked shed by permit-fair.ts; a
// name never called with it allocates nothing more.
import type { KeySpace } from '../keys.js'
import type {
  AcquireReply,
  AcquireRequest,
  Acquisition,
  FairCall,
  FairPermitStats,
  Grant,
  PermitFamily,
  PermitStats,
  RecheckReply,
  ReleaseResult,
  RenewReply,
  WaiterState,
} from '../protocol/store.js'
import { nowMs } from './clock.js'
import { FairQueue } from './fair-queue.js'
import { evict, fairQueueOf, SHED_PRUNE, ShedMarks, victim } from './permit-fair.js'
import { StoredLimits } from './permit-limits.js'
import { admit, isIdle, purge } from './permit-queue.js'
import { type Holder, nextExpiry, nextFence, type PermitSet, type Waiter } from './permit-state.js'
import { queuePosition } from './rwlocks.js'
import { parseFairToken } from '../fair.js'
import { tokenWeight } from '../weight.js'

export class MemoryPermitSets implements PermitFamily {
  /** State per name (space.base). */
  readonly sets = new Map<string, PermitSet>()
  /** Run-time limits per name (lua P). */
  private readonly limits = new StoredLimits()
  /** Fair queues' shed marks per name (lua X). */
  private readonly marks = new ShedMarks()

  constructor(
    /** Deliver grants, and a fair queue's evicted tokens, to the space's subscribers (asynchronously,
     * like one pub/sub message: lines "<tok> <fence> <exp>" and "<tok> x"). */
    private readonly publish: (space: KeySpace, grants: Grant[], shed?: readonly string[]) => void,
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
    const set = this.open(space, now, r.fair)
    const permits = this.limits.permits(space.base, r.permits)
    const granted = admit(set, permits, now, r.fair !== undefined)
    const shed: string[] = []
    const reply = this.join(space, set, r, permits, now, shed)
    this.send(space, granted, shed)
    return reply
  }

  /** acquireNow() after the admission: the token's grant, place, permit or queue place. `shed`
   * collects the waiter it evicts, if any. */
  private join(
    space: KeySpace,
    set: PermitSet,
    r: AcquireRequest,
    permits: number,
    now: number,
    shed: string[],
  ): AcquireReply {
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
      let position = set.fair ? set.fair.position(r.token) : queuePosition(set.queue, r.token)
      if (r.op !== undefined && !waiting.ops?.includes(r.op)) {
        if (!r.enqueue) position = -1
        else {
          waiting.ops = [...(waiting.ops ?? []), r.op]
          waiting.heartbeat = Math.max(waiting.heartbeat, now + r.waiterTtlMs)
        }
      }
      return { granted: false, position, nextExpiry: nextExpiry(set), now }
    }
    const fair = set.fair
    // A resent acquire of a token evicted from a fair queue: shed again, never queued (G12).
    if (r.fair && this.marks.has(space.base, r.token, now)) return { granted: false, shed: 'evicted', now }
    const d = r.fair ? parseFairToken(r.token) : undefined
    const weight = d ? d.weight : tokenWeight(r.token)
    const nobodyWaits = fair ? fair.order.size === 0 : set.queue.size === 0
    if (nobodyWaits && set.used + weight <= permits && (!fair || fair.canTake(d, weight))) {
      const holder: Holder = {
        expiresAt: now + r.ttlMs,
        fence: nextFence(set),
        weight,
        ops: r.op === undefined ? undefined : [r.op],
      }
      if (fair && d && d.flowMax > 0) {
        holder.capped = d
        fair.hold(d, weight)
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
    // Every token that asks to queue takes a ticket, one that maxQueued refuses too (lua: one HINCRBY
    // for the call's joiners): tickets break a fair queue's ties, so both stores must count alike.
    const ticket = ++set.tickets
    if (fair && d) {
      // A cap raised since its waiters parked: they go back first, so no newer waiter passes them.
      if (d.flowMax > 0) fair.unpark(d.flow, d.flowMax)
      const maxQueued = r.fair?.maxQueued ?? 0
      if (maxQueued > 0 && fair.order.size >= maxQueued) {
        const evicted = victim(set, fair, d, ticket, maxQueued)
        if (evicted === undefined) return { granted: false, shed: 'queue-full', now }
        evict(set, fair, evicted)
        this.marks.add(space.base, evicted, now + 2 * r.waiterTtlMs)
        shed.push(evicted)
      }
    }
    // As in Lua: a permit handed over later starts with at most the heartbeat ttl, renewed from there.
    set.purgeAt = Math.min(set.purgeAt, now + r.waiterTtlMs)
    const waiter: Waiter = {
      heartbeat: now + r.waiterTtlMs,
      ttlMs: Math.min(r.ttlMs, r.waiterTtlMs),
      ops: r.op === undefined ? undefined : [r.op],
      ticket,
    }
    set.queue.set(r.token, waiter)
    if (!fair) return { granted: false, position: set.queue.size - 1, nextExpiry: nextExpiry(set), now }
    if (d) waiter.disc = d
    fair.enqueue(r.token, d, waiter.ticket)
    return { granted: false, position: fair.order.rank(r.token), nextExpiry: nextExpiry(set), now }
  }

  /** One message per call, as the scripts' PUBLISH: grants, then the tokens evicted. */
  private send(space: KeySpace, granted: Grant[], shed: string[]): void {
    if (shed.length > 0) this.publish(space, granted, shed)
    else if (granted.length > 0) this.publish(space, granted)
  }

  /** lua permit-release.lua for one token. */
  async release(
    space: KeySpace,
    token: string,
    permits: number,
    op?: string,
    fair?: FairCall,
  ): Promise<ReleaseResult> {
    return this.releaseNow(space, token, permits, op, fair)
  }

  /** release(), answered synchronously (PermitFamily.releaseNow). */
  releaseNow(space: KeySpace, token: string, permits: number, op?: string, fair?: FairCall): ReleaseResult {
    const now = nowMs()
    const set = this.open(space, now, fair)
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
      if (held.capped) set.fair?.free(held.capped, held.weight)
      if (fair && set.holders.size === 0) set.fair?.heal()
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
        set.fair?.leave(token, waiter.disc)
        result = 'dequeued'
      }
    }
    this.send(space, admit(set, this.limits.permits(space.base, permits), now, fair !== undefined), [])
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
    fair?: FairCall,
  ): Promise<RecheckReply> {
    const now = nowMs()
    const set = this.open(space, now, fair)
    this.send(space, admit(set, this.limits.permits(space.base, permits), now, fair !== undefined), [])
    const states = waits.map(({ token, op }): WaiterState => {
      const held = set.holders.get(token)
      if (held && (op === undefined || held.ops?.includes(op)))
        return { state: 'granted', fence: held.fence, expiresAt: held.expiresAt }
      const waiter = set.queue.get(token)
      if (!waiter || (op !== undefined && !waiter.ops?.includes(op))) {
        if (!waiter && fair && this.marks.has(space.base, token, now)) return { state: 'shed' }
        return { state: 'gone' }
      }
      waiter.heartbeat = Math.max(waiter.heartbeat, now + waiterTtlMs)
      const position = set.fair ? set.fair.position(token) : queuePosition(set.queue, token)
      return { state: 'queued', position }
    })
    const reply = { now, nextExpiry: nextExpiry(set), states }
    this.settle(space, set)
    return reply
  }

  async inspect(space: KeySpace): Promise<PermitStats> {
    const now = nowMs()
    const set = this.sets.get(space.base)
    const stored = this.limits.get(space.base, now)
    const limit = stored && !stored.adaptive ? stored.permits : undefined
    const adaptive = stored?.adaptive ? stored.permits : undefined
    if (!set) return { holders: 0, queued: 0, limit, adaptive }
    let holders = 0
    let queued = 0
    for (const h of set.holders.values()) if (h.expiresAt > now) holders += h.weight
    for (const w of set.queue.values()) if (w.heartbeat > now) queued++
    return { holders, queued, limit, adaptive }
  }

  async inspectFair(space: KeySpace, _fair: FairCall, flows?: readonly string[]): Promise<FairPermitStats> {
    const stats = await this.inspect(space)
    const fair = this.sets.get(space.base)?.fair
    const classes: Record<number, number> = {}
    const evicted: Record<number, number> = {}
    const saturated: number[] = []
    const byFlow: FairPermitStats['flows'] = {}
    for (let p = 0; p < 8; p++) {
      if (fair?.n[p]) classes[p] = fair.n[p] as number
      if (fair?.x[p]) evicted[p] = fair.x[p] as number
      if (fair?.sat[p]) saturated.push(p)
    }
    for (const flow of flows ?? []) {
      let waiting = 0
      for (let p = 0; p < 8; p++) waiting += fair?.q.get(`${p}:${flow}`) ?? 0
      byFlow[flow] = { waiting, held: fair?.h.get(flow) ?? 0, parked: fair?.k.get(flow) ?? 0 }
    }
    return {
      ...stats,
      classes,
      parked: fair?.parked.size ?? 0,
      evicted,
      saturated,
      mixed: (fair?.plain ?? 0) > 0,
      flows: byFlow,
    }
  }

  async setLimit(
    space: KeySpace,
    permits: number | undefined,
    own: number,
    adaptive?: { ttlMs: number; version: number },
    fair?: FairCall,
  ): Promise<boolean> {
    const now = nowMs()
    const written = this.limits.set(space.base, permits, adaptive, now)
    const set = this.sets.get(space.base)
    if (!set || set.queue.size === 0) return written
    if (fair && !set.fair) set.fair = fairQueueOf(set)
    purge(set, now)
    if (fair && set.holders.size === 0) set.fair?.heal()
    this.send(space, admit(set, this.limits.permits(space.base, own), now, fair !== undefined), [])
    this.settle(space, set)
    return written
  }

  /** Forget names whose leases and waiters simply ran out, as Redis expires their keys. */
  sweep(now: number): void {
    for (const [base, set] of this.sets) {
      purge(set, now)
      if (isIdle(set)) this.sets.delete(base)
    }
    this.marks.sweep(now)
  }

  /** The set for a name after dropping expired holders and dead waiters (lua purge()). */
  private open(space: KeySpace, now: number, fair?: FairCall): PermitSet {
    if (fair) this.marks.prune(space.base, now, SHED_PRUNE)
    let set = this.sets.get(space.base)
    if (!set) {
      set = {
        holders: new Map(),
        used: 0,
        queue: new Map(),
        tickets: 0,
        lastFence: 0,
        purgeAt: Number.POSITIVE_INFINITY,
      }
      if (fair) set.fair = new FairQueue()
      this.sets.set(space.base, set)
      return set
    }
    if (fair && !set.fair) set.fair = fairQueueOf(set)
    purge(set, now)
    if (fair && set.holders.size === 0) set.fair?.heal()
    return set
  }

  /** lua settle(): forget a name once nothing is held or queued. */
  private settle(space: KeySpace, set: PermitSet): void {
    if (isIdle(set)) this.sets.delete(space.base)
  }
}
