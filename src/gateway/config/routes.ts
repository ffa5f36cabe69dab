// The routes of a config: what each inherits (the file's `defaults`, the flags over them), each route
// with its own fields over that, and the checks across routes (names, per: global buckets that agree).
import { defined } from '../../core/options.js'
import { priorityName } from '../../core/fair.js'
import { normalizeHost } from '../http/target.js'
import type { GatewayFlags } from './flags.js'
import { classWaits, isFair, resolveConcurrency, resolveRwLock } from './limits.js'
import type { ConcurrencyInput, GatewayFile, RwLockInput } from './schema.js'
import {
  type ConcurrencyConfig,
  GATEWAY_DEFAULTS,
  type Issues,
  type RouteConfig,
  type TimeoutsConfig,
} from './types.js'

/** What every route inherits: `defaults` of the file, overridden by the flags. */
export interface Inherited {
  upstream: string | undefined
  concurrency: ConcurrencyInput | false
  rwlock: RwLockInput | false
  timeouts: TimeoutsConfig
  bufferBytes: number
}

const bufferOf = (value: { maxBytes: number } | false | undefined) =>
  value === undefined ? undefined : value === false ? 0 : value.maxBytes

/** The file's `defaults`, with the flags over them: what a route without its own values gets. */
export function inherited(file: GatewayFile, flags: GatewayFlags): Inherited {
  const d = GATEWAY_DEFAULTS
  const defaults = file.defaults ?? {}
  let concurrency: ConcurrencyInput | false = defaults.concurrency ?? {}
  const concurrencyFlags: ConcurrencyInput = {
    permits: flags.permits,
    per: flags.per,
    tenantHeader: flags.tenantHeader,
    maxWaitMs: flags.maxWaitMs,
    maxQueue: flags.maxQueue,
    failOpen: flags.failOpen,
    outage: flags.outage,
    outageShare: flags.outageShare,
    keepAliveMs: flags.permitKeepAliveMs,
    // The operator who names the header on the command line is the one who trusts it.
    priority:
      flags.priorityHeader === undefined ? undefined : { header: flags.priorityHeader, trustHeader: true },
    flow: flags.flowFrom === undefined ? undefined : { from: flags.flowFrom },
  }
  if (Object.values(concurrencyFlags).some((value) => value !== undefined))
    concurrency = { ...(concurrency || {}), ...defined(concurrencyFlags) }
  const adaptiveFlags = defined({
    max: flags.adaptiveMax,
    min: flags.adaptiveMin,
    initial: flags.adaptiveInitial,
    algorithm: flags.adaptiveAlgorithm,
    windowMs: flags.adaptiveWindowMs,
    scope: flags.adaptiveScope,
    drops: flags.adaptiveDrops,
    dropShare: flags.adaptiveDropShare,
  })
  if (Object.keys(adaptiveFlags).length > 0) {
    // The flags turn an adaptive limit on for every route that inherits the defaults: it replaces the
    // file's default permits (--permits beside them is refused when the route is resolved).
    const base = concurrency || {}
    const fileAdaptive = base.adaptive || {}
    const { permits: _, ...rest } = base
    concurrency = {
      ...rest,
      ...(flags.permits === undefined ? {} : { permits: flags.permits }),
      adaptive: { ...fileAdaptive, ...adaptiveFlags } as NonNullable<ConcurrencyInput['adaptive']>,
    }
  }
  let rwlock: RwLockInput | false = defaults.rwlock ?? false
  if (flags.rwlock) {
    // The lock waits and fails like the concurrency cap: the same flags set both.
    const { maxWaitMs, maxQueue, failOpen } = concurrencyFlags
    // (--outage share is the concurrency cap's alone: the lock keeps failing closed, or open.)
    const outage = flags.outage === 'share' ? undefined : flags.outage
    rwlock = { ...(rwlock || {}), ...defined({ maxWaitMs, maxQueue, failOpen, outage }) }
  }
  const t = defaults.timeouts
  return {
    upstream: flags.upstream ?? defaults.upstream,
    concurrency,
    rwlock,
    timeouts: {
      upstreamMs: flags.timeoutMs ?? t?.upstreamMs ?? d.upstreamTimeoutMs,
      sendMs: flags.sendTimeoutMs ?? t?.sendMs ?? d.sendTimeoutMs,
      clientBodyMs: flags.clientBodyTimeoutMs ?? t?.clientBodyMs ?? d.clientBodyTimeoutMs,
      requestMs: flags.requestTimeoutMs ?? t?.requestMs ?? d.requestTimeoutMs,
      websocketIdleMs: flags.websocketIdleTimeoutMs ?? t?.websocketIdleMs ?? d.websocketIdleTimeoutMs,
    },
    bufferBytes: flags.requestBufferBytes ?? bufferOf(defaults.requestBuffer) ?? d.requestBufferBytes,
  }
}
/** `own` over `base` field by field; `false` (either way) means none. */
function merged<T extends object>(base: T | false, own: T | false | undefined): T | false {
  if (own === false) return false
  if (own === undefined) return base
  return { ...(base || ({} as T)), ...own }
}

