// The framework-free engine both the middleware and the gateway stand on: find a request's bucket,
// take a permit at once or wait in the fair queue (bounded by maxWaitMs and maxQueue), and turn every
// failure into a rejection or a fail-open pass. Adapters only move headers and bodies.
import type { AbortSignalLike } from '../core/abort.js'
import type { Lease } from '../core/client/lease.js'
import { AcquireTimeoutError } from '../core/errors.js'
import type { RejectReason, Rejection, ResolvedConfig, TollgateInfo } from './options.js'

export type { OnLost, RejectReason, Rejection, TollgateInfo } from './options.js'
import { type HttpAnswer, policyHeaders, rejectionResponse } from './response.js'
import { type StoreHealth, storeHealth } from './store-health.js'

/** Counters for metrics (the gateway exports them). */
export interface AdmissionCounters {
  admitted: number
  rejected: Record<RejectReason, number>
  failedOpen: number
  dryRunRejected: number
  lost: number
  storeErrors: number
  /** Requests holding a permit in this process right now. */
  inFlight: number
  /** Requests waiting in this process right now. */
  queued: number
}

export type AdmitResult =
  | { outcome: 'admitted'; info: TollgateInfo; left: number }
  | { outcome: 'passed'; info: TollgateInfo; left: number }
  | { outcome: 'rejected'; rejection: Rejection }

/** Something that hands out leases for one bucket: a semaphore, or one side of a read/write lock. */
export interface Gate {
  /** Permits of the bucket; undefined for a read/write lock (no RateLimit headers then). */
  readonly permits: number | undefined
  acquire(options: {
    signal: AbortSignalLike
    timeoutMs: number
    onQueued: () => boolean | void
  }): Promise<Lease>
  tryAcquire(): Promise<Lease | undefined>
}

/**
 * Framework-free admission: find the bucket's gate, take a permit at once or wait for it (bounded by
 * maxWaitMs and maxQueue), and turn every failure into a rejection or a fail-open pass. The adapters
 * only move headers and bodies.
 */
export class Admission<Req> {
  readonly counters: AdmissionCounters = {
    admitted: 0,
    rejected: { queue_full: 0, timeout: 0, store_unavailable: 0 },
    failedOpen: 0,
    dryRunRejected: 0,
    lost: 0,
    storeErrors: 0,
    inFlight: 0,
    queued: 0,
  }
  /** Requests of each bucket waiting in the store's queue (not those whose call is on its way). */
  private readonly waiting = new Map<string, number>()
  /** Whether the store is known down (shared by every admission on the store). */
  readonly health: StoreHealth

  constructor(
    readonly config: ResolvedConfig<Req>,
    /** The gate and bucket of a request. */
    private readonly gateFor: (req: Req) => { key: string; gate: Gate; keyed: boolean },
  ) {
    this.health = storeHealth(config.store)
  }

  async admit(req: Req, signal: AbortSignalLike): Promise<AdmitResult> {
    const started = Date.now()
    const { key, gate, keyed } = this.gateFor(req)
    const info = (lease: Lease | undefined): TollgateInfo => ({
      name: this.config.name,
      key,
      permits: gate.permits,
      fencingToken: lease?.fencingToken,
      lease,
      waitedMs: Date.now() - started,
    })
    const reject = (reason: RejectReason): AdmitResult => {
      if (this.config.dryRun && reason !== 'store_unavailable') {
        this.counters.dryRunRejected++
        return { outcome: 'passed', info: info(undefined), left: 0 }
      }
      this.counters.rejected[reason]++
      const status = reason === 'store_unavailable' ? 503 : (this.config.statusCode ?? (keyed ? 429 : 503))
      const retryAfterS = Math.max(1, Math.ceil(this.config.maxWaitMs / 1000))
      return { outcome: 'rejected', rejection: { reason, status, retryAfterS, key, permits: gate.permits } }
    }

    const storeFailed = (): AdmitResult => {
      this.counters.storeErrors++
      if (this.config.failOpen || this.config.dryRun) {
        this.counters.failedOpen++
        return { outcome: 'passed', info: info(undefined), left: 0 }
      }
      return reject('store_unavailable')
    }
    // The store is known down: answer now, without waiting for another timeout (G14).
    if (this.health.down) {
      this.health.failedFast++
      return storeFailed()
    }

    let lease: Lease | undefined
    let queueFull = false
    let counted = false
    // Counted only once the store put the request in its queue: a request whose call is merely on its
    // way is not waiting for anything.
    const onQueued = () => {
      const waiting = this.waiting.get(key) ?? 0
      if (waiting >= this.config.maxQueue) {
        queueFull = true
        return false
      }
      this.waiting.set(key, waiting + 1)
      this.counters.queued++
      counted = true
      return true
    }
    try {
      if (this.config.maxWaitMs === 0) {
        lease = await gate.tryAcquire()
        if (!lease) return reject('timeout')
      } else {
        try {
          lease = await gate.acquire({ signal, timeoutMs: this.config.maxWaitMs, onQueued })
        } finally {
          if (counted) {
            this.counters.queued--
            const left = (this.waiting.get(key) ?? 1) - 1
            if (left > 0) this.waiting.set(key, left)
            else this.waiting.delete(key)
          }
        }
      }
    } catch (error) {
      if (queueFull) return reject('queue_full')
      if (error instanceof AcquireTimeoutError) return reject('timeout')
      if (signal.aborted) throw error // the client left: nothing to answer
      this.health.failed(error, this.config.logger)
      return storeFailed()
    }
    this.counters.admitted++
    this.counters.inFlight++
    // Permits left right after this admission (unknown holders: a hand-over from a full queue, so 0).
    const left = gate.permits === undefined ? 0 : gate.permits - (lease.holders ?? gate.permits)
    return { outcome: 'admitted', info: info(lease), left: Math.max(0, left) }
  }

  /** Call once per admitted request when its response is done (finish or abort). Never throws; the
   * promise (never rejected) settles when the store has the permit back. */
  release(info: TollgateInfo): Promise<void> | undefined {
    if (!info.lease) return undefined
    this.counters.inFlight--
    return info.lease.release().catch((error: unknown) => {
      // The lease expires on its own; nothing is stuck.
      this.config.logger.warn('tollgate: release failed', { name: this.config.name, error })
    })
  }

  /** Call the onRejected hook; a throwing hook is logged, never allowed to crash the process. */
  notifyRejected(req: Req, rejection: Rejection): void {
    try {
      this.config.onRejected?.(req, rejection)
    } catch (error) {
      this.config.logger.error('tollgate: onRejected threw', { error })
    }
  }

  /** Count and report a lost lease; returns true when the request should be aborted. */
  lost(info: TollgateInfo, error: Error): boolean {
    this.counters.lost++
    const { onLost, logger } = this.config
    if (typeof onLost === 'function') {
      try {
        onLost(info, error)
      } catch (hookError) {
        logger.error('tollgate: onLost threw', { error: hookError })
      }
      return false
    }
    logger.warn('tollgate: lease lost while the request was in flight', { name: info.name, key: info.key })
    return onLost === 'abort'
  }

  /** Headers for an admitted or passed request (none with `headers: false` or without permits). */
  policyHeaders(name: string, permits: number | undefined, left: number): Record<string, string> {
    return this.config.headers ? policyHeaders(name, permits, left) : {}
  }

  /** Status, headers and JSON body of a rejection. */
  rejectionResponse(rejection: Rejection): HttpAnswer {
    return rejectionResponse(this.config.name, rejection, this.config.headers)
  }
}
