// Admission in OpenTelemetry: a span per admission decision, and the metrics of ASP.NET Core's rate
// limiting conventions under tollgate.* names, through @opentelemetry/api (an optional peer, loaded
// once when this module loads; the providers the application registers are global to every copy of
// the API). Nothing is made while no tracer provider, or no meter provider, is registered: each call
// then costs a check of the registered provider. A telemetry failure (a throwing SDK) never reaches a
// request: it is reported once, and that admission's telemetry stops. docs/api.md, "OpenTelemetry".
import type {
  Attributes,
  Counter,
  Histogram,
  Meter,
  MeterProvider,
  Tracer,
  TracerProvider,
  UpDownCounter,
} from '@opentelemetry/api'
import type * as OtelApi from '@opentelemetry/api'
import { keyDigest } from '../core/events.js'

/** What a request's admission came to, as spans and metrics say it (`tollgate.result`): a rejection's
 * reason, `failed_open` and `dry_run` (passed without a permit), or `canceled` (the client left while
 * it waited). */
export type AdmissionResult =
  | 'admitted'
  | 'busy'
  | 'timeout'
  | 'queue_full'
  | 'store_unavailable'
  | 'shed'
  | 'failed_open'
  | 'dry_run'
  | 'canceled'

const SCOPE = 'tollgate'
/** Seconds: the time a request waits, and holds its permit, is ms to minutes. */
const SECONDS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300]

let api: typeof OtelApi | undefined
/** Settles once @opentelemetry/api is loaded, or known not installed. */
export const telemetryLoaded: Promise<void> = import('@opentelemetry/api').then(
  (loaded) => {
    api = loaded
  },
  () => undefined,
)

/** The tracer of the registered tracer provider; undefined while none is registered. */
let tracerOf: { provider: TracerProvider | undefined; tracer: Tracer | undefined } = {
  provider: undefined,
  tracer: undefined,
}
let noopTracerProvider: TracerProvider | undefined

/** @opentelemetry/api once loaded (telemetryLoaded), and the tracer of the registered tracer
 * provider; undefined while the API is not installed or no provider is registered. */
export function registeredTracer(): { otel: typeof OtelApi; tracer: Tracer } | undefined {
  const otel = api
  const found = otel && tracer(otel)
  return found ? { otel, tracer: found } : undefined
}

function tracer(otel: typeof OtelApi): Tracer | undefined {
  const provider = (otel.trace.getTracerProvider() as OtelApi.ProxyTracerProvider).getDelegate()
  if (provider === tracerOf.provider) return tracerOf.tracer
  noopTracerProvider ??= new otel.ProxyTracerProvider().getDelegate()
  const registered = provider !== noopTracerProvider
  tracerOf = { provider, tracer: registered ? provider.getTracer(SCOPE) : undefined }
  return tracerOf.tracer
}

interface Instruments {
  requests: Counter
  timeInQueue: Histogram
  queued: UpDownCounter
  active: UpDownCounter
  leaseDuration: Histogram
}

/** The instruments of the registered meter provider; undefined while none is registered. */
let metersOf: { provider: MeterProvider | undefined; instruments: Instruments | undefined } = {
  provider: undefined,
  instruments: undefined,
}

function instruments(otel: typeof OtelApi): Instruments | undefined {
  const provider = otel.metrics.getMeterProvider()
  if (provider === metersOf.provider) return metersOf.instruments
  const meter = provider.getMeter(SCOPE)
  const registered = !(meter instanceof (otel.createNoopMeter() as object).constructor)
  metersOf = { provider, instruments: registered ? made(meter) : undefined }
  return metersOf.instruments
}

function made(meter: Meter): Instruments {
  const requests = { unit: '{request}' }
  const seconds = { unit: 's', advice: { explicitBucketBoundaries: SECONDS } }
  return {
    requests: meter.createCounter('tollgate.requests', {
      ...requests,
      description: 'Requests that tried to take a permit, by result.',
    }),
    timeInQueue: meter.createHistogram('tollgate.request.time_in_queue', {
      ...seconds,
      description: 'How long a request waited for its permit (or for its rejection).',
    }),
    queued: meter.createUpDownCounter('tollgate.queued_requests', {
      ...requests,
      description: "Requests of this process waiting in a bucket's queue.",
    }),
    active: meter.createUpDownCounter('tollgate.active_request_leases', {
      ...requests,
      description: 'Requests of this process holding a permit.',
    }),
    leaseDuration: meter.createHistogram('tollgate.request_lease.duration', {
      ...seconds,
      description: 'How long a request held its permit.',
    }),
  }
}