export function routesOf(
  file: GatewayFile,
  flags: GatewayFlags,
  base: Inherited,
  issues: Issues,
): RouteConfig[] {
  const fileRoutes = file.routes ?? [{ name: 'default', match: { pathPrefix: '/' } }]
  if (fileRoutes.length === 0) issues.push({ path: 'routes', message: 'expected at least one route' })
  const names = new Map<string, number>()
  const routes: RouteConfig[] = []
  const globalBuckets: { index: number; concurrency: ConcurrencyConfig }[] = []
  fileRoutes.forEach((route, index) => {
    const at = `routes[${index}]`
    const name = route.name ?? (route.match.pathPrefix === '/' ? 'default' : route.match.pathPrefix.slice(1))
    if (!/^[\w.:/-]{1,64}$/.test(name)) {
      issues.push({
        path: `${at}.name`,
        message: 'required: the path prefix is not a usable name (letters, digits and . _ : / -)',
      })
    } else if (names.has(name)) {
      issues.push({ path: `${at}.name`, message: `"${name}" is also the name of routes[${names.get(name)}]` })
    }
    names.set(name, index)
    const target = route.upstream ?? base.upstream
    if (target === undefined) {
      issues.push(
        file.routes === undefined
          ? { path: '--upstream', message: 'required: where should requests go? (or use --config)' }
          : {
              path: `${at}.upstream`,
              message: `required: give --upstream${flags.config === undefined ? '' : ' (or --config)'}, defaults.upstream or ${at}.upstream`,
            },
      )
      return
    }
    const concurrencyInput = merged(base.concurrency, route.concurrency)
    const concurrency =
      concurrencyInput === false
        ? undefined
        : resolveConcurrency(
            concurrencyInput,
            `${at}.concurrency`,
            issues,
            route.concurrency,
            base.concurrency,
          )
    if (concurrency?.per === 'global') globalBuckets.push({ index, concurrency })
    else if (concurrency && concurrency.maxQueued > 0 && !isFair(concurrency)) unfairBound(index, issues)
    if (concurrency && concurrency.weight > concurrency.permits)
      issues.push({
        path: `${at}.concurrency.weight`,
        message: `expected at most permits (${concurrency.permits}): a heavier request could never be admitted`,
      })
    const rwlockInput = merged(base.rwlock, route.rwlock)
    routes.push({
      name,
      pathPrefix: route.match.pathPrefix,
      methods: route.match.methods?.map((m) => m.toUpperCase()),
      host: normalizeHost(route.match.host),
      upstream: new URL(target),
      stripPrefix: route.stripPrefix ?? false,
      concurrency,
      rwlock: rwlockInput === false ? undefined : resolveRwLock(rwlockInput),
      timeouts: { ...base.timeouts, ...defined(route.timeouts ?? {}) },
      requestBufferBytes: bufferOf(route.requestBuffer) ?? base.bufferBytes,
    })
  })
  // per: global is one bucket for several routes: they must agree on what it is.
  const first = globalBuckets[0]
  // (Each route keeps its own weight: what its requests count for in the shared bucket; and its own
  // priority and waits, as a critical and a sheddable route share one limit.)
  const bucketOf = (c: ConcurrencyConfig | undefined) =>
    JSON.stringify(c && { ...c, weight: undefined, priority: undefined, maxWaitMs: undefined })
  for (const other of globalBuckets.slice(1)) {
    const at = `routes[${other.index}].concurrency`
    const [mine, theirs] = [other.concurrency, first!.concurrency]
    if (JSON.stringify(mine.flow) !== JSON.stringify(theirs.flow)) {
      issues.push({
        path: `${at}.flow`,
        message: `per: global routes share one bucket, so their flow settings must equal those of routes[${first!.index}] (priority and maxWaitMs may differ)`,
      })
    } else if (mine.maxQueued !== theirs.maxQueued) {
      issues.push({
        path: `${at}.maxQueued`,
        message: `per: global routes share one bucket, so maxQueued must equal that of routes[${first!.index}] (${theirs.maxQueued || 'none'})`,
      })
    } else if (bucketOf(mine) !== bucketOf(theirs)) {
      issues.push({
        path: at,
        message: `per: global routes share one bucket, so their concurrency settings must equal those of routes[${first!.index}]`,
      })
    }
  }
  if (first && first.concurrency.maxQueued > 0 && !globalBuckets.some((g) => isFair(g.concurrency)))
    unfairBound(first.index, issues)
  if (globalBuckets.length > 1 && issues.length === 0) sharedWaits(globalBuckets, issues)
  return routes
}

function unfairBound(index: number, issues: Issues): void {
  issues.push({
    path: `routes[${index}].concurrency.maxQueued`,
    message:
      'only with priority or flow: maxQueued bounds a fair queue across the fleet (maxQueue bounds each replica)',
  })
}

/** The waits of a per: global bucket, by class: each route's requests wait as long as that route
 * says, so two routes that can send one class must agree on its wait. */
function sharedWaits(routes: { index: number; concurrency: ConcurrencyConfig }[], issues: Issues): void {
  const waits = new Map<number, { ms: number; index: number }>()
  for (const { index, concurrency } of routes) {
    for (const [priority, ms] of classWaits(concurrency)) {
      const seen = waits.get(priority)
      if (seen === undefined) waits.set(priority, { ms, index })
      else if (seen.ms !== ms) {
        issues.push({
          path: `routes[${index}].concurrency`,
          message: `per: global routes share one queue: its ${priorityName(priority)} requests wait ${seen.ms} ms by routes[${seen.index}] but ${ms} ms here; give the class one maxWaitMs (or a different class)`,
        })
        return
      }
    }
  }
}
