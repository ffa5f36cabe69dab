// The Store contract: what every primitive asks of a store (Redis or memory), its operations' requests
// and replies.
import type { KeySpace } from '../keys.js'

/**
 * What a primitive asks of a store: two families of operations on keyed state, each an atomic step
 * (a Lua script on Redis, a method in memory), plus wake-up notifications. Both stores implement the
 * same fair permit set (lua/lib/permits.lua) and the same read/write lock (lua/lib/rwlock.lua) (G11).
 * Times are epoch milliseconds on the store's clock (the Redis server's, G9). Every operation is
 * idempotent per acquisition (G12): a call the store ran twice has the effect of one.
 */
export interface Store {
  readonly kind: 'redis' | 'memory'
  /** Key prefix (default `tollgate`). */
  readonly prefix: string
  /** The longest a store call waits for its answer before it fails, ms (a Redis store's; a memory
   * store answers at once). */
  readonly commandTimeoutMs?: number
  /** True while wake-up notifications are being delivered; waiters poll with backoff otherwise. */
  readonly notificationsHealthy: boolean
  /** The fair permit set behind the mutex, the reentrant mutex, the semaphore and RedLock. */
  readonly permits: PermitFamily
  /** The writer-preferring read/write lock. */
  readonly rwlock: RwLockFamily
  /** The fleet's adaptive limits (src/primitives/adaptive/fleet.ts); a store without it cannot share
   * one. */
  readonly adaptive?: AdaptiveFamily
  /** Subscribe to a space's grants; resolves once messages published from now on will arrive.
   * `onShed`: the tokens of a fair queue's shed lines (parseMessage().shed), if the store reads them;
   * a store that does not leaves the shed to the waiters' re-check (state 'shed'). */
  subscribe(
    space: KeySpace,
    onGrant: (grant: Grant) => void,
    onShed?: (token: string) => void,
  ): Promise<Unsubscribe>
  /** Stop background work (subscriber connection). Never closes a client the user passed in. */
  close(): Promise<void>
}

/** lua/permit-*.lua: a fair FIFO permit set per name. */
export interface PermitFamily {
  /** Take a permit now or join the queue. A token that already holds or waits gets its grant or place
   * back unchanged, unless `op` is an acquisition it has not seen (then it re-enters or waits with
   * the owner). */
  acquire(space: KeySpace, request: AcquireRequest): Promise<AcquireReply>
  /** Give back a token's permit or leave the queue. With `op` (a reentrant owner's acquisition), only
   * that acquisition goes; the permit is freed when the owner's last one does. */
  release(
    space: KeySpace,
    token: string,
    permits: number,
    op?: string,
    fair?: FairCall,
  ): Promise<ReleaseResult>
  /** acquire() and release() answered synchronously, by a store that can (the memory store): the
   * uncontended path then takes and gives back a permit without a promise. A network store has
   * neither. */
  acquireNow?(space: KeySpace, request: AcquireRequest): AcquireReply
  releaseNow?(space: KeySpace, token: string, permits: number, op?: string, fair?: FairCall): ReleaseResult
  /** Extend live leases; a lease is live only while its acquisition holds (for a reentrant owner:
   * while `op` is one of the hold's acquisitions, so a lease the owner lost is never renewed through
   * a later acquisition of the same owner, G4). */
  renew(space: KeySpace, ttlMs: number, holds: readonly Acquisition[]): Promise<RenewReply>
  /** Heartbeat of waits, and their state (the fallback for a lost wake-up). */
  recheck(
    space: KeySpace,
    permits: number,
    waiterTtlMs: number,
    waits: readonly Acquisition[],
    fair?: FairCall,
  ): Promise<RecheckReply>
  inspect(space: KeySpace): Promise<PermitStats>
  /** A fair queue's figures (per class; per flow for the flow ids asked: core/fair.ts flowId()). */
  inspectFair?(space: KeySpace, fair: FairCall, flows?: readonly string[]): Promise<FairPermitStats>
  /** Set (or with undefined, drop) the run-time permits of a name for every process. Admits at once the
   * waiters the limit now in force has room for (`own`: the caller's permits, in force once the
   * override is dropped); lowering never evicts a holder. With `adaptive`, the value is the fleet's
   * adaptive limit: kept for `ttlMs`, and written neither over an override nor over a limit of the
   * same or a later `version` (then it resolves false). Dropping (undefined) drops an override only. */
  setLimit(
    space: KeySpace,
    permits: number | undefined,
    own: number,
    adaptive?: { ttlMs: number; version: number },
    fair?: FairCall,
  ): Promise<boolean | void>
}

/** A call on a fair queue (a semaphore with `overload`, core/fair.ts): its scripts get the fair keys
 * (D T K X after the plain seven) and run the discipline. Every call on such a name passes it; a call
 * without it on the same name is a plain call, which never grants a waiter that has a discipline. */
