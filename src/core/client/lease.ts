// A held permit as the user sees it (Lease), and the one class every primitive's leases are:
// renewal, loss, and a release that runs once however often it is called.
import { debuglog } from 'node:util'
import { localDeadline as deadlineFrom, monoNow } from '../clock.js'
import { LeaseLostError } from '../errors.js'
import { emit, observed } from '../events.js'
import type { KeySpace } from '../keys.js'
import { renewals } from './renewal.js'
import type { Acquisition, RenewReply } from '../protocol/store.js'

const debug = debuglog('tollgate:lease')

/** A held permit. Release it with `release()`, `await using`, or let `withLease` do it. */
export interface Lease extends AsyncDisposable {
  /** The primitive's name as given by the user. */
  readonly name: string
  /** The hash-tagged key prefix of the primitive in the store. */
  readonly key: string
  /** Owner token of this acquisition (opaque). */
  readonly token: string
  /** Strictly increasing per name across owners and processes (G7): pass it to downstreams. */
  readonly fencingToken: number
  /** Epoch ms on the store's clock when the lease runs out unless renewed. */
  readonly expiresAt: number
  /** Aborts with a LeaseLostError when the lease is lost (G4). Never aborts on release(). */
  readonly signal: AbortSignal
  /** Live holders of the name right after this grant, when the store reported it (an immediate grant
   * of a mutex or semaphore; not a permit handed over from the queue). */
  readonly holders?: number | undefined
  /** Extend the lease to now + ttlMs (default: the primitive's ttlMs). Rejects with LeaseLostError
   * when the lease is already gone. */
  renew(ttlMs?: number): Promise<void>
  /** Give the permit back. Idempotent; never frees another owner's permit (G3). */
  release(): Promise<void>
}

/** What a lease needs from the primitive that created it: how to renew and release its token. */
export interface LeaseContext {
  readonly space: KeySpace
  readonly kind: string
  readonly ttlMs: number
  readonly autoRenew: boolean
  /** The expiries it reports already leave room for clock drift (RedLock: ttl less its drift): no
   * further margin is taken off them. */
  readonly driftIncluded?: boolean
  onLost?: ((error: LeaseLostError, lease: Lease) => void) | undefined
  /** Renew leases of this primitive in one store call (the scheduler batches per context and ttl). */
  renewTokens(ttlMs: number, holds: readonly Acquisition[]): Promise<RenewReply>
  /** Give a token's hold back (with `op`, one reentrant acquisition of it); must be a no-op for a
   * token or acquisition that no longer holds (G3, G12). */
  releaseToken(token: string, op?: string): Promise<unknown>
  /** releaseToken() done synchronously, when the store can (true: done; false: use releaseToken). */
  releaseTokenNow?(token: string, op?: string): boolean
}

/** What release() returns for a lease given back synchronously. */
const RELEASED: Promise<void> = Promise.resolve()

export class PermitLease implements Lease {
  readonly name: string
  readonly key: string
  expiresAt: number
  /** Local monotonic ms (clock.ts) by which the lease has surely not run out on the store, less the
   * drift margin (G4): the signal aborts then unless a renewal confirmed more. */
  localDeadline = 0
  /** The same moment on the wall clock: the monotonic clock stops while the machine is suspended, the
   * store's does not, so the lease counts as run out when either clock has passed its deadline (a
   * wall clock stepped forward can then only end a lease early, never late). */
  wallDeadline = 0
  /** Created on first use of `signal`: most leases are released without anyone asking for it, and an
   * AbortController per lease showed up in profiles of the gateway's hot path. */
  private controller: AbortController | undefined
  /** Set once the lease is lost (what the signal aborts with). */
  private lostWith: LeaseLostError | undefined
  /** Called once when the lease is lost, without creating the signal (see whenLost). */
  private lossListeners: ((error: LeaseLostError) => void)[] | undefined
  private releasing: Promise<void> | undefined
  /** Without auto-renewal, the signal still aborts when the lease runs out. */
  private expiryTimer: NodeJS.Timeout | undefined

