// Prometheus metrics of one gateway (its own prom-client Registry, so several gateways can live in one
// process, e.g. in tests). Every series is labelled by route name, never by tenant id or address:
// label values come from the config, so the number of series is bounded by the config.
//
// What every request touches (admitted, in flight, responses, and the three duration histograms) is
// kept in plain numbers per route and read into the registry at scrape time: prom-client hashes the
// labels on every observe(), also through a bound child, and that was the largest item of the
// gateway's own cost per request in profiles (docs/gateway/internals.md, "What this work changed, and what is
// left").
import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client'
import { REJECT_REASONS } from '../../admission/options.js'
import { priorityName } from '../../core/fair.js'
import { type Observer, WAIT_BUCKETS } from '../../admission/histogram.js'
import { FairMetrics } from './fair-metrics.js'
import { PlainHistogram } from './plain-histogram.js'
import type { UpstreamErrorKind } from '../http/proxy.js'
import { CONTRACT_STEPS } from '../http/close-contract.js'
import type { AdaptiveStatus } from '../../primitives/adaptive/limit.js'

export type { Observer } from '../../admission/histogram.js'
export { type ClassCounts, FairMetrics, type FairFacts } from './fair-metrics.js'
export { PlainHistogram } from './plain-histogram.js'

export interface GatewayMetrics {
  readonly registry: Registry
  /** Requests holding a permit right now (read from the routes' series at scrape time). */
  readonly inFlight: Gauge<'route'>
  /** Requests waiting for a permit right now. */
  readonly queued: Gauge<'route'>
  /** Permits kept for the route's next requests right now (permit keep-alive). */
  readonly kept: Gauge<'route'>
  readonly admitted: Counter<'route'>
  readonly rejected: Counter<'route' | 'reason'>
  /** Requests let through without a permit because the store failed (failOpen). */
  readonly failedOpen: Counter<'route'>
  /** Seconds an admitted request waited for its permit. */
  readonly waitSeconds: PlainHistogram
  readonly leaseLost: Counter<'route'>
  readonly storeErrors: Counter<'route'>
  readonly upstreamErrors: Counter<'route' | 'kind'>
  /** Responses by route and status class (2xx, 4xx, ...), including rejections and 502/504. */
  readonly responses: Counter<'route' | 'class'>
  /** Requests the gateway answered by itself before or instead of forwarding (400, 404, 408, 413). */
  readonly refused: Counter<'reason'>
  /** Permits per bucket of each route, as configured (or as set through the admin API). */
  readonly limit: Gauge<'route'>
  /** Seconds from a request's arrival to the close of its response. */
  readonly requestSeconds: PlainHistogram
  /** Seconds from forwarding a request to the upstream's response headers. */
  readonly upstreamSeconds: PlainHistogram
  /** Seconds a Redis call of the store took, by call (permits.acquire, permits.release, ...). */
  readonly redisSeconds: PlainHistogram
  /** Breaches of the close contract (http/close-contract.ts), by step: a bug of the gateway. */
  readonly contractBreaches: Counter<'step'>
  /** Config reloads (SIGHUP, --watch-config), by result (success, failure). */
  readonly reloads: Counter<'result'>
  /** 1 if the last reload succeeded (or none was tried), 0 if it failed. */
  readonly reloadSuccessful: Gauge
  /** When the running config was loaded, in Unix seconds. */
  readonly reloadTimestamp: Gauge
  /** The per-request series of a route, bound to its label (no label lookup per request). */
  route(name: string): RouteMetrics
  /** Start the series of routes that came with a reload at 0. */
  addRoutes(routes: readonly string[]): void
}

