import { debuglog } from 'node:util'
import {
  ConfigError,
  type LeaseLostError,
  type QuorumTally,
  RedlockQuorumError,
  StoreUnavailableError,
} from '../core/errors.js'
import { emit } from '../core/events.js'
import { type KeySpace, keySpace } from '../core/keys.js'
import { type Lease, type LeaseContext, PermitLease } from '../core/lease.js'
import { defined, isPlainObjectOrUndefined, nonEmptyString, positiveInt } from '../core/options.js'
import { type AcquireOptions, newToken } from '../core/permits.js'
import type { AcquireReply, AcquireRequest, Acquisition, RenewReply, Store } from '../core/store.js'
import { runHolding } from './mutex.js'
import { checkAcquireOptions } from './options.js'

const debug = debuglog('tollgate:redlock')

export interface RedlockOptions {
  /** Lease length on every node; auto-renewal extends it at about a third of the validity left.
   * @default 30000 */
  ttlMs?: number
  /** Clock drift allowed between the nodes and this process, as a fraction of the TTL. The lease is
   * valid for `ttlMs − drift − elapsed`, with `drift = ceil(ttlMs × driftFactor) + clockDriftMs`.
   * @default 0.01 */
  driftFactor?: number
  /** Fixed part of the drift allowance (timer granularity, tiny TTLs). @default 2 */
  clockDriftMs?: number
  /** Retries after the first attempt of `acquire()`; Infinity retries until `acquireTimeoutMs`.
   * @default Infinity */
  retryCount?: number
  /** Pause between attempts. @default 200 */
  retryDelayMs?: number
  /** Up to this much is added at random to every pause, so contenders do not retry in lockstep
   * and split the votes again. @default 100 */
  retryJitterMs?: number
  /** How long one node may take to answer one call. A node that answers later counts as failed for
   * that attempt (a grant it gave late is handed back). Keep it far below the TTL: a majority that
   * is only complete after `ttlMs − drift` is refused anyway.
   * @default min(50, max(1, floor(ttlMs / 10))) */
  perNodeTimeoutMs?: number
  /** Renew held leases automatically until release. @default true */
  autoRenew?: boolean
  /** Default bound of `acquire()` over all its attempts; Infinity retries until `retryCount` runs
   * out or the signal aborts. @default 10000 */
  acquireTimeoutMs?: number
  /** Called when a held lease is lost (after its signal aborted). Must not throw. */
  onLost?: (error: LeaseLostError, lease: Lease) => void
}

export interface Redlock {
  readonly name: string
  /** Number of independent nodes. */
  readonly nodes: number
  /** Grants needed for a lease: floor(nodes / 2) + 1. */
  readonly quorum: number
  /** Take the lock on a majority of the nodes, retrying with jitter. Rejects with a
   * RedlockQuorumError after `retryCount` retries or `timeoutMs` (default `acquireTimeoutMs`), or
   * with the signal's reason; nothing is left on any node then. */
  acquire(options?: AcquireOptions): Promise<Lease>
  /** One attempt. Resolves undefined when another owner holds the lock; rejects with a
   * RedlockQuorumError when the attempt failed because nodes failed or answered too late. */
  tryAcquire(): Promise<Lease | undefined>
  /** Run `fn` holding the lock and always release it; `fn`'s own error is never masked. */
  withLease<T>(fn: (lease: Lease) => T | Promise<T>, options?: AcquireOptions): Promise<T>
}

export const REDLOCK_DEFAULTS = Object.freeze({
  ttlMs: 30_000,
  driftFactor: 0.01,
  clockDriftMs: 2,
  retryCount: Number.POSITIVE_INFINITY,
  retryDelayMs: 200,
  retryJitterMs: 100,
  autoRenew: true,
  acquireTimeoutMs: 10_000,
})

const MIN_NODES = 3
const MAX_TTL_MS = 24 * 3600 * 1000
const MAX_DELAY_MS = 3600 * 1000
/** Try mode never queues, so the waiter heartbeat of the permit set is never used. */
const UNUSED_WAITER_TTL_MS = 10_000

