// The acquire loop every primitive shares: try at once, else wait in the store's queue (woken by
// grants and re-checks) until granted, timed out or aborted; owner tokens.
import { type AbortSignalLike, abortReason, onAbort } from '../abort.js'
import { randomBytes } from 'node:crypto'
import { debuglog } from 'node:util'
import { localDeadline, monoNow } from '../clock.js'
import { AcquireTimeoutError, ShedError } from '../errors.js'
import { emit, observed, traceName } from '../events.js'
import type { KeySpace } from '../keys.js'
import type { LockSettings } from '../options.js'
import { type Lease, type LeaseContext, PermitLease } from './lease.js'
import { weightedToken } from '../weight.js'
import { type Discipline, fairToken } from '../fair.js'
import type { AcquireReply, Grant, RecheckReply, RenewReply, Store, Acquisition } from '../protocol/store.js'
import { type WaitClient, type WaitGroup, type Waiter, waitGroup } from './wait-group.js'

const debug = debuglog('tollgate:acquire')

export interface AcquireOptions {
  /** Abort the wait; the acquire rejects with the signal's reason and leaves the queue. */
  signal?: AbortSignalLike | undefined
  /** Give up after this many ms with AcquireTimeoutError (default: the primitive's acquireTimeoutMs;
   * Infinity waits until a permit is free or the signal aborts). */
  timeoutMs?: number
  /** Called once if the call could not be granted at once and joined the queue. Return false to give
   * up there and then: the call leaves the queue and rejects with AcquireTimeoutError (waitedMs ~0).
   * Lets a caller bound how many wait (the middleware's maxQueue) without counting calls that are
   * only on their way to the store. */
  onQueued?: () => boolean | void
}

/** Whole ms since `started` (monotonic), as waits are reported. */
const waitedSince = (started: number): number => Math.round(monoNow() - started)

/** 96 random bits per process: tokens of different processes never collide. */
const TOKEN_PREFIX = randomBytes(12).toString('base64url')
let tokenCounter = 0

/** A unique owner token: this process's random prefix and a counter, URL-safe, so it never contains the
 * separators of grant messages. Unique is all a token must be (anyone who can read Redis sees it
 * anyway); a counter costs nothing on the hot path, where 16 fresh random bytes per call showed up as
 * ~5 % of the client's CPU in profiles. */
export function newToken(): string {
  tokenCounter = (tokenCounter + 1) % Number.MAX_SAFE_INTEGER
  return TOKEN_PREFIX + tokenCounter.toString(36)
}

/**
 * The client side of a fair queue in the store: take a hold at once or wait for it in the global FIFO
 * queue, with wake-ups by notification (G5, G10). Subclasses say which scripts do the work.
 *
 * `owner` undefined: every attempt is a fresh token (mutex, semaphore). `owner` set: the token is the
 * owner's (reentrant mutex, read/write lock), and every attempt has its own acquisition id, so a call
 * that the store ran twice (a resend) counts once, and a grant reaches only the wait it was made for
 * (G12). A grant whose lease already ran out when it reached us (the process was frozen) is given
 * back and never returned: acquire() queues again, tryAcquire() reports no permit.
 */
export abstract class LockClient implements LeaseContext, WaitClient {
  readonly store: Store
  readonly space: KeySpace
  readonly kind: string
  readonly ttlMs: number
  readonly autoRenew: boolean
  readonly waiterTtlMs: number
  readonly acquireTimeoutMs: number
  readonly onLost: LockSettings['onLost']

  constructor(settings: LockSettings) {
    this.store = settings.store
    this.space = settings.space
    this.kind = settings.kind
    this.ttlMs = settings.ttlMs
    this.autoRenew = settings.autoRenew
    this.waiterTtlMs = settings.waiterTtlMs
    this.acquireTimeoutMs = settings.acquireTimeoutMs
    this.onLost = settings.onLost
  }

  /** Take a hold for the acquisition now, or (enqueue) join the queue. */
  protected abstract attempt(acquisition: Acquisition, enqueue: boolean): Promise<AcquireReply>
  /** attempt() without joining the queue, answered synchronously by a store that can (the memory
   * store); undefined when the store cannot. */
  protected attemptNow(_acquisition: Acquisition): AcquireReply | undefined {
    return undefined
  }
  /** Batched heartbeat + state of this client's waits (the wait group calls it). */
  abstract recheckWaits(waits: readonly Acquisition[]): Promise<RecheckReply>
  abstract renewTokens(ttlMs: number, holds: readonly Acquisition[]): Promise<RenewReply>
  /** Release a hold (one acquisition of it) or leave the queue; a no-op for an acquisition that has
   * neither (G3, G12). */
  abstract releaseToken(token: string, op?: string): Promise<unknown>

