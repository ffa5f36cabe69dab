// Routes with what serving them needs: matching on the canonical path (target.ts), and the admissions
// a request takes in order (the read/write lock of its resource, then its concurrency permit).
import { DEFAULT_PRIORITY, PRIORITY_CLASSES, priorityName } from '../core/fair.js'
import type { Store } from '../core/protocol/store.js'
import type { Admission } from '../admission/admission.js'
import { rwlockAdmission, semaphoreAdmission } from '../admission/buckets.js'
import { DEFAULT_BUCKET, firstValue, normalizeKey } from '../admission/keys.js'
import type { Logger, SemaphoreMiddlewareOptions } from '../admission/options.js'
import type { ConcurrencyConfig, GatewayConfig, RouteConfig, RwLockConfig } from './config/index.js'
import { classWaits, isFair } from './config/limits.js'
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
  /** Its priority class in its route's fair queue, 0..7 (core/fair.ts; standard without `priority`). */
  priority: number
  /** Its flow in its route's fair queue (a tenant id, an address...); undefined: the default flow. */
  flow: string | undefined
  /** The metric label of its flow: its name when the config names it (flow.weights, flow.maxFor),
   * else 'other', so a hostile header never adds a series. */
  flowLabel: string
}

/** A request's weight, priority and flow in its route's cap, decided once (decide()). */
export type Discipline = Pick<RequestFacts, 'weight' | 'priority' | 'flow' | 'flowLabel'>

/** The flow label of every request of a flow the config does not name. */
export const OTHER_FLOW = 'other'

export interface LiveRoute {
  config: RouteConfig
  admissions: Admission<RequestFacts>[]
  /** The concurrency cap's admission (its buckets' semaphores), if the route has one. */
  concurrency: Admission<RequestFacts> | undefined
  /** The read/write lock's admission (its resources' locks), if the route has one. */
  rwlock: Admission<RequestFacts> | undefined
  /** Set the request's weight, priority and flow in this route's cap (once, when it is routed). */
  decide(facts: RequestFacts): void
  /** Its cap is a fair queue (priority or flow, its own or a shared per: global route's): its
   * requests are counted by class and flow. */
  fair: boolean
}

const PLAIN: Discipline = { weight: 1, priority: DEFAULT_PRIORITY, flow: undefined, flowLabel: OTHER_FLOW }

export function buildRoutes(config: GatewayConfig, store: Store, logger: Logger): LiveRoute[] {
  let global: Admission<RequestFacts> | undefined
  const globals = config.routes.flatMap((r) => (r.concurrency?.per === 'global' ? [r.concurrency] : []))
  return config.routes.map((route) => {
    const admissions: Admission<RequestFacts>[] = []
    const rwlock = route.rwlock && rwlockFor(route, route.rwlock, config, store, logger)
    if (rwlock) admissions.push(rwlock)
    const concurrency = route.concurrency
    let cap: Admission<RequestFacts> | undefined
    if (concurrency?.per === 'global') {
      // One bucket for every global route; each route's requests count their own route's weight.
      const weighted = globals.some((c) => c.weight > 1)
      cap = global ??= semaphoreFor('global', concurrency, config, store, logger, weighted, globals)
    } else if (concurrency) {
      cap = semaphoreFor(route.name, concurrency, config, store, logger, concurrency.weight > 1, [
        concurrency,
      ])
    }
    if (cap) admissions.push(cap)
    const discipline = concurrency ? disciplineOf(concurrency) : () => PLAIN
    return {
      config: route,
      admissions,
      concurrency: cap,
      rwlock,
      fair:
        concurrency !== undefined &&
        (concurrency.per === 'global' ? globals.some(isFair) : isFair(concurrency)),
      decide(facts) {
        const decided = discipline(facts)
        facts.weight = decided.weight
        facts.priority = decided.priority
        facts.flow = decided.flow
        facts.flowLabel = decided.flowLabel
      },
    }
  })
}

/** How a route's requests get their weight, class and flow. A header's value counts as its first
 * value, normalised as a bucket key (keys.ts); a value that names no class takes the next source (the
 * tenant's class, then the default), never an error: a client cannot fail its request this way. */
