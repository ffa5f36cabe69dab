// The memory twin of lua/permit-*.lua (G11): a fair FIFO permit set per name, the same rules step by
// step, on the same clock discipline (a monotonic clock standing in for Redis TIME). Each method
// mirrors the script of the same name; lua/lib/permits.lua explains the rules. A name called with
// `fair` (a semaphore with `overload`) also gets a FairQueue (fair-queue.ts, the twin of lua/lib/fair.lua)
// that orders its waiters; a name never called with it allocates nothing more.
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
import { nowMs, nowUs } from './clock.js'
import { FairQueue, type TokenDiscipline } from './fair-queue.js'
import { queuePosition } from './rwlocks.js'
import { SortedSet } from './sorted-set.js'
import { parseFairToken } from '../fair.js'
import { tokenWeight } from '../weight.js'

/** Shed marks one fair call prunes at most (lua: ZRANGEBYSCORE X -inf now LIMIT 0 100). */
const SHED_PRUNE = 100

interface Holder {
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
interface Waiter {
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
interface PermitSet {
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
  /** Fair queues' shed marks per name (lua X): evicted token -> until when a resent acquire or a
   * re-check of it answers shed. Kept apart from the set: a mark outlives an idle name. */
  private readonly marks = new Map<string, SortedSet>()

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
    const permits = this.limit(space, r.permits)
    const granted = this.admit(set, permits, now, r.fair !== undefined)
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
    if (r.fair && (this.marks.get(space.base)?.score(r.token) ?? 0) > now)
      return { granted: false, shed: 'evicted', now }
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
        const victim = this.victim(set, fair, d, ticket, maxQueued)
        if (victim === undefined) return { granted: false, shed: 'queue-full', now }
        this.evict(space, set, fair, victim, now + 2 * r.waiterTtlMs)
        shed.push(victim)
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

  /** lua fair.lua: the waiter a fair token that finds the queue at `maxQueued` may evict: a full queue
   * keeps the waiters that would be served first, so the tail (the last to be served) goes when the
   * arrival would be served before it: a lower class, or in the same class a flow further over its
   * share (never the arrival's own flow: its tail is ahead of it). One eviction per token, only if
   * that makes room. Undefined: the arrival is refused. */
  private victim(
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

  /** lua fair.lua evict(): the waiter leaves the queue unserved (refunded as any departure), counts
   * as an eviction of its class, and is marked shed until `until`. */
  private evict(space: KeySpace, set: PermitSet, fair: FairQueue, token: string, until: number): void {
    const waiter = set.queue.get(token) as Waiter
    set.queue.delete(token)
    fair.leave(token, waiter.disc)
    const p = (waiter.disc as TokenDiscipline).priority
    fair.x[p] = (fair.x[p] as number) + 1
    let marks = this.marks.get(space.base)
    if (!marks) {
      marks = new SortedSet()
      this.marks.set(space.base, marks)
    }
    marks.add(token, until)
  }

  /** Drop shed marks that ran out, at most `most`; the name's marks go with the last. */
  private pruneMarks(base: string, now: number, most: number): void {
    const marks = this.marks.get(base)
    if (!marks) return
    for (const token of marks.rangeByScore(Number.NEGATIVE_INFINITY, now, most)) marks.delete(token)
    if (marks.size === 0) this.marks.delete(base)
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
    this.send(space, this.admit(set, this.limit(space, permits), now, fair !== undefined), [])
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
    this.send(space, this.admit(set, this.limit(space, permits), now, fair !== undefined), [])
    const marks = fair ? this.marks.get(space.base) : undefined
    const states = waits.map(({ token, op }): WaiterState => {
      const held = set.holders.get(token)
      if (held && (op === undefined || held.ops?.includes(op)))
        return { state: 'granted', fence: held.fence, expiresAt: held.expiresAt }
      const waiter = set.queue.get(token)
      if (!waiter || (op !== undefined && !waiter.ops?.includes(op))) {
        if (!waiter && (marks?.score(token) ?? 0) > now) return { state: 'shed' }
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
    if (fair && !set.fair) set.fair = fairQueueOf(set)
    purge(set, now)
    if (fair && set.holders.size === 0) set.fair?.heal()
    this.send(space, this.admit(set, this.limit(space, own), now, fair !== undefined), [])
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
    for (const base of this.marks.keys()) this.pruneMarks(base, now, Number.POSITIVE_INFINITY)
  }

  /** The set for a name after dropping expired holders and dead waiters (lua purge()). */
  private open(space: KeySpace, now: number, fair?: FairCall): PermitSet {
    if (fair) this.pruneMarks(space.base, now, SHED_PRUNE)
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

  /** lua admit(): hand free permits to the head of the queue; returns the grants to publish. */
  private admit(set: PermitSet, permits: number, now: number, fairCall: boolean): Grant[] {
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

/** The fair queue of a name that had only plain waiters so far: they keep their tickets as scores. */
function fairQueueOf(set: PermitSet): FairQueue {
  const fair = new FairQueue()
  for (const [token, waiter] of set.queue) fair.enqueue(token, undefined, waiter.ticket)
  return fair
}

/** lua admit() on a fair queue: the head of `order` first, each class before the next, fairly inside.
 * A capped flow's head at its cap parks and admission goes on; a live head whose permits are not free
 * stops it, lower classes included (G5). A plain call (a process without `overload`) never grants a
 * waiter with a discipline: it stops at the first. */
function admitFair(
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

function nextFence(set: PermitSet): number {
  set.lastFence = Math.max(set.lastFence + 1, nowUs())
  return set.lastFence
}

function nextExpiry(set: PermitSet): number {
  let min = 0
  for (const h of set.holders.values()) if (min === 0 || h.expiresAt < min) min = h.expiresAt
  return min
}