/**
 * RedLock over N >= 3 independent Redis masters (one `createRedisStore()` per master, never replicas
 * of each other or nodes of one cluster). Each node holds a 1-permit lock of the fair permit set in
 * try mode (lua/permit-*.lua, never queued), with the same random token per attempt on every node.
 *
 * An attempt asks every node at once, each within `perNodeTimeoutMs`, and succeeds only when a
 * majority granted AND time is left: `validity = ttlMs − drift − elapsed > 0`, elapsed measured from
 * the start of that attempt. A failed attempt releases on every node (also those that did not
 * answer: a late grant is released when it arrives). Renewal needs a majority within validity too;
 * release goes to every node and never throws.
 *
 * `lease.expiresAt` is a client-side estimate on the local clock: the end of the validity window.
 * `lease.fencingToken` is the largest per-node fencing token of the nodes that granted. Per node
 * these strictly increase and never fall below that node's microsecond clock, so across holders the
 * token increases as long as the nodes' clocks agree to within the time between two acquisitions and
 * none steps back. It is not a consensus counter: see docs/redlock.md for what RedLock does not
 * guarantee (process pauses, clock jumps, restarts without persistence).
 */
export function createRedlock(stores: readonly Store[], name: string, options?: RedlockOptions): Redlock {
  const client = new RedlockClient(parseRedlock(stores, name, options))
  return {
    name,
    nodes: client.stores.length,
    quorum: client.quorum,
    acquire: async (opts) => {
      checkAcquireOptions(opts)
      return client.acquire(opts)
    },
    tryAcquire: () => client.tryAcquire(),
    withLease: async (fn, opts) => {
      checkAcquireOptions(opts)
      return runHolding(await client.acquire(opts), fn)
    },
  }
}

interface RedlockSettings {
  stores: Store[]
  name: string
  ttlMs: number
  driftFactor: number
  clockDriftMs: number
  retryCount: number
  retryDelayMs: number
  retryJitterMs: number
  perNodeTimeoutMs: number
  autoRenew: boolean
  acquireTimeoutMs: number
  onLost: RedlockOptions['onLost']
}

function parseRedlock(stores: unknown, name: unknown, options: RedlockOptions | undefined): RedlockSettings {
  if (!Array.isArray(stores) || stores.length < MIN_NODES) {
    throw new ConfigError(
      'stores',
      `an array of at least ${MIN_NODES} stores from createRedisStore(), one per independent Redis master`,
      Array.isArray(stores) ? `${stores.length} store(s)` : stores,
    )
  }
  stores.forEach((store: unknown, i) => {
    if (!isStore(store))
      throw new ConfigError('stores', `a store from createRedisStore() at stores[${i}]`, store)
    if (store.kind !== 'redis') {
      throw new ConfigError('stores', `Redis stores only: stores[${i}] is a ${store.kind} store`)
    }
    if (stores.indexOf(store) !== i) {
      throw new ConfigError(
        'stores',
        `distinct stores: stores[${i}] repeats stores[${stores.indexOf(store)}]`,
      )
    }
  })
  nonEmptyString('name', name)
  isPlainObjectOrUndefined('options', options)
  const config = { ...REDLOCK_DEFAULTS, ...defined(options) }
  const ttlMs = positiveInt('ttlMs', config.ttlMs, MAX_TTL_MS)
  const { driftFactor } = config
  if (typeof driftFactor !== 'number' || !(driftFactor >= 0 && driftFactor < 1)) {
    throw new ConfigError('driftFactor', 'a number from 0 up to (not including) 1', driftFactor)
  }
  const clockDriftMs = nonNegativeInt('clockDriftMs', config.clockDriftMs, MAX_TTL_MS)
  const drift = driftOf(ttlMs, driftFactor, clockDriftMs)
  if (drift >= ttlMs) {
    throw new ConfigError(
      'ttlMs',
      `more than the drift allowance ceil(ttlMs × driftFactor) + clockDriftMs = ${drift} ms`,
      ttlMs,
    )
  }
  const retryCount = config.retryCount
  if (retryCount !== Number.POSITIVE_INFINITY) nonNegativeInt('retryCount', retryCount)
  const retryDelayMs = nonNegativeInt('retryDelayMs', config.retryDelayMs, MAX_DELAY_MS)
  const retryJitterMs = nonNegativeInt('retryJitterMs', config.retryJitterMs, MAX_DELAY_MS)
  const perNodeTimeoutMs = positiveInt(
    'perNodeTimeoutMs',
    config.perNodeTimeoutMs ?? Math.max(1, Math.min(50, Math.floor(ttlMs / 10))),
    ttlMs,
  )
  const acquireTimeoutMs = config.acquireTimeoutMs
  if (acquireTimeoutMs !== Number.POSITIVE_INFINITY) nonNegativeInt('acquireTimeoutMs', acquireTimeoutMs)
  if (typeof config.autoRenew !== 'boolean') throw new ConfigError('autoRenew', 'a boolean', config.autoRenew)
  if (config.onLost !== undefined && typeof config.onLost !== 'function') {
    throw new ConfigError('onLost', 'a function', config.onLost)
  }
  return {
    stores: [...(stores as Store[])],
    name: name as string,
    ttlMs,
    driftFactor,
    clockDriftMs,
    retryCount,
    retryDelayMs,
    retryJitterMs,
    perNodeTimeoutMs,
    autoRenew: config.autoRenew,
    acquireTimeoutMs,
    onLost: config.onLost,
  }
}

