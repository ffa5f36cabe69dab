// The framework-free engine both the middleware and the gateway stand on: find a request's bucket,
// take a permit at once or wait in the fair queue (bounded by maxWaitMs and maxQueue), and turn every
// failure into a rejection or a fail-open pass. Adapters only move headers and bodies.
import { type AbortSignalLike, abortReason } from '../core/abort.js'
import { type Lease, PermitLease } from '../core/client/lease.js'
import { AcquireTimeoutError, ShedError } from '../core/errors.js'
import { MAX_PRIORITY } from '../core/fair.js'
import type { Semaphore } from '../primitives/semaphore.js'
import type { ReadWriteLock } from '../primitives/rwlock.js'
import type { Store } from '../core/protocol/store.js'
import type { RejectReason, Rejection, ResolvedConfig, TollgateInfo } from './options.js'

export type { OnLost, RejectReason, Rejection, TollgateInfo } from './options.js'
import { type HttpAnswer, policyHeaders } from './response.js'
import { callOnLost, callOnRejected, callSkip, rejectionAnswer } from './hooks.js'
import {
  type AdmissionCounters,
  attachMetrics,
  attachOverloadMetrics,
  OverloadCounters,
  zeroCounters,
} from './metrics.js'
import { HistogramSeries, WAIT_BUCKETS } from './histogram.js'
import { type StoreHealth, storeHealth } from './store-health.js'
import { type LocalHold, OutageShare, RESERVE_WAIT_MS } from './outage.js'
import { KeptPermits } from './keep-alive.js'
import { FairPlace, LocalQueues, Moving, QueuePlace } from './queue-places.js'
import { AdmissionTelemetry } from './telemetry.js'
import { BucketArrivals } from './arrivals.js'
import type { AdmitResult, Bucket, FairRequest, Gate } from './bucket.js'
import type { AdaptiveLimit, Outcome } from '../primitives/adaptive/limit.js'
import { type AdaptiveControl, type SampleTiming, sampleAbandoned, sampleMeasured } from './samples.js'

export type { AdaptiveControl, SampleTiming } from './samples.js'

/**
 * Framework-free admission: find the bucket's gate, take a permit at once or wait for it (bounded by
 * maxWaitMs and maxQueue), and turn every failure into a rejection or a fail-open pass. The adapters
 * only move headers and bodies.
 */
export class Admission<Req> {
  readonly counters: AdmissionCounters = zeroCounters()
  /** Per class and per flow counts, when the buckets are fair queues (overloaded()). */
  overload: OverloadCounters | undefined = undefined
  /** Whether the store is known down (shared by every admission on the store). */
  readonly health: StoreHealth
  /** Spans and metrics in OpenTelemetry, when the application registered providers (telemetry.ts). */
  private readonly telemetry: AdmissionTelemetry
  /** `outage: 'share'`: this process's share of each bucket while the store is down (outage.ts). */
  readonly outage: OutageShare | undefined
  /** `outage: 'share'`: a bucket's gate in `store` (the outage's memory store) with `permits`. */
  localGate: ((store: Store, key: string, permits: number) => Gate) | undefined = undefined
  /** `outage: 'share'`: the local gates of this outage (OutageShare.generation), per bucket. */
  private readonly localGates = new Map<string, Gate>()
  private localGeneration = -1
  /** This process's waiters per bucket, counted against maxQueue, by class in a fair bucket. */
  readonly queues: LocalQueues
  /** Requests per bucket, for the dashboard's busiest buckets (keyed admissions, once it asks). */
  readonly arrivals: BucketArrivals
  /** The semaphore of a bucket (for a semaphore admission): what an admin API reads and sets. */
  semaphoreOf: ((key: string) => Semaphore) | undefined = undefined
  /** The read/write lock of a resource (for a read/write lock admission): what the dashboard reads. */
  lockOf: ((key: string) => ReadWriteLock) | undefined = undefined
  /** Leases kept for the next request of their bucket (permit keep-alive, keep-alive.ts); undefined
   * when it is off. */
  readonly kept: KeptPermits | undefined
  /** Seconds each admitted request waited for its permit (the `metrics` option's
   * tollgate_policy_wait_seconds); undefined without metrics. */
  readonly waits: HistogramSeries | undefined

  private arrived(bucket: Bucket): void {
    if (bucket.keyed && (this.semaphoreOf || this.lockOf)) this.arrivals.arrived(bucket.key)
  }

  /** The bucket's adaptive limit (primitives/adaptive/limit.ts), if it has one: it sees every
   * admitted request. */
  adaptive: AdaptiveLimit | undefined = undefined