/** One admission's (one policy's) spans and metrics. */
export class AdmissionTelemetry {
  private readonly policy: Attributes
  /** Admitted requests counted in tollgate.active_request_leases: the instruments that counted them
   * (a -1 goes where its +1 went), and since when (ms). */
  private readonly holding = new WeakMap<object, { meters: Instruments; since: number }>()
  /** Waits counted in tollgate.queued_requests, and the instruments that counted them. */
  private readonly waiting = new WeakMap<object, Instruments>()
  /** Set by the first failure: nothing more is made. */
  private failed = false

  constructor(policy: string) {
    this.policy = { 'tollgate.policy': policy }
  }

  /** A decision on a request of bucket `key` (request data when `keyed`: carried as a digest) that
   * arrived at `started` (ms; undefined: it did not wait). `request` is what released() is given for
   * an admitted one. */
  decided(
    result: AdmissionResult,
    key: string,
    keyed: boolean,
    started: number | undefined,
    request?: { fencingToken: number | undefined; permits: number | undefined },
  ): void {
    const otel = api
    if (!otel || this.failed) return
    try {
      const meters = instruments(otel)
      const spans = tracer(otel)
      if (!meters && !spans) return
      const now = Date.now()
      const waited = started === undefined ? 0 : Math.max(0, now - started) / 1000
      if (meters) {
        const attributes = { ...this.policy, 'tollgate.result': result }
        meters.requests.add(1, attributes)
        meters.timeInQueue.record(waited, attributes)
        if (result === 'admitted' && request) {
          meters.active.add(1, this.policy)
          this.holding.set(request, { meters, since: now })
        }
      }
      if (spans) {
        const attributes: Attributes = {
          ...this.policy,
          'tollgate.bucket': keyed ? keyDigest(key) : key,
          'tollgate.result': result,
          'tollgate.wait': waited,
        }
        if (request?.fencingToken !== undefined) attributes['tollgate.fencing_token'] = request.fencingToken
        if (request?.permits !== undefined) attributes['tollgate.permits'] = request.permits
        const span = spans.startSpan(
          'tollgate admission',
          { startTime: Math.min(started ?? now, now), attributes },
          otel.context.active(),
        )
        if (result === 'store_unavailable') span.setStatus({ code: otel.SpanStatusCode.ERROR })
        span.end(now)
      }
    } catch (error) {
      this.fail(error)
    }
  }

  /** An admitted request (decided() `request`) gave its permit back. */
  released(request: object): void {
    const held = this.holding.get(request)
    if (!held) return
    this.holding.delete(request)
    try {
      held.meters.active.add(-1, this.policy)
      held.meters.leaseDuration.record(Math.max(0, Date.now() - held.since) / 1000, this.policy)
    } catch (error) {
      this.fail(error)
    }
  }

  /** `waiter` (a request's place) took a place in a bucket's queue. */
  enteredQueue(waiter: object): void {
    const meters = api && !this.failed ? this.safely(() => instruments(api as typeof OtelApi)) : undefined
    if (!meters) return
    this.waiting.set(waiter, meters)
    this.safely(() => meters.queued.add(1, this.policy))
  }

  /** `waiter` left the place enteredQueue() counted (once). */
  leftQueue(waiter: object): void {
    const meters = this.waiting.get(waiter)
    if (!meters) return
    this.waiting.delete(waiter)
    this.safely(() => meters.queued.add(-1, this.policy))
  }

  private safely<T>(run: () => T): T | undefined {
    try {
      return run()
    } catch (error) {
      this.fail(error)
      return undefined
    }
  }

  private fail(error: unknown): void {
    if (this.failed) return
    this.failed = true
    process.emitWarning(
      `tollgate: OpenTelemetry failed for policy "${String(this.policy['tollgate.policy'])}", which reports no more spans or metrics: ${error instanceof Error ? error.message : String(error)}`,
      { code: 'TOLLGATE_TELEMETRY_FAILED' },
    )
  }
}