function nonNegativeInt(option: string, value: unknown, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > max) {
    throw new ConfigError(option, `an integer from 0 to ${max}`, value)
  }
  return value
}

function isStore(value: unknown): value is Store {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as Store).acquire === 'function' &&
    typeof (value as Store).renew === 'function' &&
    typeof (value as Store).release === 'function'
  )
}

function driftOf(ttlMs: number, driftFactor: number, clockDriftMs: number): number {
  return Math.ceil(ttlMs * driftFactor) + clockDriftMs
}

/** What one node call came to within its time budget. */
type NodeResult<T> = { ok: true; value: T } | { ok: false; error: unknown }

class NodeTimeoutError extends Error {}

/** Start a store call; a synchronous throw becomes a rejection. */
function call<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return fn()
  } catch (error) {
    return Promise.reject(error)
  }
}

/** Settle `pending` within `ms`, never rejecting. The call keeps running after a timeout; nothing
 * here waits for it (the release paths that care attach their own handler). */
function withinTimeout<T>(pending: Promise<T>, ms: number): Promise<NodeResult<T>> {
  return new Promise((resolve) => {
    const timer = setTimeout(
      () => resolve({ ok: false, error: new NodeTimeoutError(`no answer within ${ms} ms`) }),
      ms,
    )
    pending.then(
      (value) => {
        clearTimeout(timer)
        resolve({ ok: true, value })
      },
      (error: unknown) => {
        clearTimeout(timer)
        resolve({ ok: false, error })
      },
    )
  })
}

interface AttemptResult {
  token: string
  tally: QuorumTally
  /** Whole ms of validity left when the attempt was decided (<= 0: ran out). */
  validityMs: number
  /** Local epoch ms when the validity runs out: the lease's expiresAt. */
  expiresAt: number
  /** Largest fencing token among the nodes that granted in time. */
  fence: number
  errors: unknown[]
  ok: boolean
  /** The lease made from a successful attempt. */
  lease?: PermitLease
}

class RedlockClient implements LeaseContext {
  readonly stores: Store[]
  readonly spaces: KeySpace[]
  readonly quorum: number
  readonly kind = 'redlock'
  readonly clockOffsetMs = 0
  readonly ttlMs: number
  readonly autoRenew: boolean
  readonly onLost: RedlockOptions['onLost']

  constructor(private readonly settings: RedlockSettings) {
    this.stores = settings.stores
    this.spaces = settings.stores.map((store) => keySpace(store.prefix, this.kind, settings.name))
    this.quorum = Math.floor(settings.stores.length / 2) + 1
    this.ttlMs = settings.ttlMs
    this.autoRenew = settings.autoRenew
    this.onLost = settings.onLost
  }

  /** LeaseContext: the first node; a lease only reads its clock offset, which `clockOffsetMs`
   * overrides (RedLock expiries are estimated on the local clock). */
  get store(): Store {
    return this.stores[0] as Store
  }

  get space(): KeySpace {
    return this.spaces[0] as KeySpace
  }

  private get name(): string {
    return this.settings.name
  }

  private drift(ttlMs: number): number {
    return driftOf(ttlMs, this.settings.driftFactor, this.settings.clockDriftMs)
  }

