// Prometheus metrics of one gateway (its own prom-client Registry, so several gateways can live in one
// process, e.g. in tests). Every series is labelled by route name, never by tenant id or address:
// label values come from the config, so the number of series is bounded by the config.
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client'
import type { RejectReason } from '../admission/admission.js'
import type { UpstreamErrorKind } from './proxy.js'

export interface GatewayMetrics {
  readonly registry: Registry
  /** Requests holding a permit right now. */
  readonly inFlight: Gauge<'route'>
  /** Requests waiting for a permit right now. */
  readonly queued: Gauge<'route'>
  readonly admitted: Counter<'route'>
  readonly rejected: Counter<'route' | 'reason'>
  /** Requests let through without a permit because the store failed (failOpen). */
  readonly failedOpen: Counter<'route'>
  /** Seconds an admitted request waited for its permit. */
  readonly waitSeconds: Histogram<'route'>
  readonly leaseLost: Counter<'route'>
  readonly storeErrors: Counter<'route'>
  readonly upstreamErrors: Counter<'route' | 'kind'>
  /** Responses by route and status class (2xx, 4xx, ...), including rejections and 502/504. */
  readonly responses: Counter<'route' | 'class'>
  /** Requests the gateway answered by itself before or instead of forwarding (400, 404, 408, 413). */
  readonly refused: Counter<'reason'>
}

/** `queuedOf(route)`: requests of the route waiting in the store's queue right now (read at scrape time). */
export function createMetrics(
  routes: readonly string[],
  options: { processMetrics?: boolean; queuedOf?: (route: string) => number } = {},
): GatewayMetrics {
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
    admitted: new Counter({
      name: 'tollgate_admitted_total',
      help: 'Requests that got a permit',
      labelNames: ['route'],
      registers,
    }),
    rejected: new Counter({
      name: 'tollgate_rejected_total',
      help: 'Requests rejected without a permit, by reason (timeout, queue_full, store_unavailable)',
      labelNames: ['route', 'reason'],
      registers,
    }),
    failedOpen: new Counter({
      name: 'tollgate_failed_open_total',
      help: 'Requests let through without a permit because the store failed (failOpen)',
      labelNames: ['route'],
      registers,
    }),
    waitSeconds: new Histogram({
      name: 'tollgate_wait_seconds',
      help: 'Time an admitted request waited for its permit',
      labelNames: ['route'],
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
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
    }),
    refused: new Counter({
      name: 'tollgate_refused_total',
      help: 'Requests the gateway answered itself: bad_target, bad_host, duplicate_host, no_route, body_timeout, too_large, draining',
      labelNames: ['reason'],
      registers,
    }),
  }
  // Known series start at 0, so a dashboard sees them before the first event.
  const reasons: RejectReason[] = ['timeout', 'queue_full', 'store_unavailable']
  const kinds: UpstreamErrorKind[] = ['refused', 'unresolved', 'timeout', 'reset', 'other']
  for (const route of routes) {
    metrics.inFlight.set({ route }, 0)
    metrics.queued.set({ route }, 0)
    metrics.admitted.inc({ route }, 0)
    for (const reason of reasons) metrics.rejected.inc({ route, reason }, 0)
    metrics.failedOpen.inc({ route }, 0)
    metrics.leaseLost.inc({ route }, 0)
    metrics.storeErrors.inc({ route }, 0)
    for (const kind of kinds) metrics.upstreamErrors.inc({ route, kind }, 0)
  }
  return metrics
}

export function statusClass(status: number): string {
  return `${Math.floor(status / 100)}xx`
}