  constructor(
    readonly context: LeaseContext,
    readonly token: string,
    readonly fencingToken: number,
    expiresAt: number,
    /** See localDeadline: computed by whoever learnt of the grant (clock.ts localDeadline()). */
    localDeadline: number,
    readonly holders?: number,
    /** The acquisition id of a reentrant owner's lease (released alone); undefined for a fresh token. */
    readonly op?: string,
  ) {
    this.name = context.space.name
    this.key = context.space.base
    this.expiresAt = expiresAt
    this.setDeadline(localDeadline)
    if (context.autoRenew) renewals.add(this)
    else this.armExpiry()
  }

  private setDeadline(deadline: number): void {
    this.localDeadline = deadline
    this.wallDeadline = Date.now() + (deadline - monoNow())
  }

  /** Whether the deadline has passed on either clock (see wallDeadline). */
  pastDeadline(now = monoNow()): boolean {
    return now >= this.localDeadline || Date.now() >= this.wallDeadline
  }

  /** The deadline is watched by a timer (the scheduler's, or this one), which a busy or suspended
   * event loop runs late: whoever looks at the lease meanwhile finds it lost already. */
  private checkDeadline(): void {
    if (!this.lostWith && !this.releasing && this.pastDeadline())
      this.lose(
        'its deadline passed before a renewal confirmed it (the process was busy, suspended or cut off)',
      )
  }

  /** Watch the deadline with a timer of its own: a lease without auto-renewal, or one whose release
   * failed (it is renewed no more, but may still be lost). */
  private armExpiry(): void {
    clearTimeout(this.expiryTimer)
    this.expiryTimer = setTimeout(
      () => this.lose('it expired without renewal'),
      Math.max(0, Math.ceil(this.localDeadline - monoNow())),
    ).unref()
  }

  get signal(): AbortSignal {
    this.checkDeadline()
    if (!this.controller) {
      this.controller = new AbortController()
      if (this.lostWith) this.controller.abort(this.lostWith)
    }
    return this.controller.signal
  }

  get active(): boolean {
    this.checkDeadline()
    return !this.releasing && !this.lostWith
  }

  /** Drop every loss listener: the lease goes on to serve someone else (the gateway's permit
   * keep-alive), so the listeners of the request it served must neither fire nor be kept alive. */
  clearLossListeners(): void {
    this.lossListeners = undefined
  }

  /** Run `listener` once if the lease is lost (at once if it already is). */
  onLoss(listener: (error: LeaseLostError) => void): void {
    if (this.lostWith) listener(this.lostWith)
    else (this.lossListeners ??= []).push(listener)
  }

  renew(ttlMs = this.context.ttlMs): Promise<void> {
    if (this.lostWith) return Promise.reject(this.lostWith)
    if (this.releasing) return Promise.reject(new LeaseLostError(this.name, 'it was released'))
    // Sent now, not after a renewal in flight: calls of one name reach the store in the order they
    // were made (a release() or tryAcquire() made after this call must find it done, G11).
    const askedAt = monoNow()
    return this.context.renewTokens(ttlMs, [{ token: this.token, op: this.op }]).then((reply) => {
      this.applyRenewal(askedAt, reply.now, reply.expiresAt[0] ?? 0)
      if (this.lostWith) throw this.lostWith
      if (this.context.autoRenew) renewals.moved(this)
    })
  }

  /** Apply a renewal reply to a call asked at `askedAt` (local): the store's clock when it ran, and the
   * new expiry, or 0 when the store no longer knows this token. */
  applyRenewal(askedAt: number, now: number, expiresAt: number): void {
    // Released meanwhile: nothing to extend or to lose.
    if (this.releasing) return
    if (this.lostWith) {
      // Lost meanwhile (its deadline passed while the call was out): lost it stays. If the late reply
      // says the renewal did extend it, nobody will use it: give it back rather than leave it held for
      // a whole TTL (the script frees it only if this token still holds it, G3).
      if (expiresAt > 0)
        this.context.releaseToken(this.token, this.op).catch((error: unknown) => {
          debug('giving back %s after its loss failed: %o', this.name, error)
        })
      return
    }
    if (expiresAt === 0) {
      this.lose('the store no longer holds it for this owner (expired or taken over)')
      return
    }
    this.expiresAt = expiresAt
    this.setDeadline(
      this.context.driftIncluded ? askedAt + (expiresAt - now) : deadlineFrom(askedAt, now, expiresAt),
    )
    if (!this.context.autoRenew) this.armExpiry()
    emit('renew', { name: this.name, kind: this.context.kind })
  }