export interface FairCall {
  /** Waiters of the name across the fleet at most (0: no bound). Past it, a request evicts the last
   * waiter the queue would serve after it (a lower class, or a flow further over its share), else it
   * is refused ('queue-full'). */
  maxQueued: number
}

/** lua/adaptive-*.lua: the fleet's adaptive limit of a bucket (src/primitives/adaptive/fleet.ts).
 * Every replica reports each window; the one that leads steps the controller once per window. */
export interface AdaptiveFamily {
  /** One window's report of one replica; its heartbeat and leadership; the fleet's state back. */
  report(space: KeySpace, report: AdaptiveReport): Promise<AdaptiveReportReply>
  /** Save the step of `step.window` (the controller's state after it), unless that window or a later
   * one was stepped already, or the last window stepped is no longer `step.based` (the one whose state
   * the step started from), or the window has not ended or ended over 3 windows ago on the store's
   * clock: exactly one step per window, none lost. */
  commit(space: KeySpace, step: AdaptiveStep): Promise<boolean>
}

/** What one replica's admitted requests did in one window (the store adds the replicas' up). */
export interface AdaptiveWindow {
  requests: number
  /** Of them, drops (timeouts, the configured statuses). */
  drops: number
  /** Sum of the latencies of the requests that were not drops, µs (what a replica of a version before
   * `latency` steps on, during a rolling deploy). */
  latencyUs: number
  /** The most this replica had in flight at once (summed over replicas: an upper bound). */
  maxInFlight: number
  /** Its clients as units of enough requests, and those over the drop share (adaptive/clients.ts). */
  clients: number
  clientsOver: number
  /** The latencies of the requests that were not drops: the non-empty buckets of a histogram of
   * LATENCY_BUCKETS (adaptive/latency.ts), [bucket, count, sum µs], summed bucket by bucket. */
  latency: readonly (readonly [bucket: number, count: number, sumUs: number])[]
}

export interface AdaptiveStep {
  window: number
  /** The last window stepped (the reply's `stepped`) when the state stepped from was read. */
  based: number
  /** The controller's state after the step (JSON). */
  state: string
  stateTtlMs: number
  windowMs: number
}

export interface AdaptiveReport extends AdaptiveWindow {
  replica: string
  /** The window reported: floor(server time / windowMs). */
  window: number
  windowMs: number
  /** How long a leader leads without reporting again. */
  leaderTtlMs: number
  /** How long the fleet's state outlives its last report. */
  stateTtlMs: number
  /** The replica leaves (closed): it is no longer counted, and gives up leadership. */
  leave?: boolean
  /** The replica joins (constructed): it is counted from now on and reads the fleet's state; the
   * window and its sums are not reported. */
  join?: boolean
}

export interface AdaptiveReportReply {
  /** The store's clock. */
  now: number
  /** This replica leads: it steps the controller. */
  leads: boolean
  /** Replicas that reported within the last 3 windows. */
  replicas: number
  /** The last window stepped (-1: none). */
  stepped: number
  /** The controller's state after that step (JSON), if any. */
  state: string | undefined
  /** When this replica leads and the window before the reported one was not stepped yet: the fleet's
   * reports of it, merged (it steps it a window late). Undefined when `complete` is given. */
  previous: AdaptiveWindow | undefined
  /** When this report completed the reported window (every replica alive reported it) and it was not
   * stepped yet: the fleet's reports of it, merged; this replica, leader or not, steps it at once. */
  complete?: AdaptiveWindow | undefined
}

/** lua/rwlock-*.lua: a writer-preferring read/write lock per name. */
export interface RwLockFamily {
  /** Take `mode` now, re-enter it, downgrade (read while holding write), or (enqueue) join the lock's
   * FIFO queue. An upgrade (write while holding only read) is refused, not queued. */
  acquire(space: KeySpace, request: RwAcquireRequest): Promise<RwAcquireReply>
  /** Give back one acquisition of a token's hold of `mode`, or take it out of the queue. */
  release(space: KeySpace, token: string, mode: RwMode, op: string): Promise<ReleaseResult>
  renew(space: KeySpace, mode: RwMode, ttlMs: number, holds: readonly Acquisition[]): Promise<RenewReply>
  /** Heartbeat + state of waits of either mode (the store knows each waiter's mode). */
  recheck(space: KeySpace, waiterTtlMs: number, waits: readonly Acquisition[]): Promise<RecheckReply>
  inspect(space: KeySpace): Promise<RwStats>
}

export type Unsubscribe = () => void

export interface AcquireRequest {
  token: string
  /** The acquisition id of one call of a reentrant owner (the token is then the owner's, shared by
   * its calls): each call has its own, so a resent call is told from another call of the owner.
   * Absent: the token is fresh and is its own acquisition. */
  op?: string | undefined
  ttlMs: number
  permits: number
  /** false = tryAcquire: never join the queue (nor an owner's wait). */
  enqueue: boolean
  waiterTtlMs: number
  /** A fair queue's call (its token may carry a discipline, core/fair.ts). */
  fair?: FairCall | undefined
}