  /** `weight`: the permits a fresh token counts for (a semaphore's acquire({ weight }); weight.ts).
   * `discipline`: its place in a fair queue (fair.ts), carried by the token; fresh tokens only. */
  private acquisition(owner: string | undefined, weight = 1, discipline?: Discipline): Acquisition {
    if (owner !== undefined) return { token: owner, op: newToken() }
    const token = discipline ? fairToken(newToken(), weight, discipline) : weightedToken(newToken(), weight)
    return { token, op: undefined }
  }

  /** The local deadline (clock.ts) of a grant a call asked at `askedAt` got in its reply. */
  private deadlineOf(askedAt: number, reply: { now: number; expiresAt: number }): number {
    return localDeadline(askedAt, reply.now, reply.expiresAt)
  }

  /** Give back a grant that expired before it reached us; failures are harmless (it expired). */
  private async giveBack(acquisition: Acquisition): Promise<void> {
    debug('%s: a grant expired before it reached us (frozen process?), giving it back', this.space.name)
    await this.releaseToken(acquisition.token, acquisition.op).catch(() => {})
  }

  private lease(
    acquisition: Acquisition,
    fence: number,
    expiresAt: number,
    deadline: number,
    holders?: number,
  ): PermitLease {
    return new PermitLease(this, acquisition.token, fence, expiresAt, deadline, holders, acquisition.op)
  }

  async tryAcquire(
    owner: string | undefined,
    weight = 1,
    discipline?: Discipline,
  ): Promise<Lease | undefined> {
    const acquisition = this.acquisition(owner, weight, discipline)
    const askedAt = monoNow()
    const reply = await this.attempt(acquisition, false)
    const deadline = reply.granted ? this.deadlineOf(askedAt, reply) : 0
    if (reply.granted && deadline <= monoNow()) await this.giveBack(acquisition)
    else if (reply.granted) {
      emit('acquire', { name: this.space.name, kind: this.kind, waitedMs: 0, outcome: 'acquired' })
      return this.lease(acquisition, reply.fence, reply.expiresAt, deadline, reply.holders)
    }
    emit('acquire', { name: this.space.name, kind: this.kind, waitedMs: 0, outcome: 'busy' })
    return undefined
  }

  /**
   * A lease taken at once, without a promise, from a store that answers synchronously (the memory
   * store's uncontended path); undefined when the store cannot answer so, or when no permit is free
   * right now (then acquire() or tryAcquire(), which queue or answer for a busy set as usual). Never
   * jumps the queue: a fresh token is granted only while nobody waits (G5).
   */
  acquireNow(owner: string | undefined, weight = 1, discipline?: Discipline): Lease | undefined {
    const acquisition = this.acquisition(owner, weight, discipline)
    const askedAt = monoNow()
    const reply = this.attemptNow(acquisition)
    if (!reply?.granted) return undefined
    // Live by construction: granted now, on a store no time passed on (acquire() checks a reply that
    // may have reached a frozen process late).
    if (observed('acquire'))
      emit('acquire', { name: this.space.name, kind: this.kind, waitedMs: 0, outcome: 'acquired' })
    return this.lease(
      acquisition,
      reply.fence,
      reply.expiresAt,
      this.deadlineOf(askedAt, reply),
      reply.holders,
    )
  }