  /** What an adapter shows of the adaptive limit (the `adaptive` option): its status, and a way to
   * stop it (at shutdown). Undefined without the option. */
  get adaptiveControl(): AdaptiveControl | undefined {
    const adaptive = this.adaptive
    return adaptive && { status: () => adaptive.status(), close: () => adaptive.close() }
  }

  constructor(
    readonly config: ResolvedConfig<Req>,
    /** The gate and bucket of a request. */
    private readonly gateFor: (req: Req) => Bucket,
    /** A lease taken from a gate at once without a promise, when its store can (the memory store);
     * undefined when it cannot or no permit is free right now. */
    private readonly acquireNow?: (gate: Gate, weight: number, fair?: FairRequest) => Lease | undefined,
    /** Permit keep-alive: how long a lease the store granted may serve this process's requests of
     * its bucket (keep-alive.ts); 0 = off, every request takes and gives back its own permit. */
    keepAliveMs = 0,
  ) {
    this.queues = new LocalQueues(
      config.maxQueue,
      (key, waiter) => {
        this.counters.queued++
        this.telemetry.enteredQueue(waiter)
        // A request of ours waits in the store's queue: leases kept for the bucket go back to it now.
        this.kept?.flush(key)
      },
      (waiter) => {
        this.counters.queued--
        this.telemetry.leftQueue(waiter)
      },
      () => this.overload,
    )
    this.arrivals = new BucketArrivals(this.queues.waiting)
    this.health = storeHealth(config.store)
    this.telemetry = new AdmissionTelemetry(config.name)
    this.outage =
      config.outage === 'share'
        ? new OutageShare(
            config.store,
            config.name,
            this.health,
            config.outageShare,
            config.logger,
            (key, weight, signal) =>
              (this.semaphoreOf as (key: string) => Semaphore)(key).acquire({
                signal,
                timeoutMs: RESERVE_WAIT_MS,
                ...(weight === 1 ? {} : { weight }),
                // Ahead of every request sent once the process admits through the store again.
                ...(this.overload ? { priority: MAX_PRIORITY } : {}),
              }),
            () => this.counters.queued > 0,
          )
        : undefined
    this.kept = keepAliveMs > 0 ? new KeptPermits(keepAliveMs, (lease) => this.giveBack(lease)) : undefined
    this.waits = config.metrics ? new HistogramSeries(WAIT_BUCKETS) : undefined
    if (config.metrics) attachMetrics(this, config.metrics.registry)
  }

  /** The buckets are fair queues (a semaphore with `priority`, `flow` or `overload`): count per class
   * and per flow from now on, flows labelled by name only when `named` (the config's). */
  overloaded(named: ReadonlySet<string>): void {
    this.overload = new OverloadCounters(named)
    if (this.config.metrics) attachOverloadMetrics(this, this.config.metrics.registry)
  }

  /** The bucket of a request: pass it to admitNow() and then, if that could not answer, to admit(). */
  bucketOf(req: Req): Bucket {
    return this.gateFor(req)
  }

  /**
   * The synchronous path: a permit taken at once from a store that answers synchronously (the memory
   * store) while one is free and nobody waits. Undefined when that cannot be: admit() then decides
   * (waits, rejects, or fails open) exactly as it always does.
   */
  admitNow(bucket: Bucket): AdmitResult | undefined {
    if (this.health.down || this.outage?.local) return undefined
    // Kept leases are of weight 1 (the gateway's permit keep-alive; see release()).
    // (Counted as an arrival only when it answers: otherwise admit() follows and counts it.)
    const kept = bucket.weight === 1 ? this.kept?.take(bucket.key) : undefined
    if (kept) {
      this.arrived(bucket)
      return this.admitted(bucket, kept, undefined, false)
    }
    if (!this.acquireNow) return undefined
    const lease = this.acquireNow(bucket.gate, bucket.weight, bucket.fair)
    if (!lease) return undefined
    this.arrived(bucket)
    return this.admitted(bucket, lease, undefined)
  }

  async admit(req: Req, signal: AbortSignalLike, bucket: Bucket = this.gateFor(req)): Promise<AdmitResult> {
    const started = Date.now()
    this.arrived(bucket)
    return this.admitFrom(bucket, signal, started)
  }