/** The series one route's requests touch on every request: plain numbers, read at scrape time. */
export interface RouteMetrics {
  requestSeconds: Observer
  upstreamSeconds: Observer
  waitSeconds: Observer
  /** Requests admitted so far. */
  admitted: number
  /** Requests holding a permit right now. */
  inFlight: number
  /** Responses by status class, 1xx to 9xx at index 1 to 9 (index 0: anything else). */
  readonly responses: Float64Array
  /** The route's counts by priority class and flow (a route with priority or flow: created on first
   * use, so a plain route pays nothing). */
  fair(): FairMetrics
  /** Set once fair() was called. */
  fairSeries: FairMetrics | undefined
}

/** Node writes statuses 100 to 999: classes 1xx to 9xx, as `${Math.floor(status / 100)}xx`. */
const STATUS_CLASSES = ['other', '1xx', '2xx', '3xx', '4xx', '5xx', '6xx', '7xx', '8xx', '9xx']

const DURATION_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60]

/** What the metrics read of a route's outage share. */
export interface OutageFigures {
  readonly local: boolean
  readonly inFlight: number
  readonly replicas: number | undefined
}

/** `queuedOf(route)`: requests of the route waiting in the store's queue right now, `keptOf(route)`:
 * permits kept for its next requests (permit keep-alive), and `storeUp()` whether the store answers
 * (all read at scrape time). */