  /**
   * Give the permit back synchronously, when the store can (the memory store): true when done
   * (release() then resolves at once), false when release() must do it. A renewal in flight on such
   * a store took effect when it was called; its reply finds the lease released and changes nothing.
   */
  releaseNow(): boolean {
    if (this.releasing) return false
    // Nothing changes unless the store gave the permit back: false leaves the lease as it was.
    if (!this.context.releaseTokenNow?.(this.token, this.op)) return false
    renewals.delete(this)
    clearTimeout(this.expiryTimer)
    this.releasing = RELEASED
    this.lossListeners = undefined
    if (observed('release')) emit('release', { name: this.name, kind: this.context.kind })
    return true
  }

  release(): Promise<void> {
    if (this.releaseNow()) return RELEASED
    if (!this.releasing) {
      renewals.delete(this)
      clearTimeout(this.expiryTimer)
      // Sent now, in call order with this name's other calls (a tryAcquire() made right after an
      // un-awaited release() finds the permit free, as in memory: G11). A renewal still in flight
      // was sent before and lands first; its reply finds the lease releasing and changes nothing.
      // Also for a lease we consider lost: the script frees it only if this token still holds it
      // (G3), which gives a permit back early when only our renewals, not the lease, had failed.
      const releasing = this.context.releaseToken(this.token, this.op).then(() => {
        // Released, so never lost: drop the listeners now. They close over the caller's request, and
        // a lease that reached the old generation would otherwise drag every request it served there
        // too (measured: 4.3 KB promoted per gateway request with them kept, 0.9 KB without). Kept
        // after a failed release, which may still end in a loss.
        this.lossListeners = undefined
        emit('release', { name: this.name, kind: this.context.kind })
      })
      this.releasing = releasing
      // A release that failed (store down) may be retried; the lease expires on its own meanwhile,
      // and may still be lost before that: its deadline stays watched (renewed it is no more).
      releasing.catch(() => {
        if (this.releasing !== releasing) return
        this.releasing = undefined
        if (!this.lostWith) this.armExpiry()
      })
    }
    return this.releasing
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.release()
  }

  /** Declare the lease lost: abort the signal, stop renewing, report. Never throws (G4). */
  lose(reason: string, cause?: unknown): void {
    if (this.lostWith || this.releasing) return
    renewals.delete(this)
    clearTimeout(this.expiryTimer)
    const error = new LeaseLostError(this.name, reason, cause === undefined ? undefined : { cause })
    debug('lost %s: %s', this.name, reason)
    this.lostWith = error
    this.controller?.abort(error)
    for (const listener of this.lossListeners ?? []) {
      try {
        listener(error)
      } catch (listenerError) {
        debug('loss listener threw: %o', listenerError)
      }
    }
    this.lossListeners = undefined
    emit('lost', { name: this.name, kind: this.context.kind, error })
    try {
      this.context.onLost?.(error, this)
    } catch (hookError) {
      debug('onLost threw: %o', hookError)
    }
  }
}

/** Run `listener` once if `lease` is lost: without creating its AbortSignal when the lease is one of
 * ours (the gateway's per-request path), through the signal otherwise. */
export function whenLost(lease: Lease, listener: (error: LeaseLostError) => void): void {
  if (lease instanceof PermitLease) lease.onLoss(listener)
  else
    lease.signal.addEventListener('abort', () => listener(lease.signal.reason as LeaseLostError), {
      once: true,
    })
}