  /** admit() of a request that arrived at `started`. */
  private async admitFrom(bucket: Bucket, signal: AbortSignalLike, started: number): Promise<AdmitResult> {
    if (this.outage?.local) return this.admitLocal(bucket, signal, started)
    // The store is known down: answer now, without waiting for another timeout (G14).
    if (this.health.down) {
      this.health.failedFast++
      return this.storeFailed(bucket, started)
    }
    const kept = bucket.weight === 1 ? this.kept?.take(bucket.key) : undefined
    if (kept) return this.admitted(bucket, kept, started, false)
    if (bucket.fair) return this.admitFair(bucket, bucket.fair, signal, started)
    const { gate } = bucket
    let lease: Lease | undefined
    // Counted only once the store put the request in its queue (onQueued): a request whose call is
    // merely on its way is not waiting for anything.
    const place = this.config.maxWaitMs === 0 ? undefined : new QueuePlace(this.queues, bucket.key)
    // outage: 'share': a wait in the store's queue moves here when the store goes down.
    const moving = place && this.outage ? new Moving(signal, this.outage) : undefined
    try {
      if (!place) {
        lease = await gate.tryAcquire(bucket.weight === 1 ? undefined : { weight: bucket.weight })
        if (!lease) return this.reject(bucket, 'busy', started) // it was not to wait
      } else {
        try {
          const options = {
            signal: moving?.signal ?? signal,
            timeoutMs: this.config.maxWaitMs,
            onQueued: place.onQueued,
          }
          // (A weight only where there is one: a read/write lock's gate takes none.)
          lease = await gate.acquire(bucket.weight === 1 ? options : { ...options, weight: bucket.weight })
        } finally {
          place.leave()
          moving?.done()
        }
      }
    } catch (error) {
      if (place?.full) return this.reject(bucket, 'queue_full', started)
      if (error instanceof AcquireTimeoutError) return this.reject(bucket, 'timeout', started)
      if (signal.aborted) return this.canceled(bucket, started, error) // the client left: nothing to answer
      if (!moving?.moved) this.health.failed(error, this.config.logger)
      // (Known down now, or moved by the outage: admitted in memory. Any other failure: as always.)
      if (this.outage?.local) return this.admitLocal(bucket, signal, started)
      return this.storeFailed(bucket, started)
    }
    return this.admitted(bucket, lease, started)
  }

  /** admit() in a fair queue: the class's wait, the class-aware local queue, and `shed`. */
  private async admitFair(
    bucket: Bucket,
    fair: FairRequest,
    signal: AbortSignalLike,
    started: number,
  ): Promise<AdmitResult> {
    const wait = this.config.maxWaitByClass?.[fair.priority] ?? this.config.maxWaitMs
    const { gate } = bucket
    const request = { weight: bucket.weight, priority: fair.priority, flow: fair.flow }
    let lease: Lease | undefined
    const place = wait === 0 ? undefined : new FairPlace(this.queues, bucket.key, fair.priority, signal)
    const moving = place && this.outage ? new Moving(place.signal, this.outage) : undefined
    try {
      if (!place) {
        lease = await gate.tryAcquire(request)
        if (!lease) return this.reject(bucket, 'busy', started, wait)
      } else {
        try {
          lease = await gate.acquire({
            signal: moving?.signal ?? place.signal,
            timeoutMs: wait,
            onQueued: place.onQueued,
            ...request,
          })
        } finally {
          place.leave()
          moving?.done()
        }
      }
    } catch (error) {
      if (place?.full) return this.reject(bucket, 'queue_full', started, wait)
      if (place?.evicted) return this.reject(bucket, 'shed', started, wait)
      // The fleet's bound (overload.maxQueued): evicted for a higher class, or refused at arrival.
      if (error instanceof ShedError)
        return this.reject(bucket, error.reason === 'evicted' ? 'shed' : 'queue_full', started, wait)
      if (error instanceof AcquireTimeoutError) return this.reject(bucket, 'timeout', started, wait)
      if (signal.aborted) return this.canceled(bucket, started, error) // the client left: nothing to answer
      if (!moving?.moved) this.health.failed(error, this.config.logger)
      // (Known down now, or moved by the outage: admitted in memory. Any other failure: as always.)
      if (this.outage?.local) return this.admitLocal(bucket, signal, started)
      return this.storeFailed(bucket, started)
    }
    return this.admitted(bucket, lease, started)
  }

