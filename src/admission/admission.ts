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
import { type HttpAnswer, policyHeaders, rejectionResponse } from './response.js'
import { attachMetrics, attachOverloadMetrics, OverloadCounters } from './metrics.js'
import { HistogramSeries, WAIT_BUCKETS } from './histogram.js'
import { type StoreHealth, storeHealth } from './store-health.js'
import { type LocalHold, OutageShare, RESERVE_WAIT_MS } from './outage.js'
import { KeptPermits } from './keep-alive.js'
import { ClassQueue, FairPlace, Moving, QueuePlace } from './queue-places.js'
import { AdmissionTelemetry } from './telemetry.js'
import type { AdaptiveLimit, AdaptiveStatus, Outcome } from '../primitives/adaptive/limit.js'

/** The adaptive limit of a middleware made with the `adaptive` option. */
export interface AdaptiveControl {
  /** The limit, its estimate, the baseline and latest latency, the gradient, the leadership. */
  status(): AdaptiveStatus
  /** Stop reporting and stepping (the fleet's other processes go on). */
  close(): void
}

/** What of a request's time was its client's, and who the client is (an adaptive limit's sample). */
export interface SampleTiming {
  /** When its body's last byte came (performance.now()), if it had one: the upstream (or the
   * handler) could not answer before, so the sample starts here when that is after admission. */
  bodyEndedAt?: number | undefined
  /** Its body had not all come when the sample was taken. */
  bodyPending?: boolean | undefined
  /** How long the client held the response back (took no more bytes), ms: left out of the sample. */
  heldMs?: number | undefined
  /** The client's address (the drop decision is the median client's: adaptive/clients.ts). */
  client?: string | undefined
}

/** Buckets whose requests a keyed admission counts for the dashboard at once. */
const MAX_TRACKED_KEYS = 1000

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
    /** Permits the request counts for (a semaphore's; a read/write lock ignores it). */
    weight?: number
    /** A fair queue's class and flow (a semaphore with `overload`; Bucket.fair). */
    priority?: number
    flow?: string | undefined
  }): Promise<Lease>
  tryAcquire(options?: {
    weight?: number
    priority?: number
    flow?: string | undefined
  }): Promise<Lease | undefined>
}

/**
 * Framework-free admission: find the bucket's gate, take a permit at once or wait for it (bounded by
 * maxWaitMs and maxQueue), and turn every failure into a rejection or a fail-open pass. The adapters
 * only move headers and bodies.
 */
export class Admission<Req> {
  readonly counters: AdmissionCounters = {
    admitted: 0,
    rejected: { busy: 0, queue_full: 0, timeout: 0, store_unavailable: 0, shed: 0 },
    failedOpen: 0,
    dryRunRejected: 0,
    lost: 0,
    storeErrors: 0,
    inFlight: 0,
    queued: 0,
  }
  /** Requests of each bucket waiting in the store's queue (not those whose call is on its way). */
  private readonly waiting = new Map<string, number>()
  /** This process's waiters of each fair bucket by class, for the class-aware `maxQueue`. */
  private readonly classQueues = new Map<string, ClassQueue>()
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
  /** Requests per bucket of a keyed admission since takeArrivals() last asked (the dashboard's busiest
   * buckets), at most MAX_TRACKED_KEYS buckets: one Map update per request. */
  private arrivals = new Map<string, number>()
  /** Requests in flight per bucket of a keyed admission, while arrivals are tracked. */
  private readonly holding = new Map<string, number>()
  /** Arrivals are tracked once something asked for them (the dashboard): the library's middleware,
   * which nobody asks, counts nothing per bucket. */
  private tracking = false

  /** Count arrivals and what is present per bucket from now on (the gateway, with its dashboard). */
  trackBuckets(): void {
    this.tracking = true
  }

  /** Requests per bucket since the last call (admitted, waiting or refused); starts counting anew. */
  takeArrivals(): Map<string, number> {
    this.tracking = true
    const taken = this.arrivals
    this.arrivals = new Map()
    return taken
  }