  async tryAcquire(): Promise<Lease | undefined> {
    const result = await this.attempt()
    if (result.lease) {
      emit('acquire', { name: this.name, kind: this.kind, waitedMs: 0, outcome: 'acquired' })
      return result.lease
    }
    // Refused by another owner is contention, not an error; failed or slow nodes are.
    if (result.tally.busy > 0 && !result.tally.validityExpired) {
      emit('acquire', { name: this.name, kind: this.kind, waitedMs: 0, outcome: 'busy' })
      return undefined
    }
    emit('acquire', { name: this.name, kind: this.kind, waitedMs: 0, outcome: 'error' })
    throw quorumError(this.name, result, 1, 0)
  }

  async acquire(options: AcquireOptions = {}): Promise<Lease> {
    const { signal } = options
    signal?.throwIfAborted()
    const timeoutMs = options.timeoutMs ?? this.settings.acquireTimeoutMs
    const started = Date.now()
    let outcome: 'acquired' | 'timeout' | 'aborted' | 'error' = 'error'
    try {
      for (let attempts = 1; ; attempts++) {
        const result = await this.attempt()
        if (result.lease) {
          if (signal?.aborted) {
            // The caller left while the attempt was in flight: give the lock straight back.
            await result.lease.release()
            throw signal.reason
          }
          outcome = 'acquired'
          return result.lease
        }
        const waitedMs = Date.now() - started
        const leftMs = timeoutMs - waitedMs
        if (attempts > this.settings.retryCount || leftMs <= 0) {
          outcome = 'timeout'
          throw quorumError(this.name, result, attempts, waitedMs)
        }
        const pause = this.settings.retryDelayMs + Math.random() * this.settings.retryJitterMs
        await sleep(Math.min(leftMs, Math.round(pause)), signal)
      }
    } catch (error) {
      if (signal?.aborted && error === signal.reason) outcome = 'aborted'
      throw error
    } finally {
      emit('acquire', { name: this.name, kind: this.kind, waitedMs: Date.now() - started, outcome })
    }
  }

  /**
   * One RedLock attempt: a fresh token on every node at once, decided as soon as a majority granted
   * or can no longer grant (or every node answered or timed out). Success needs the majority AND
   * validity left, measured from the start of this attempt. On failure the token is released on
   * every node before this returns.
   */
  private async attempt(): Promise<AttemptResult> {
    const n = this.stores.length
    const token = newToken()
    const request: AcquireRequest = {
      token,
      ttlMs: this.ttlMs,
      permits: 1,
      enqueue: false,
      waiterTtlMs: UNUSED_WAITER_TTL_MS,
    }
    const result: AttemptResult = {
      token,
      tally: { granted: 0, busy: 0, failed: 0, nodes: n, quorum: this.quorum, validityExpired: false },
      validityMs: 0,
      expiresAt: 0,
      fence: 0,
      errors: [],
      ok: false,
    }
    const tally = result.tally
    const answered = new Array<boolean>(n).fill(false)
    let decided = false
    const started = performance.now()
    await new Promise<void>((decide) => {
      const check = () => {
        const open = n - tally.granted - tally.busy - tally.failed
        if (tally.granted >= this.quorum || tally.granted + open < this.quorum || open === 0) {
          decided = true
          clearTimeout(timer)
          // Validity left at the moment of the decision, measured from the start of this attempt.
          result.validityMs = Math.floor(this.ttlMs - this.drift(this.ttlMs) - (performance.now() - started))
          result.expiresAt = Date.now() + result.validityMs
          result.ok = tally.granted >= this.quorum && result.validityMs > 0
          decide()
        }
      }
      // Every call starts now, so one timer is every node's deadline.
      const timer = setTimeout(() => {
        answered.forEach((done, i) => {
          if (done) return
          answered[i] = true
          tally.failed++
          result.errors.push(
            new NodeTimeoutError(`node ${i}: no answer within ${this.settings.perNodeTimeoutMs} ms`),
          )
        })
        check()
      }, this.settings.perNodeTimeoutMs)
      this.stores.forEach((store, i) => {
        call(() => store.acquire(this.spaces[i] as KeySpace, request)).then(
          (reply: AcquireReply) => {
            if (answered[i] || decided) {
              // A grant after its node's timeout or after the decision. A lease made from this
              // attempt covers it (its release reaches this node after this grant, on the same
              // connection); a failed attempt's cleanup did too, but hand it back once more in case
              // that release overtook this grant (a reconnect, a cluster redirect).
              if (reply.granted && !result.ok) this.releaseOn(i, token).catch(() => {})
              return
            }
            answered[i] = true
            if (reply.granted) {
              tally.granted++
              result.fence = Math.max(result.fence, reply.fence)
            } else {
              tally.busy++
            }
            check()
          },
          (error: unknown) => {
            if (answered[i] || decided) return
            answered[i] = true
            tally.failed++
            result.errors.push(error)
            check()
          },
        )
      })
    })
    tally.validityExpired = tally.granted >= this.quorum && !result.ok
    if (result.ok) {
      result.lease = new PermitLease(this, token, result.fence, result.expiresAt)
      return result
    }
    debug('attempt on %s failed: %o (%d ms of validity left)', this.name, tally, result.validityMs)
    await this.releaseToken(token)
    return result
  }