  /** outage: 'share': admit in memory, within this process's share of the bucket's limit, with the
   * bucket's own waiting rules and what is left of the request's wait (outage.ts). */
  private async admitLocal(bucket: Bucket, signal: AbortSignalLike, started: number): Promise<AdmitResult> {
    const outage = this.outage as OutageShare
    if (this.localGeneration !== outage.generation) {
      this.localGates.clear()
      this.localGeneration = outage.generation
    }
    let gate = this.localGates.get(bucket.key)
    if (!gate) {
      outage.sharing()
      const share = outage.share(bucket.gate.permits ?? 1)
      gate = (this.localGate as NonNullable<typeof this.localGate>)(outage.store, bucket.key, share)
      this.localGates.set(bucket.key, gate)
    }
    const fair = bucket.fair
    const wait = (fair && this.config.maxWaitByClass?.[fair.priority]) ?? this.config.maxWaitMs
    const left = Math.max(0, wait - (Date.now() - started))
    const request = {
      weight: Math.min(bucket.weight, gate.permits ?? 1),
      ...(fair ? { priority: fair.priority, flow: fair.flow } : {}),
    }
    const local = { ...bucket, gate }
    let lease: Lease | undefined
    const place = left === 0 ? undefined : new QueuePlace(this.queues, bucket.key)
    // A wait here moves back to the store when this process admits through it again.
    const back = place ? new Moving(signal, outage, outage.waitingHere) : undefined
    try {
      if (!place) {
        lease = await gate.tryAcquire(request)
        if (!lease) return this.reject(local, 'busy', started, wait)
      } else {
        try {
          lease = await gate.acquire({
            signal: back?.signal ?? signal,
            timeoutMs: left,
            onQueued: place.onQueued,
            ...request,
          })
        } finally {
          place.leave()
          back?.done()
        }
      }
    } catch (error) {
      if (place?.full) return this.reject(local, 'queue_full', started, wait)
      if (error instanceof AcquireTimeoutError) return this.reject(local, 'timeout', started, wait)
      if (signal.aborted) return this.canceled(local, started, error)
      if (back?.moved) return this.admitFrom(bucket, signal, started)
      return this.reject(local, 'store_unavailable', started, wait)
    }
    let reserve: Lease | undefined
    if (outage.inGrace) {
      // Counted in the store before it runs (outage.ts, "Leaving").
      reserve = await outage.reserveFirst(bucket.key, request.weight, signal, wait - (Date.now() - started))
      if (!reserve) {
        void this.giveBack(lease)
        if (signal.aborted) throw abortReason(signal)
        return this.reject(local, 'timeout', started, wait)
      }
    }
    const hold = outage.admitted(bucket.key, request.weight, reserve)
    const result = this.admitted(local, lease, started, false)
    if (result.outcome === 'admitted') result.info.local = hold
    return result
  }

  /** `started` undefined: admitted at once, without waiting. `fresh`: the store just granted the
   * lease (false: a kept one, see keep-alive.ts). */
  private admitted(bucket: Bucket, lease: Lease, started: number | undefined, fresh = true): AdmitResult {
    if (fresh && bucket.weight === 1) this.kept?.grant(bucket.key, lease)
    this.counters.admitted++
    this.counters.inFlight++
    if (bucket.keyed) this.arrivals.admitted(bucket.key)
    const waited = started === undefined ? 0 : (Date.now() - started) / 1000
    this.waits?.observe(waited)
    if (bucket.fair) this.overload?.admit(bucket.fair, waited)
    const permits = bucket.gate.permits
    // Permits left right after this admission (unknown holders: a hand-over from a full queue, so 0).
    const left = permits === undefined ? 0 : permits - (lease.holders ?? permits)
    const info = this.info(bucket, lease, started)
    if (this.adaptive) info.admittedAt = this.adaptive.admitted()
    this.telemetry.decided('admitted', bucket.key, bucket.keyed, started, info)
    return { outcome: 'admitted', info, left: Math.max(0, left) }
  }

  /** (Methods, not closures per call: admit() runs once per request on the gateway's hot path.) */
  private info(bucket: Bucket, lease: Lease | undefined, started: number | undefined): TollgateInfo {
    return {
      name: this.config.name,
      key: bucket.key,
      permits: bucket.gate.permits,
      // With keep-alive a lease serves several requests, so its fence would not be theirs alone.
      fencingToken: this.kept ? undefined : lease?.fencingToken,
      lease,
      waitedMs: started === undefined ? 0 : Date.now() - started,
      weight: bucket.weight,
    }
  }

  /** `waitMs`: the request's class's maxWaitMs (the Retry-After). */
  private reject(
    bucket: Bucket,
    reason: RejectReason,
    started: number,
    waitMs = this.config.maxWaitMs,
  ): AdmitResult {
    if (this.config.dryRun && reason !== 'store_unavailable') {
      this.counters.dryRunRejected++
      this.telemetry.decided('dry_run', bucket.key, bucket.keyed, started)
      return { outcome: 'passed', info: this.info(bucket, undefined, started), left: 0 }
    }
    this.counters.rejected[reason]++
    if (bucket.fair) this.overload?.reject(bucket.fair, reason)
    this.telemetry.decided(reason, bucket.key, bucket.keyed, started)
    const status =
      reason === 'store_unavailable' ? 503 : (this.config.statusCode ?? (bucket.keyed ? 429 : 503))
    const retryAfterS = Math.max(1, Math.ceil(waitMs / 1000))
    return {
      outcome: 'rejected',
      rejection: { reason, status, retryAfterS, key: bucket.key, permits: bucket.gate.permits },
    }
  }

