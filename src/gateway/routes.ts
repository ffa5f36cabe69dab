// Routes with what serving them needs: matching on the canonical path (target.ts), and the admissions
// a request takes in order (the read/write lock of its resource, then its concurrency permit).
import type { Store } from '../core/protocol/store.js'
import type { Admission } from '../admission/admission.js'
import { rwlockAdmission, semaphoreAdmission } from '../admission/gates.js'
import { firstValue, normalizeKey } from '../admission/keys.js'
import type { Logger } from '../admission/options.js'
import type { ConcurrencyConfig, GatewayConfig, RouteConfig, RwLockConfig } from './config/index.js'
import { resourceOf, underPrefix } from './http/target.js'

/** What admission needs to know about a request: decided once, before routing. */
export interface RequestFacts {
  method: string
  /** The canonical path without `;` parameters: what routes and locks are matched on. */
  match: string
  /** The request's header values (for tenant keys). */
  headers: Record<string, string | string[] | undefined>
  /** The client address the buckets of `per: ip` use. */
  clientAddress: string | undefined
  /** The permits the request counts for in its route's concurrency cap (the route's `weight`). */
  weight: number
}

export interface LiveRoute {
  config: RouteConfig
  admissions: Admission<RequestFacts>[]
  /** The concurrency cap's admission (its buckets' semaphores), if the route has one. */
  concurrency: Admission<RequestFacts> | undefined
}

export function buildRoutes(config: GatewayConfig, store: Store, logger: Logger): LiveRoute[] {
  let global: Admission<RequestFacts> | undefined
  return config.routes.map((route) => {
    const admissions: Admission<RequestFacts>[] = []
    if (route.rwlock) admissions.push(rwlockFor(route, route.rwlock, config, store, logger))
    const concurrency = route.concurrency
    let cap: Admission<RequestFacts> | undefined
    if (concurrency?.per === 'global') {
      // One bucket for every global route; each route's requests count their own route's weight.
      const weighted = config.routes.some((r) => r.concurrency?.per === 'global' && r.concurrency.weight > 1)
      cap = global ??= semaphoreFor('global', concurrency, config, store, logger, weighted)
    } else if (concurrency) {
      cap = semaphoreFor(route.name, concurrency, config, store, logger, concurrency.weight > 1)
    }
    if (cap) admissions.push(cap)
    return { config: route, admissions, concurrency: cap }
  })
}

/**
 * The first route that matches the method, host and path. A route that allows GET also serves HEAD
 * (RFC 9110 §9.3.2: HEAD is GET without the body). `host` is normalised (normalizeHost).
 */
export function matchRoute(
  routes: readonly LiveRoute[],
  method: string,
  path: string,
  host: string | undefined,
): LiveRoute | undefined {
  for (const route of routes) {
    const { pathPrefix, methods } = route.config
    if (methods && !methods.includes(method) && !(method === 'HEAD' && methods.includes('GET'))) continue
    if (route.config.host && host !== route.config.host) continue
    if (underPrefix(path, pathPrefix)) return route
  }
  return undefined
}

function semaphoreFor(
  name: string,
  concurrency: ConcurrencyConfig,
  config: GatewayConfig,
  store: Store,
  logger: Logger,
  /** Some route of this cap has a weight: read it per request (else every request counts 1, and
   * pays nothing for weights). */
  weighted: boolean,
): Admission<RequestFacts> {
  const { per, overrides } = concurrency
  const header = concurrency.tenantHeader
  const key =
    per === 'tenant'
      ? // A repeated tenant header (`T, T`, or two lines) counts as its first value, as documented.
        (req: RequestFacts) => normalizeKey(firstValue(req.headers[header]))
      : per === 'ip'
        ? (req: RequestFacts) => normalizeKey(req.clientAddress)
        : undefined
  const hasOverrides = Object.keys(overrides).length > 0
  const admission = semaphoreAdmission<RequestFacts>(
    {
      store,
      name,
      ...(concurrency.adaptive ? { adaptive: concurrency.adaptive } : { permits: concurrency.permits }),
      key,
      // Own keys only: a tenant id like 'constructor' must not find Object.prototype members.
      permitsFor: hasOverrides
        ? (bucket) => (Object.hasOwn(overrides, bucket) ? overrides[bucket] : undefined)
        : undefined,
      maxWaitMs: concurrency.maxWaitMs,
      maxQueue: concurrency.maxQueue,
      ttlMs: config.ttlMs,
      statusCode: concurrency.statusCode,
      failOpen: concurrency.failOpen,
      weight: weighted ? (req: RequestFacts) => req.weight : undefined,
      logger,
    },
    concurrency.keepAliveMs,
  )
  // The dashboard lists the busiest buckets of a keyed route from its first request.
  if (key && config.admin) admission.trackBuckets()
  return admission
}

/** GET/HEAD/OPTIONS share the read lock of the request's resource, other methods take its write lock.
 * The resource is the canonical path, with runs of '/' merged and no trailing '/' (resourceOf()), or
 * what `resourcePattern` captures of that, so every spelling of one resource is one lock (G13). */
function rwlockFor(
  route: RouteConfig,
  rwlock: RwLockConfig,
  config: GatewayConfig,
  store: Store,
  logger: Logger,
): Admission<RequestFacts> {
  const pattern = rwlock.resourcePattern
  return rwlockAdmission<RequestFacts>(
    {
      store,
      name: `${route.name}:rw`,
      resource: (req) => {
        const resource = resourceOf(req.match)
        const found = pattern?.exec(resource)
        return found ? (found[1] ?? found[0]) : resource
      },
      maxWaitMs: rwlock.maxWaitMs,
      maxQueue: rwlock.maxQueue,
      ttlMs: config.ttlMs,
      statusCode: rwlock.statusCode,
      failOpen: rwlock.failOpen,
      logger,
    },
    { method: (req) => req.method, path: (req) => req.match },
  )
}