  /** LeaseContext: extend on every node at once; a token stays held only with a majority within
   * validity. When a majority says the token is gone, it is lost at once (0). When too few nodes
   * answered in time, this throws so the scheduler retries until the lease's current deadline, which
   * the majority of the last successful extension still guarantees. */
  async renewTokens(ttlMs: number, holds: readonly Acquisition[]): Promise<RenewReply> {
    const tokens = holds.map((hold) => hold.token)
    const started = performance.now()
    const replies = await Promise.all(
      this.stores.map((store, i) =>
        withinTimeout(
          call(() => store.renew(this.spaces[i] as KeySpace, ttlMs, holds)),
          this.settings.perNodeTimeoutMs,
        ),
      ),
    )
    const validityMs = Math.floor(ttlMs - this.drift(ttlMs) - (performance.now() - started))
    const now = Date.now()
    const n = this.stores.length
    const expiresAt: number[] = []
    let unsure: { held: number; answered: number } | undefined
    for (let t = 0; t < tokens.length; t++) {
      let held = 0
      let gone = 0
      for (const reply of replies) {
        if (!reply.ok) continue
        if ((reply.value.expiresAt[t] ?? 0) > 0) held++
        else gone++
      }
      if (held >= this.quorum && validityMs > 0) expiresAt.push(now + validityMs)
      else if (n - gone < this.quorum)
        expiresAt.push(0) // a majority no longer holds it: lost now
      else {
        expiresAt.push(0)
        unsure = { held, answered: held + gone }
      }
    }
    if (unsure) {
      const errors = replies.flatMap((reply) => (reply.ok ? [] : [reply.error]))
      throw new StoreUnavailableError(
        `RedLock "${this.name}" was extended on ${unsure.held} of ${n} nodes (quorum ${this.quorum}, ` +
          `${unsure.answered} answered within "perNodeTimeoutMs" = ${this.settings.perNodeTimeoutMs} ms` +
          `${validityMs > 0 ? '' : ', validity used up'}); retrying until the lease deadline.`,
        { cause: new AggregateError(errors, 'node failures') },
      )
    }
    return { now, expiresAt }
  }

  /** LeaseContext: release on every node at once. Never rejects: a node that is down or slow keeps
   * the key until its TTL runs out, and a token that no longer holds is a no-op (G3). */
  async releaseToken(token: string): Promise<void> {
    const calls = this.stores.map((_, i) => this.releaseOn(i, token))
    const replies = await withinTimeout(Promise.allSettled(calls), this.settings.perNodeTimeoutMs)
    if (!replies.ok) debug('release of %s: a node did not answer within perNodeTimeoutMs', this.name)
    else
      for (const reply of replies.value)
        if (reply.status === 'rejected') debug('release failed: %o', reply.reason)
  }

  private releaseOn(i: number, token: string): Promise<unknown> {
    const pending = call(() => (this.stores[i] as Store).release(this.spaces[i] as KeySpace, token, 1))
    pending.catch(() => {}) // a late failure after withinTimeout gave up must not go unhandled
    return pending
  }
}

function quorumError(
  name: string,
  result: AttemptResult,
  attempts: number,
  waitedMs: number,
): RedlockQuorumError {
  const errors = result.errors
  return new RedlockQuorumError(
    name,
    { ...result.tally },
    attempts,
    waitedMs,
    errors.length > 0
      ? { cause: new AggregateError(errors, 'node failures of the last attempt') }
      : undefined,
  )
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      clearTimeout(timer)
      reject(signal?.reason)
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort)
      resolve()
    }, ms)
    if (signal?.aborted) return onAbort()
    signal?.addEventListener('abort', onAbort, { once: true })
  })
}