/** One acquisition: a token, and for a reentrant owner the acquisition id (absent: the token is its
 * own acquisition). What a re-check asks about, and what a renewal extends. */
export interface Acquisition {
  token: string
  op?: string | undefined
}

export type RwMode = 'read' | 'write'

export interface RwAcquireRequest {
  token: string
  /** This call's acquisition id (see AcquireRequest.op); the read/write lock always has one. */
  op: string
  mode: RwMode
  ttlMs: number
  /** false = tryAcquire: never join the queue. */
  enqueue: boolean
  waiterTtlMs: number
}

export type RwAcquireReply =
  | AcquireReply
  /** 'upgrade': the token holds only a read lock and asked for write (it would wait for itself);
   * 'waiting': the token already waits for this lock in the other mode (an owner waits in one mode
   * at a time; another call in the same mode waits with it). */
  | { granted: false; refused: 'upgrade' | 'waiting'; now: number }

export interface RwStats {
  /** Live read leases (a writer that downgraded counts here too). */
  readers: number
  /** Whether a live write lease exists. */
  writer: boolean
  /** Live waiters of either mode (across all processes). */
  queued: number
}

export type AcquireReply =
  /** holders: live holders of the name right after the grant, when the store reports it. */
  | { granted: true; fence: number; expiresAt: number; now: number; holders?: number }
  /** position: 0-based place in the queue, -1 when not queued (try mode); nextExpiry: 0 = no holder. */
  | { granted: false; position: number; nextExpiry: number; now: number }
  /** A fair queue turned it away (core/errors.ts ShedError): evicted by a higher class (a resent call
   * of an evicted token), or the queue is full of waiters it would serve first. Nothing is held or
   * queued. */
  | { granted: false; shed: 'evicted' | 'queue-full'; now: number }

/** 'freed' the permit, 'decremented' (dropped one of the owner's acquisitions, others still hold),
 * 'dequeued' a waiter, or found 'none'. */
export type ReleaseResult = 'freed' | 'decremented' | 'dequeued' | 'none'

export interface RenewReply {
  now: number
  /** New expiry per token, 0 where the token no longer holds a permit. */
  expiresAt: number[]
}

/** A permit handed to a waiting acquisition (one per acquisition that waited on the token). */
export interface Grant {
  token: string
  /** The acquisition it is for: the token itself for a fresh token. */
  op: string
  fence: number
  expiresAt: number
}

export type WaiterState =
  | { state: 'granted'; fence: number; expiresAt: number }
  | { state: 'queued'; position: number }
  | { state: 'gone' }
  /** Evicted from a fair queue by a higher class: never granted; the acquisition fails (ShedError). */
  | { state: 'shed' }

export interface RecheckReply {
  now: number
  nextExpiry: number
  states: WaiterState[]
}

export interface PermitStats {
  /** Live leases. */
  holders: number
  /** Live waiters in the queue (across all processes). */
  queued: number
  /** The run-time permits set with setPermits(), if any. */
  limit: number | undefined
  /** The fleet's adaptive limit in force, if any (an override set with setPermits() wins). */
  adaptive?: number | undefined
}

/** A fair queue's figures, fleet-wide (inspect with `fair`). */
export interface FairPermitStats extends PermitStats {
  /** Waiters per class number (0..7), parked ones included; classes without waiters are absent. */
  classes: Record<number, number>
  /** Waiters parked at their flow's cap (flowMax). */
  parked: number
  /** Waiters evicted per class since the name was last idle. */
  evicted: Record<number, number>
  /** Classes whose fair tags ran out of range: served in arrival order until they next empty. */
  saturated: number[]
  /** A plain token was seen among the waiters: some process uses the name without `overload`. */
  mixed: boolean
  /** Per flow id asked: its waiters (all classes), permits held (capped flows only) and parked. */
  flows: Record<string, { waiting: number; held: number; parked: number }>
}

/** A grant message: lines "<token> <fence> <expiresAt>[ <acquisition> ...]" (see lua/lib/permits.lua). */
export function parseGrants(message: string): Grant[] {
  return parseMessage(message).grants
}

/** A name's message: grant lines as parseGrants() reads them, and fair queues' shed lines
 * "<token> x" (a waiter evicted by a higher class; a process of a version without fair queues skips
 * them, as any line without three fields). */
export function parseMessage(message: string): { grants: Grant[]; shed: string[] } {
  const grants: Grant[] = []
  const shed: string[] = []
  for (const line of message.split('\n')) {
    const [token, fence, expiresAt, ...ops] = line.split(' ')
    if (token && fence === 'x' && expiresAt === undefined) shed.push(token)
    if (!token || !fence || !expiresAt) continue
    for (const op of ops.length > 0 ? ops : [token])
      grants.push({ token, op, fence: Number(fence), expiresAt: Number(expiresAt) })
  }
  return { grants, shed }
}