export function createMetrics(
  initialRoutes: readonly string[],
  options: {
    processMetrics?: boolean
    queuedOf?: (route: string) => number
    keptOf?: (route: string) => number
    storeUp?: () => Promise<boolean>
    limits?: () => Promise<{ route: string; permits: number }[]>
    /** The adaptive limit of a route, if it has one. */
    adaptiveOf?: (route: string) => AdaptiveStatus | undefined
    /** A route's outage share (outage: share), if it has one. */
    outageOf?: (route: string) => OutageFigures | undefined
  } = {},
): GatewayMetrics {
  const routes = [...initialRoutes]
  const registry = new Registry()
  if (options.processMetrics ?? true) collectDefaultMetrics({ register: registry })
  const registers = [registry]
  const metrics: GatewayMetrics = {
    registry,
    inFlight: new Gauge({
      name: 'tollgate_requests_in_flight',
      help: 'Requests holding a permit right now',
      labelNames: ['route'],
      registers,
      collect() {
        for (const [route, series] of boundRoutes) this.set({ route }, series.inFlight)
      },
    }),
    queued: new Gauge({
      name: 'tollgate_requests_queued',
      help: 'Requests waiting in the queue for a permit right now',
      labelNames: ['route'],
      registers,
      collect() {
        if (!options.queuedOf) return
        for (const route of routes) this.set({ route }, options.queuedOf(route))
      },
    }),
    kept: new Gauge({
      name: 'tollgate_permits_kept',
      help: 'Permits held in the store for the next requests of this replica, none in flight (permit keep-alive)',
      labelNames: ['route'],
      registers,
      collect() {
        if (!options.keptOf) return
        for (const route of routes) this.set({ route }, options.keptOf(route))
      },
    }),
    admitted: new Counter({
      name: 'tollgate_admitted_total',
      help: 'Requests that got a permit',
      labelNames: ['route'],
      registers,
      collect() {
        this.reset()
        for (const route of routes) this.inc({ route }, boundRoutes.get(route)?.admitted ?? 0)
      },
    }),
    rejected: new Counter({
      name: 'tollgate_rejected_total',
      help: 'Requests rejected without a permit, by reason (busy, timeout, queue_full, store_unavailable)',
      labelNames: ['route', 'reason'],
      registers,
    }),
    failedOpen: new Counter({
      name: 'tollgate_failed_open_total',
      help: 'Requests let through without a permit because the store failed (failOpen)',
      labelNames: ['route'],
      registers,
    }),
    waitSeconds: new PlainHistogram({
      name: 'tollgate_wait_seconds',
      help: 'Time an admitted request waited for its permit',
      label: 'route',
      buckets: [...WAIT_BUCKETS],
      registers,
    }),
    leaseLost: new Counter({
      name: 'tollgate_lease_lost_total',
      help: 'Permits lost while their request was in flight (store failover, frozen process)',
      labelNames: ['route'],
      registers,
    }),
    storeErrors: new Counter({
      name: 'tollgate_store_errors_total',
      help: 'Admissions that failed because the store (Redis) failed or timed out',
      labelNames: ['route'],
      registers,
    }),
    upstreamErrors: new Counter({
      name: 'tollgate_upstream_errors_total',
      help: 'Upstream failures by kind (refused, unresolved, timeout, reset, other)',
      labelNames: ['route', 'kind'],
      registers,
    }),
    responses: new Counter({
      name: 'tollgate_responses_total',
      help: 'Responses sent, by route and status class',
      labelNames: ['route', 'class'],
      registers,
      collect() {
        this.reset()
        for (const [route, series] of boundRoutes)
          series.responses.forEach((count, index) => {
            if (count > 0) this.inc({ route, class: STATUS_CLASSES[index] as string }, count)
          })
      },
    }),
    refused: new Counter({
      name: 'tollgate_refused_total',
      help: 'Requests the gateway answered itself: bad_target, bad_host, duplicate_host, no_route, body_timeout, too_large, transfer_coding, connect, draining',
      labelNames: ['reason'],
      registers,
    }),
    limit: new Gauge({
      name: 'tollgate_limit_permits',
      help: 'Permits per bucket of the route: requests it lets be in flight at once (per tenant or address for per: tenant/ip)',
      labelNames: ['route'],
      registers,
      async collect() {
        if (!options.limits) return
        this.reset()
        for (const { route, permits } of await options.limits()) this.set({ route }, permits)
      },
    }),
    requestSeconds: new PlainHistogram({
      name: 'tollgate_request_duration_seconds',
      help: 'Time from a request arriving to its response closing, waiting for a permit included',
      label: 'route',
      buckets: DURATION_BUCKETS,
      registers,
    }),
    upstreamSeconds: new PlainHistogram({
      name: 'tollgate_upstream_duration_seconds',
      help: "Time from forwarding a request to the upstream's response headers",
      label: 'route',
      buckets: DURATION_BUCKETS,
      registers,
    }),
    redisSeconds: new PlainHistogram({
      name: 'tollgate_redis_call_duration_seconds',
      help: 'Time a Redis call of the store took, by call',
      label: 'call',
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers,
    }),
    contractBreaches: new Counter({
      name: 'tollgate_close_contract_breaches_total',
      help: 'Breaches of the close contract by step (close, upstream, release): a second close, a second end of an upstream request, a permit released twice or not with its close. A bug of the gateway; 0 is the only right value',
      labelNames: ['step'],
      registers,
    }),
    reloads: new Counter({
      name: 'tollgate_config_reloads_total',
      help: 'Config reloads (SIGHUP or --watch-config), by result: success, failure (the old config kept)',
      labelNames: ['result'],
      registers,
    }),
    reloadSuccessful: new Gauge({
      name: 'tollgate_config_last_reload_successful',
      help: 'Whether the last config reload succeeded (1) or failed and the old config runs on (0)',
      registers,
    }),
    reloadTimestamp: new Gauge({
      name: 'tollgate_config_last_reload_success_timestamp_seconds',
      help: 'When the running config was loaded, in Unix seconds',
      registers,
    }),
    route(name) {
      let bound = boundRoutes.get(name)
      if (!bound) {
        bound = {
          requestSeconds: metrics.requestSeconds.series(name),
          upstreamSeconds: metrics.upstreamSeconds.series(name),
          waitSeconds: metrics.waitSeconds.series(name),
          admitted: 0,
          inFlight: 0,
          responses: new Float64Array(STATUS_CLASSES.length),
          fairSeries: undefined,
          fair() {
            return (this.fairSeries ??= new FairMetrics())
          },
        }
        boundRoutes.set(name, bound)
      }
      return bound
    },
    addRoutes(names) {
      for (const name of names) if (!routes.includes(name)) routes.push(name)
      start(names)
    },
  }
  const boundRoutes = new Map<string, RouteMetrics>()
  // Fair routes' series by class and flow, read at scrape time. Labels: the class's name ('critical',
  // or p<n>: 8 at most) and the flow's label (a name from the config, or 'other').
  const fairRoutes = function* () {
    for (const [route, bound] of boundRoutes) if (bound.fairSeries) yield [route, bound.fairSeries] as const
  }
  new Counter({
    name: 'tollgate_class_admitted_total',
    help: 'Requests that got a permit, by priority class (routes with priority or flow)',
    labelNames: ['route', 'class'],
    registers,
    collect() {
      this.reset()
      for (const [route, fair] of fairRoutes())
        for (const [p, counts] of fair.classes) this.inc({ route, class: priorityName(p) }, counts.admitted)
    },
  })
  new Counter({
    name: 'tollgate_class_rejected_total',
    help: 'Requests rejected without a permit, by priority class and reason (shed: evicted by a higher class)',
    labelNames: ['route', 'class', 'reason'],
    registers,
    collect() {
      this.reset()
      for (const [route, fair] of fairRoutes())
        for (const [p, counts] of fair.classes)
          for (const [reason, n] of Object.entries(counts.rejected))
            this.inc({ route, class: priorityName(p), reason }, n)
    },
  })
  new Gauge({
    name: 'tollgate_class_waiting',
    help: 'Requests waiting for admission on this replica right now, by priority class',
    labelNames: ['route', 'class'],
    registers,
    collect() {
      this.reset()
      for (const [route, fair] of fairRoutes())
        for (const [p, counts] of fair.classes) this.set({ route, class: priorityName(p) }, counts.waiting)
    },
  })
  new Counter({
    name: 'tollgate_flow_admitted_total',
    help: 'Requests that got a permit, by flow (flows named in the config; all others are "other")',
    labelNames: ['route', 'flow'],
    registers,
    collect() {
      this.reset()
      for (const [route, fair] of fairRoutes())
        for (const [flow, counts] of fair.flows) this.inc({ route, flow }, counts.admitted)
    },
  })
  new Counter({
    name: 'tollgate_flow_rejected_total',
    help: 'Requests rejected without a permit, by flow (flows named in the config; all others are "other")',
    labelNames: ['route', 'flow'],
    registers,
    collect() {
      this.reset()
      for (const [route, fair] of fairRoutes())
        for (const [flow, counts] of fair.flows) this.inc({ route, flow }, counts.rejected)
    },
  })
  new Gauge({
    name: 'tollgate_store_up',
    help: 'Whether the store (Redis) answers: 1, or 0 while it is known down',
    registers,
    async collect() {
      this.set(options.storeUp ? ((await options.storeUp()) ? 1 : 0) : 1)
    },
  })
  // A gauge per route of what `of` reads of it at scrape time: routes it has nothing for (or whose
  // value is undefined) have no series.
  const routeGauge =
    <T>(of: ((route: string) => T | undefined) | undefined) =>
    (name: string, help: string, value: (figures: T) => number | undefined) =>
      new Gauge({
        name,
        help,
        labelNames: ['route'],
        registers,
        collect() {
          this.reset()
          if (!of) return
          for (const route of routes) {
            const figures = of(route)
            const number = figures === undefined ? undefined : value(figures)
            if (number !== undefined) this.set({ route }, number)
          }
        },
      })
  // An adaptive limit's state (routes without one have no series). The latency and gradient are
  // those of the latest window that had requests: an idle route keeps its series (a series that
  // comes and goes is a gap in every graph of it).
  const adaptiveGauge = routeGauge(options.adaptiveOf)
  adaptiveGauge('tollgate_adaptive_limit', 'The adaptive limit the controller set last', (s) => s.limit)
  adaptiveGauge(
    'tollgate_adaptive_min_rtt_seconds',
    'The adaptive limit’s baseline: the unloaded latency of the route’s requests',
    (s) => seconds(s.minRttMs),
  )
  adaptiveGauge(
    'tollgate_adaptive_rtt_seconds',
    'Median latency (admission or the request body’s end, to the upstream’s end of the response) of the last window stepped that had requests',
    (s) => seconds(s.rttMs),
  )
  adaptiveGauge(
    'tollgate_adaptive_rtt_age_seconds',
    'How long ago the window of tollgate_adaptive_rtt_seconds was stepped (it grows while the route is idle)',
    (s) => (s.rttAgeMs === undefined ? undefined : Math.round(s.rttAgeMs) / 1000),
  )
  adaptiveGauge(
    'tollgate_adaptive_window_requests',
    'Requests that ended in the last window stepped, every replica’s (0 while the route is idle)',
    (s) => s.requests,
  )
  adaptiveGauge(
    'tollgate_adaptive_gradient',
    'tolerance x baseline / latency of the last window that had requests, clamped to [0.5, 1]',
    (s) => s.gradient,
  )
  adaptiveGauge(
    'tollgate_adaptive_leader',
    'Whether this replica steps the controller (1) or not (0)',
    (s) => (s.leader ? 1 : 0),
  )
  adaptiveGauge(
    'tollgate_adaptive_replicas',
    'Replicas that reported in the last 3 windows',
    (s) => s.replicas,
  )
  adaptiveGauge(
    'tollgate_adaptive_store_reachable',
    'Whether the last report reached the store (0: the last limit is held)',
    (s) => (s.storeReachable ? 1 : 0),
  )
  // outage: share (admission/outage.ts); routes with another policy have none.
  const outageGauge = routeGauge(options.outageOf)
  outageGauge(
    'tollgate_outage_local',
    'Whether this replica admits its share of the route’s limit in memory (1: the store is down or not back yet)',
    (o) => (o.local ? 1 : 0),
  )
  outageGauge(
    'tollgate_outage_in_memory',
    'Requests admitted in memory during an outage that are still running',
    (o) => o.inFlight,
  )
  outageGauge(
    'tollgate_outage_replicas',
    'Replicas last counted on the store, which the limit is divided by during an outage (0: never counted)',
    (o) => o.replicas ?? 0,
  )
  metrics.reloads.inc({ result: 'success' }, 0)
  metrics.reloads.inc({ result: 'failure' }, 0)
  metrics.reloadSuccessful.set(1)
  metrics.reloadTimestamp.set(Math.floor(Date.now() / 1000))
  for (const step of CONTRACT_STEPS) metrics.contractBreaches.inc({ step }, 0)
  start(routes)
  return metrics

  function start(names: readonly string[]): void {
    // Known series start at 0, so a dashboard sees them before the first event.
    const reasons = REJECT_REASONS
    const kinds: UpstreamErrorKind[] = ['refused', 'unresolved', 'timeout', 'reset', 'other']
    for (const route of names) {
      metrics.route(route)
      metrics.queued.set({ route }, 0)
      metrics.kept.set({ route }, 0)
      for (const reason of reasons) metrics.rejected.inc({ route, reason }, 0)
      metrics.failedOpen.inc({ route }, 0)
      metrics.leaseLost.inc({ route }, 0)
      metrics.storeErrors.inc({ route }, 0)
      for (const kind of kinds) metrics.upstreamErrors.inc({ route, kind }, 0)
    }
  }
}

/** Milliseconds (to 2 decimals, as AdaptiveStatus gives them) as seconds, without float noise
 * (20.03 ms is 0.02003, not 20.03 / 1000 = 0.020030000000000003). */
function seconds(ms: number | undefined): number | undefined {
  return ms === undefined ? undefined : Math.round(ms * 100) / 100_000
}

/** The index of a status's class in RouteMetrics.responses: 1 for 1xx ... 9 for 9xx, 0 otherwise. */
export function statusClass(status: number): number {
  const index = Math.floor(status / 100)
  return index >= 1 && index <= 9 ? index : 0
}