  /** Requests of this process in flight or waiting, per bucket (of keyed admissions, once tracked). */
  present(): Map<string, number> {
    const present = new Map(this.holding)
    for (const [bucket, count] of this.waiting) present.set(bucket, (present.get(bucket) ?? 0) + count)
    return present
  }

  private arrived(bucket: Bucket): void {
    if (!this.tracking || !bucket.keyed || (!this.semaphoreOf && !this.lockOf)) return
    const seen = this.arrivals.get(bucket.key)
    if (seen !== undefined) this.arrivals.set(bucket.key, seen + 1)
    else if (this.arrivals.size < MAX_TRACKED_KEYS) this.arrivals.set(bucket.key, 1)
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
    const place = this.config.maxWaitMs === 0 ? undefined : new QueuePlace(this, bucket.key)
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
    const place = wait === 0 ? undefined : new FairPlace(this, bucket.key, fair.priority, signal)
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
    const place = left === 0 ? undefined : new QueuePlace(this, bucket.key)
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
    if (this.tracking && bucket.keyed) countUp(this.holding, bucket.key)
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

  /** Take a place in a bucket's queue (false: the queue is full); see QueuePlace. */
  enterQueue(key: string, waiter: object): boolean {
    const waiting = this.waiting.get(key) ?? 0
    if (waiting >= this.config.maxQueue) return false
    this.waiting.set(key, waiting + 1)
    this.counters.queued++
    this.telemetry.enteredQueue(waiter)
    // A request of ours waits in the store's queue: leases kept for the bucket go back to it now.
    this.kept?.flush(key)
    return true
  }

  leaveQueue(key: string, waiter: object): void {
    this.counters.queued--
    this.telemetry.leftQueue(waiter)
    countDown(this.waiting, key)
  }

  /** Take a place in a fair bucket's queue. When it is full, an arrival of a strictly higher class
   * than this process's lowest waiter there takes the place of the newest such waiter, which is shed
   * (aborted once, rejected `shed`); otherwise false, as enterQueue(). */
  enterFairQueue(place: FairPlace): boolean {
    const { key } = place
    let queue = this.classQueues.get(key)
    if ((this.waiting.get(key) ?? 0) >= this.config.maxQueue) {
      const victim = queue?.newestBelow(place.priority)
      if (!victim) return false
      victim.evict(new ShedError(key, 'evicted'))
      queue = this.classQueues.get(key)
    }
    if (!this.enterQueue(key, place)) return false
    if (!queue) this.classQueues.set(key, (queue = new ClassQueue()))
    queue.push(place)
    this.overload?.waiting(place.priority, 1)
    return true
  }

  /** Give back a place enterFairQueue() gave (once). */
  leaveFairQueue(place: FairPlace): void {
    const queue = this.classQueues.get(place.key)
    if (queue) {
      queue.remove(place)
      if (queue.size === 0) this.classQueues.delete(place.key)
    }
    this.overload?.waiting(place.priority, -1)
    this.leaveQueue(place.key, place)
  }

  /** Under an adaptive limit: the request's response ended where the limit measures it (the
   * upstream's last byte, or its failure; the handler's end()), so ended (`outcome`). Its sample is
   * taken now, once, however long the client then takes to read it (`timing`: what of its time was
   * the client's, and who the client is); its permit is held until release(). */
  measured(info: TollgateInfo, outcome: Outcome | undefined, timing?: SampleTiming): void {
    if (info.admittedAt === undefined || info.sampled) return
    info.sampled = true
    const startedAt = Math.max(info.admittedAt, timing?.bodyEndedAt ?? 0)
    this.adaptive?.sample(startedAt, outcome, timing?.heldMs, timing?.client)
  }

  /** Under an adaptive limit: the client left before the request's response ended where the limit
   * measures it. Its time so far is a lower bound of its latency (adaptive/limit.ts abandoned()),
   * unless its body had not all come yet (then the upstream may have been waiting for it: nothing is
   * known). Once, as measured(). */
  abandoned(info: TollgateInfo, timing?: SampleTiming): void {
    if (info.admittedAt === undefined || info.sampled) return
    info.sampled = true
    if (timing?.bodyPending) return
    this.adaptive?.abandoned(Math.max(info.admittedAt, timing?.bodyEndedAt ?? 0), timing?.heldMs)
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
    if (this.tracking) countDown(this.holding, info.key)
    if (info.admittedAt !== undefined) {
      this.measured(info, outcome)
      this.adaptive?.released()
    }
    if (info.local) {
      // Admitted in memory during an outage: never kept, and its reserve in the store goes too.
      this.outage?.released(info.local as LocalHold)
      return this.giveBack(lease)
    }
    if (info.weight === 1 && this.kept?.keep(info.key, lease, this.waiting.has(info.key))) return undefined
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

  /** Call the onRejected hook; a throwing hook is logged, never allowed to crash the process. */
  notifyRejected(req: Req, rejection: Rejection, res?: unknown): void {
    try {
      const hook = this.config.onRejected as
        ((req: Req, rejection: Rejection, res: unknown) => unknown) | undefined
      const result: unknown = hook?.(req, rejection, res)
      // An async hook that rejects is logged too, never an unhandled rejection.
      if (isThenable(result))
        result.then(undefined, (error: unknown) =>
          this.config.logger.error('tollgate: onRejected threw', { error }),
        )
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
        const result: unknown = onLost(info, error)
        if (isThenable(result))
          result.then(undefined, (hookError: unknown) =>
            logger.error('tollgate: onLost threw', { error: hookError }),
          )
      } catch (hookError) {
        logger.error('tollgate: onLost threw', { error: hookError })
      }
      return false
    }
    logger.warn('tollgate: lease lost while the request was in flight', { name: info.name, key: info.key })
    return onLost === 'abort'
  }

  /** Headers for an admitted or passed request (none with `standardHeaders: false` or without permits). */
  policyHeaders(name: string, permits: number | undefined, left: number): Record<string, string> {
    return policyHeaders(name, permits, left, this.config.standardHeaders)
  }

  /** Status, headers and body of a rejection (the `message` option's body, if given; a throwing
   * message function is logged and the default body sent). */
  rejectionResponse(rejection: Rejection, req?: Req): HttpAnswer {
    const { name, standardHeaders, message } = this.config
    if (message === undefined || req === undefined) return rejectionResponse(name, rejection, standardHeaders)
    try {
      return rejectionResponse(name, rejection, standardHeaders, { req, option: message })
    } catch (error) {
      this.config.logger.error('tollgate: message() threw; sending the default body', { error })
      return rejectionResponse(name, rejection, standardHeaders)
    }
  }

  /** The `skip` option's answer: true = take no permit. A throwing (or rejecting) skip is logged and
   * the request is admitted as usual. */
  async skips(req: Req): Promise<boolean> {
    const skip = this.config.skip
    if (!skip) return false
    try {
      return Boolean(await skip(req)) // any truthy value skips, as in express-rate-limit
    } catch (error) {
      this.config.logger.error('tollgate: skip() threw; limiting the request as usual', { error })
      return false
    }
  }
}

/** The bucket of a request: its key and gate, whether a key function chose it, and the permits the
 * request counts for in it (`weight`, 1 unless a semaphore's `weight` option says otherwise). */
export interface Bucket {
  key: string
  gate: Gate
  keyed: boolean
  weight: number
  /** Its class and flow when the bucket is a fair queue (docs/middleware.md, "Overload"); undefined otherwise. */
  fair?: FairRequest | undefined
}

/** A request's place in a fair queue: its priority class (0-7) and its flow's name (undefined: the
 * default flow). */
export interface FairRequest {
  priority: number
  flow: string | undefined
}

export function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as { then?: unknown } | null | undefined)?.then === 'function'
}

/** One more of `key` in a count per key. */
function countUp(counts: Map<string, number>, key: string): void {
  counts.set(key, (counts.get(key) ?? 0) + 1)
}

/** One fewer of `key`; a key at 0 (or never counted) is not kept. */
function countDown(counts: Map<string, number>, key: string): void {
  const left = (counts.get(key) ?? 1) - 1
  if (left > 0) counts.set(key, left)
  else counts.delete(key)
}
