// One RedLock: attempts on every node at once, renewal and release on every node (the algorithm in
// docs/redlock.md; its arithmetic in quorum.ts).
import { abortReason } from '../../core/abort.js'
import { debuglog } from 'node:util'
import { type QuorumTally, RedlockQuorumError, StoreUnavailableError } from '../../core/errors.js'
import { emit } from '../../core/events.js'
import { type KeySpace, keySpace } from '../../core/keys.js'
import { monoNow } from '../../core/clock.js'
import { type Lease, type LeaseContext, PermitLease } from '../../core/client/lease.js'
import { type AcquireOptions, newToken } from '../../core/client/lock-client.js'
import type {
  AcquireReply,
  AcquireRequest,
  Acquisition,
  RenewReply,
  Store,
} from '../../core/protocol/store.js'
import { sleep, within } from '../../core/timeout.js'
import type { RedlockSettings } from './options.js'
import { decided, driftOf, majority, renewalVerdict, validityMs } from './quorum.js'

const debug = debuglog('tollgate:redlock')

/** Try mode never queues, so the waiter heartbeat of the permit set is never used. */
const UNUSED_WAITER_TTL_MS = 10_000

class NodeTimeoutError extends Error {}

/** Start a store call; a synchronous throw becomes a rejection. */
function call<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return fn()
  } catch (error) {
    return Promise.reject(error)
  }
}

interface AttemptResult {
  token: string
  tally: QuorumTally
  /** Whole ms of validity left when the attempt was decided (<= 0: ran out). */
  validityMs: number
  /** Local epoch ms when the validity runs out: the lease's expiresAt. */
  expiresAt: number
  /** The same moment on the local monotonic clock (core/clock.ts): the lease's deadline. */
  deadline: number
  /** Largest fencing token among the nodes that granted in time. */
  fence: number
  errors: unknown[]
  ok: boolean
  /** The lease made from a successful attempt. */
  lease?: PermitLease
}

export class RedlockClient implements LeaseContext {
  readonly stores: Store[]
  readonly spaces: KeySpace[]
  readonly quorum: number
  readonly kind = 'redlock'
  /** Its expiries are the validity left (ttl less RedLock's own drift): no second margin. */
  readonly driftIncluded = true
  readonly ttlMs: number
  readonly autoRenew: boolean
  readonly onLost: RedlockSettings['onLost']

  constructor(private readonly settings: RedlockSettings) {
    this.stores = settings.stores
    this.spaces = settings.stores.map((store) => keySpace(store.prefix, this.kind, settings.name))
    this.quorum = majority(settings.stores.length)
    this.ttlMs = settings.ttlMs
    this.autoRenew = settings.autoRenew
    this.onLost = settings.onLost
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
    if (signal?.aborted) throw abortReason(signal)
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
            throw abortReason(signal)
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
      if (signal?.aborted && error === abortReason(signal)) outcome = 'aborted'
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
      deadline: 0,
      fence: 0,
      errors: [],
      ok: false,
    }
    const tally = result.tally
    const answered = new Array<boolean>(n).fill(false)
    let isDecided = false
    const started = performance.now()
    await new Promise<void>((decide) => {
      const check = () => {
        if (decided(tally)) {
          isDecided = true
          clearTimeout(timer)
          // Validity left at the moment of the decision, measured from the start of this attempt.
          result.validityMs = validityMs(this.ttlMs, this.drift(this.ttlMs), performance.now() - started)
          result.expiresAt = Date.now() + result.validityMs
          result.deadline = monoNow() + result.validityMs
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
        call(() => store.permits.acquire(this.spaces[i] as KeySpace, request)).then(
          (reply: AcquireReply) => {
            if (answered[i] || isDecided) {
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
            if (answered[i] || isDecided) return
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
      result.lease = new PermitLease(this, token, result.fence, result.expiresAt, result.deadline)
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
    const startedAt = Date.now()
    const started = performance.now()
    const replies = await Promise.all(
      this.stores.map((store, i) =>
        within(
          call(() => store.permits.renew(this.spaces[i] as KeySpace, ttlMs, holds)),
          this.settings.perNodeTimeoutMs,
        ),
      ),
    )
    const validity = validityMs(ttlMs, this.drift(ttlMs), performance.now() - started)
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
      const verdict = renewalVerdict(held, gone, n, this.quorum, validity)
      // Held until ttl less drift after the calls started: reported from then (now = startedAt), so
      // the lease counts it from when it asked, as for any renewal.
      if (verdict === 'held') expiresAt.push(startedAt + ttlMs - this.drift(ttlMs))
      else expiresAt.push(0) // 'lost': a majority no longer holds it
      if (verdict === 'unsure') unsure = { held, answered: held + gone }
    }
    if (unsure) {
      const errors = replies.flatMap((reply) => (reply.ok ? [] : [reply.error]))
      throw new StoreUnavailableError(
        `RedLock "${this.name}" was extended on ${unsure.held} of ${n} nodes (quorum ${this.quorum}, ` +
          `${unsure.answered} answered within "perNodeTimeoutMs" = ${this.settings.perNodeTimeoutMs} ms` +
          `${validity > 0 ? '' : ', validity used up'}); retrying until the lease deadline.`,
        { cause: new AggregateError(errors, 'node failures') },
      )
    }
    return { now: startedAt, expiresAt }
  }

  /** LeaseContext: release on every node at once. Never rejects: a node that is down or slow keeps
   * the key until its TTL runs out, and a token that no longer holds is a no-op (G3). */
  async releaseToken(token: string): Promise<void> {
    const calls = this.stores.map((_, i) => this.releaseOn(i, token))
    const replies = await within(Promise.allSettled(calls), this.settings.perNodeTimeoutMs)
    if (!replies.ok) debug('release of %s: a node did not answer within perNodeTimeoutMs', this.name)
    else
      for (const reply of replies.value)
        if (reply.status === 'rejected') debug('release failed: %o', reply.reason)
  }

  private releaseOn(i: number, token: string): Promise<unknown> {
    const pending = call(() =>
      (this.stores[i] as Store).permits.release(this.spaces[i] as KeySpace, token, 1),
    )
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