export function disciplineOf(concurrency: ConcurrencyConfig): (facts: RequestFacts) => Discipline {
  const { weight, priority, flow, tenantHeader } = concurrency
  if (!priority && !flow) {
    const plain = { ...PLAIN, weight }
    return () => plain
  }
  const byTenant = priority !== undefined && Object.keys(priority.tenants).length > 0
  const tenantOf = (facts: RequestFacts) => normalizeKey(firstValue(facts.headers[tenantHeader]))
  const classOf = (facts: RequestFacts): number => {
    if (!priority) return DEFAULT_PRIORITY
    if (priority.header !== undefined) {
      const found = classNamed(normalizeKey(firstValue(facts.headers[priority.header])))
      if (found !== undefined) return found
    }
    if (byTenant) {
      const tenant = tenantOf(facts)
      // Own keys only: a tenant id like 'constructor' must not find Object.prototype members.
      if (Object.hasOwn(priority.tenants, tenant)) return priority.tenants[tenant] as number
    }
    return priority.default
  }
  const flowOf = (facts: RequestFacts): string | undefined => {
    if (!flow) return undefined
    const key =
      flow.from === 'tenant'
        ? tenantOf(facts)
        : flow.from === 'ip'
          ? normalizeKey(facts.clientAddress)
          : normalizeKey(firstValue(facts.headers[flow.header as string]))
    return key === DEFAULT_BUCKET ? undefined : key
  }
  const named = (name: string | undefined) =>
    name !== undefined &&
    flow !== undefined &&
    (Object.hasOwn(flow.weights, name) || Object.hasOwn(flow.maxFor, name))
  return (facts) => {
    const name = flowOf(facts)
    return {
      weight,
      priority: classOf(facts),
      flow: name,
      flowLabel: named(name) ? (name as string) : OTHER_FLOW,
    }
  }
}

/** A header's class: a class name (any case) or a number from 0 to 7; undefined for anything else. */
function classNamed(value: string): number | undefined {
  if (/^[0-7]$/.test(value)) return Number(value)
  const name = value.toLowerCase()
  return Object.hasOwn(PRIORITY_CLASSES, name)
    ? PRIORITY_CLASSES[name as keyof typeof PRIORITY_CLASSES]
    : undefined
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
  /** Every route's concurrency of this cap (per: global routes share one). */
  shared: readonly ConcurrencyConfig[],
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
      outage: concurrency.outage,
      outageShare: concurrency.outageShare,
      weight: weighted ? (req: RequestFacts) => req.weight : undefined,
      logger,
      ...fairOptions(concurrency, shared),
    },
    concurrency.keepAliveMs,
  )
  // The dashboard lists the busiest buckets of a keyed route from its first request.
  if (key && config.admin) admission.arrivals.track()
  return admission
}

/** The admission options of a fair queue (src/admission: docs/middleware.md, "Overload"), none for a plain one:
 * each request's class and flow as decide() set them, the flows' weights and caps, the fleet-wide
 * bound, and each class's wait (the routes sharing a per: global queue agree on them: config/routes.ts). */
export function fairOptions(
  concurrency: ConcurrencyConfig,
  shared: readonly ConcurrencyConfig[],
): Partial<SemaphoreMiddlewareOptions<RequestFacts>> {
  if (!shared.some(isFair)) return {}
  const flow = shared.find((c) => c.flow)?.flow
  // By class name, or number for an unnamed class; one number when every class waits alike.
  const waits: Record<string, number> = { standard: concurrency.maxWaitMs }
  for (const c of shared) for (const [p, ms] of classWaits(c)) waits[isNamed(p) ? priorityName(p) : p] = ms
  const alike = Object.values(waits).every((ms) => ms === concurrency.maxWaitMs)
  return {
    priority: (req: RequestFacts) => req.priority,
    flow: (req: RequestFacts) => req.flow,
    overload: {
      ...(flow ? { flowWeights: { ...flow.weights }, flowMax: flowMaxOf(flow.max, flow.maxFor) } : {}),
      ...(concurrency.maxQueued > 0 ? { maxQueued: concurrency.maxQueued } : {}),
    },
    maxWaitMs: alike ? concurrency.maxWaitMs : waits,
  }
}

const isNamed = (p: number) => Object.values(PRIORITY_CLASSES).includes(p as never)

/** A flow's cap: its own (`maxFor`), else `max` (0: none). Own keys only, as the tenants' permits: a
 * flow named 'constructor' gets `max`. */
function flowMaxOf(max: number, maxFor: Readonly<Record<string, number>>) {
  if (max === 0 && Object.keys(maxFor).length === 0) return undefined
  return (name: string) => (Object.hasOwn(maxFor, name) ? maxFor[name] : max > 0 ? max : undefined)
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
  const admission = rwlockAdmission<RequestFacts>(
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
  // The dashboard lists the busiest resources from the first request.
  if (config.admin) admission.arrivals.track()
  return admission
}