  /** The client left while its request waited: nothing to answer (rethrows `error`). */
  private canceled(bucket: Bucket, started: number, error: unknown): never {
    this.telemetry.decided('canceled', bucket.key, bucket.keyed, started)
    throw error
  }

  private storeFailed(bucket: Bucket, started: number): AdmitResult {
    this.counters.storeErrors++
    if (this.config.failOpen || this.config.dryRun) {
      this.counters.failedOpen++
      this.telemetry.decided('failed_open', bucket.key, bucket.keyed, started)
      return { outcome: 'passed', info: this.info(bucket, undefined, started), left: 0 }
    }
    return this.reject(bucket, 'store_unavailable', started)
  }

  /** Under an adaptive limit: the request's response ended where the limit measures it (samples.ts). */
  measured(info: TollgateInfo, outcome: Outcome | undefined, timing?: SampleTiming): void {
    sampleMeasured(this.adaptive, info, outcome, timing)
  }

  /** Under an adaptive limit: the client left before its response ended (samples.ts). */
  abandoned(info: TollgateInfo, timing?: SampleTiming): void {
    sampleAbandoned(this.adaptive, info, timing)
  }

  /** Call once per admitted request when its response is done (finish or abort): its permit goes
   * back. `outcome` (its status, or a timeout; undefined when it did not end with a response, e.g.
   * the client left) is an adaptive limit's sample unless measured() took one. Never throws; the
   * promise (never rejected) settles when the store has the permit back. */
  release(info: TollgateInfo, outcome?: Outcome): Promise<void> | undefined {
    const lease = info.lease
    if (!lease) return undefined
    this.counters.inFlight--
    this.telemetry.released(info)
    this.arrivals.released(info.key)
    if (info.admittedAt !== undefined) {
      this.measured(info, outcome)
      this.adaptive?.released()
    }
    if (info.local) {
      // Admitted in memory during an outage: never kept, and its reserve in the store goes too.
      this.outage?.released(info.local as LocalHold)
      return this.giveBack(lease)
    }
    if (info.weight === 1 && this.kept?.keep(info.key, lease, this.queues.waiting.has(info.key)))
      return undefined
    return this.giveBack(lease)
  }

  /** Give every kept lease back and keep none from now on (permit keep-alive); call at shutdown, or
   * when a reload replaces this admission. Requests in flight still release as usual. */
  close(): Promise<void> {
    this.adaptive?.close()
    this.outage?.close()
    return this.kept?.close() ?? Promise.resolve()
  }

  /** Give a lease back to the store. Never throws; the promise (never rejected) settles when the
   * store has the permit back. */
  private giveBack(lease: Lease): Promise<void> | undefined {
    // Given back synchronously where the store can (memory): nothing to wait for.
    if (lease instanceof PermitLease && lease.releaseNow()) return undefined
    return lease.release().catch((error: unknown) => {
      // The lease expires on its own; nothing is stuck.
      this.config.logger.warn('tollgate: release failed', { name: this.config.name, error })
    })
  }

  /** Call the onRejected hook (hooks.ts: a throwing one is logged). */
  notifyRejected(req: Req, rejection: Rejection, res?: unknown): void {
    callOnRejected(this.config, req, rejection, res)
  }

  /** Count and report a lost lease (hooks.ts); returns true when the request should be aborted. */
  lost(info: TollgateInfo, error: Error): boolean {
    this.counters.lost++
    return callOnLost(this.config, info, error)
  }

  /** Status, headers and body of a rejection (hooks.ts: the `message` option's, if given). */
  rejectionResponse(rejection: Rejection, req?: Req): HttpAnswer {
    return rejectionAnswer(this.config, rejection, req)
  }

  /** The `skip` option's answer: true = take no permit (hooks.ts: a throwing one is logged). */
  skips(req: Req): Promise<boolean> {
    return callSkip(this.config, req)
  }

  /** Headers for an admitted or passed request (none with `standardHeaders: false` or without permits). */
  policyHeaders(name: string, permits: number | undefined, left: number): Record<string, string> {
    return policyHeaders(name, permits, left, this.config.standardHeaders)
  }
}
