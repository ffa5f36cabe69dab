import type { KeySpace } from './keys.js'

/**
 * What a primitive asks of a store. Both stores implement the same fair permit set (see
 * lua/lib/permits.lua) and the same read/write lock (lua/lib/rwlock.lua): the Redis store with Lua
 * scripts, the memory store in-process (G11).
 * Times are epoch milliseconds on the store's clock (the Redis server's, G9).
 */
export interface Store {
  readonly kind: 'redis' | 'memory'
  /** Key prefix (default `tollgate`). */
  readonly prefix: string
  /** Store clock minus local clock, ms, as last observed; used only to schedule timers locally. */
  readonly clockOffsetMs: number
  /** True while wake-up notifications are being delivered; waiters poll with backoff otherwise. */
  readonly notificationsHealthy: boolean

  acquire(space: KeySpace, request: AcquireRequest): Promise<AcquireReply>
  /** `reentrant`: the token may hold re-entry counts (only then are they looked for). */
  release(space: KeySpace, token: string, permits: number, reentrant?: boolean): Promise<ReleaseResult>
  renew(space: KeySpace, ttlMs: number, tokens: readonly string[]): Promise<RenewReply>
  recheck(
    space: KeySpace,
    permits: number,
    waiterTtlMs: number,
    tokens: readonly string[],
  ): Promise<RecheckReply>
  inspect(space: KeySpace): Promise<PermitStats>
  /** Set (or with undefined, drop) the run-time permits of a name for every process. Raising admits
   * waiters at once; lowering never evicts a holder. */
  setLimit(space: KeySpace, permits: number | undefined): Promise<void>
  /** Read/write lock: take `mode` now, re-enter it, downgrade (read while holding write), or (enqueue)
   * join the lock's FIFO queue. An upgrade (write while holding only read) is refused, not queued. */
  rwAcquire(space: KeySpace, request: RwAcquireRequest): Promise<RwAcquireReply>
  /** Give back one count of a token's hold of `mode`, or take the token out of the queue. */
  rwRelease(space: KeySpace, token: string, mode: RwMode): Promise<ReleaseResult>
  rwRenew(space: KeySpace, mode: RwMode, ttlMs: number, tokens: readonly string[]): Promise<RenewReply>
  /** Heartbeat + state of waiting tokens of either mode (the store knows each waiter's mode). */
  rwRecheck(space: KeySpace, waiterTtlMs: number, tokens: readonly string[]): Promise<RecheckReply>
  rwInspect(space: KeySpace): Promise<RwStats>
  /** Subscribe to a space's grants; resolves once messages published from now on will arrive. */
  subscribe(space: KeySpace, onGrant: (grant: Grant) => void): Promise<Unsubscribe>
  /** Stop background work (subscriber connection). Never closes a client the user passed in. */
  close(): Promise<void>
}

export type Unsubscribe = () => void

export interface AcquireRequest {
  token: string
  ttlMs: number
  permits: number
  /** false = tryAcquire: never join the queue. */
  enqueue: boolean
  waiterTtlMs: number
  /** Remember the fencing token so that re-entry by the same token returns it. */
  reentrant: boolean
}

export type RwMode = 'read' | 'write'

export interface RwAcquireRequest {
  token: string
  mode: RwMode
  ttlMs: number
  /** false = tryAcquire: never join the queue. */
  enqueue: boolean
  waiterTtlMs: number
}

export type RwAcquireReply =
  | AcquireReply
  /** 'upgrade': the token holds only a read lock and asked for write (it would wait for itself);
   * 'waiting': the token already waits for this lock (an owner waits at most once per lock). */
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
  /** lastFence (when queued): the name's last fencing token at enqueue; a grant meant for this wait
   * carries a larger one, so a late message about an earlier grant to the same token is ignored. */
  | { granted: false; position: number; nextExpiry: number; now: number; lastFence?: number }

/** 'freed' the permit, 'decremented' a reentry count, 'dequeued' a waiter, or found 'none'. */
export type ReleaseResult = 'freed' | 'decremented' | 'dequeued' | 'none'

export interface RenewReply {
  now: number
  /** New expiry per token, 0 where the token no longer holds a permit. */
  expiresAt: number[]
}

export interface Grant {
  token: string
  fence: number
  expiresAt: number
}

export type WaiterState =
  | { state: 'granted'; fence: number; expiresAt: number }
  | { state: 'queued'; position: number }
  | { state: 'gone' }

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
}

export function parseGrants(message: string): Grant[] {
  const grants: Grant[] = []
  for (const line of message.split('\n')) {
    const [token, fence, expiresAt] = line.split(' ')
    if (token && fence && expiresAt)
      grants.push({ token, fence: Number(fence), expiresAt: Number(expiresAt) })
  }
  return grants
}