  /** `weight`: the permits a fresh token counts for (a semaphore's; checked by the caller);
   * `discipline`: its place in a fair queue (a semaphore with `overload`). A fair queue may shed the
   * call (ShedError): refused at once, or evicted while it waits; it never queues again after that. */
  async acquire(
    owner: string | undefined,
    options: AcquireOptions = {},
    weight = 1,
    discipline?: Discipline,
  ): Promise<Lease> {
    const { signal } = options
    const timeoutMs = options.timeoutMs ?? this.acquireTimeoutMs
    if (signal?.aborted) throw abortReason(signal)
    const started = monoNow()
    // The wait group (subscription, timers) is joined only once a call leaves us queued: an
    // uncontended acquire is one script call and touches nothing else.
    let group: WaitGroup | undefined
    /** The acquisition that may be in the queue (or granted meanwhile): given back on failure. */
    let queued: Acquisition | undefined
    /** onQueued was called (once per acquire, at the first queueing). */
    let announced = false
    let outcome: 'acquired' | 'timeout' | 'aborted' | 'shed' | 'error' = 'error'
    try {
      for (let attempts = 0; ; attempts++) {
        if (attempts > 0) {
          // Queueing again (evicted, or a grant that expired on its way): within the same bounds.
          if (signal?.aborted) throw abortReason(signal)
          if (monoNow() - started >= timeoutMs)
            throw new AcquireTimeoutError(this.space.name, waitedSince(started))
        }
        const acquisition = this.acquisition(owner, weight, discipline)
        const askedAt = monoNow()
        const reply = await this.attempt(acquisition, true)
        if (reply.granted) {
          const deadline = this.deadlineOf(askedAt, reply)
          if (deadline <= monoNow()) {
            await this.giveBack(acquisition)
            continue
          }
          const lease = this.lease(acquisition, reply.fence, reply.expiresAt, deadline, reply.holders)
          // Aborted while the call was in flight: the caller is gone, so the permit goes straight back.
          if (signal?.aborted) {
            lease.release().catch(() => {})
            throw abortReason(signal)
          }
          outcome = 'acquired'
          return lease
        }
        if ('shed' in reply) {
          queued = undefined
          throw new ShedError(this.space.name, reply.shed)
        }
        queued = acquisition
        if (!announced) {
          if (debug.enabled)
            debug('wait %s %s: queued', this.kind, JSON.stringify(traceName(this.space.name)))
          announced = true
          if (options.onQueued?.() === false)
            throw new AcquireTimeoutError(this.space.name, waitedSince(started))
        }
        let wake: () => void = () => {}
        const waiter: Waiter = {
          token: acquisition.token,
          op: acquisition.op ?? acquisition.token,
          client: this,
          grant: undefined,
          deadline: 0,
          gone: false,
          shed: false,
          wake: () => wake(),
        }
        if (!group) {
          group = waitGroup(this.store, this.space)
          const joined = group
          // A grant published before the subscription was active is found by the re-check right after it.
          if (!joined.isSubscribed) void joined.subscribed.then(() => joined.recheckSoon())
        }
        // A grant that reached the group before this registration is kept for us there; its deadline
        // comes from the name's clock offset, which this reply tells first.
        group.sample(askedAt, reply.now)
        group.add(waiter)
        let grant: Grant | undefined
        try {
          group.hint(reply.nextExpiry, reply.now)
          grant = await this.waitForChange(waiter, signal, started, timeoutMs, (fn) => {
            wake = fn
          })
        } finally {
          group.remove(waiter)
        }
        if (!grant) {
          queued = undefined
          // Evicted by a higher class: the store never grants it and holds nothing of it, so nothing
          // is given back, and queueing again would only take the place the eviction freed.
          if (waiter.shed) throw new ShedError(this.space.name, 'evicted')
          // Fell out of the queue (our heartbeat lapsed, e.g. a frozen event loop): queue again.
          continue
        }
        if (waiter.deadline <= monoNow()) {
          // Handed to us while we were frozen, and run out since: give it back and queue again.
          queued = undefined
          await this.giveBack(acquisition)
          continue
        }
        const lease = this.lease(acquisition, grant.fence, grant.expiresAt, waiter.deadline)
        // A handed-over permit starts with at most waiterTtlMs; auto-renewal stretches it on its own
        // schedule, otherwise stretch it to the full ttlMs now (not needed when ttlMs fits).
        if (!this.autoRenew && this.ttlMs > this.waiterTtlMs) await lease.renew()
        outcome = 'acquired'
        return lease
      }
    } catch (error) {
      outcome =
        error instanceof AcquireTimeoutError
          ? 'timeout'
          : error instanceof ShedError
            ? 'shed'
            : signal?.aborted
              ? 'aborted'
              : 'error'
      throw error
    } finally {
      if (outcome !== 'acquired' && queued) this.leaveQueue(queued)
      emit('acquire', { name: this.space.name, kind: this.kind, waitedMs: waitedSince(started), outcome })
    }
  }

  /** Resolves with a grant, or undefined when the waiter fell out of the queue or was shed; rejects
   * on abort or timeout. */
  private waitForChange(
    waiter: Waiter,
    signal: AbortSignalLike | undefined,
    started: number,
    timeoutMs: number,
    setWake: (fn: () => void) => void,
  ): Promise<Grant | undefined> {
    return new Promise<Grant | undefined>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined
      let unwatch: (() => void) | undefined
      const done = () => {
        clearTimeout(timer)
        unwatch?.()
        setWake(() => {})
      }
      const check = () => {
        if (waiter.grant) {
          done()
          resolve(waiter.grant)
        } else if (waiter.gone || waiter.shed) {
          done()
          resolve(undefined)
        }
      }
      const aborted = () => {
        done()
        reject(signal && abortReason(signal))
      }
      setWake(check)
      if (signal?.aborted) return aborted()
      if (signal) unwatch = onAbort(signal, aborted)
      if (Number.isFinite(timeoutMs)) {
        const left = started + timeoutMs - monoNow()
        timer = setTimeout(
          () => {
            done()
            reject(new AcquireTimeoutError(this.space.name, waitedSince(started)))
          },
          Math.max(0, left),
        )
      }
      check()
    })
  }

  /** Leave the queue after a timeout or abort. If a permit was handed to us meanwhile, this gives it
   * back (the release script frees it and hands it on). A failure here is harmless: our heartbeat
   * stops and the entry falls out within waiterTtlMs. */
  private leaveQueue(acquisition: Acquisition): void {
    this.releaseToken(acquisition.token, acquisition.op).catch(() => {})
  }
}
