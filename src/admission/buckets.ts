// Buckets: a gate (a semaphore, or one side of a read/write lock) per key, created on first use and
// evicted past a bound; and the two admissions the middleware and the gateway build from options.
import { ConfigError } from '../core/errors.js'
import { DEFAULT_PRIORITY, priorityNumber } from '../core/fair.js'
import type { Lease } from '../core/client/lease.js'
import { isPlainObjectOrUndefined, parseLockOptions, positiveInt, rejectUnknown } from '../core/options.js'
import { bucketReadWriteLock, type ReadWriteLock } from '../primitives/rwlock.js'
import {
  acquireNow,
  adaptiveHome,
  adaptiveLimitOf,
  bucketSemaphore,
  type Semaphore,
  type SemaphoreOptions,
} from '../primitives/semaphore.js'
import { parseAdaptiveOptions } from '../primitives/adaptive/limit.js'
import { MAX_WEIGHT } from '../core/weight.js'
import { Admission } from './admission.js'
import type { FairRequest } from './bucket.js'
import { MAX_NAMED_FLOWS } from './metrics.js'
import { bucketName, DEFAULT_BUCKET, GLOBAL_KEY, normalizeKey, normalizePath } from './keys.js'
import {
  type Logger,
  type OverloadOptions,
  rejectUnknownOptions,
  resolveCommon,
  type RwlockMiddlewareOptions,
  type SemaphoreMiddlewareOptions,
} from './options.js'

const MAX_CACHED_GATES = 10_000

/** Gates per bucket, created on first use and bounded, so a flood of tenant ids costs bounded memory.
 * Two generations (quick-lru's scheme): a hit in the recent one writes nothing, where a move-to-end
 * LRU deleted and re-inserted a Map entry per request, and that churn of a long-lived Map's table
 * showed up in the gateway's allocation profile. A key used since the last turnover is never evicted
 * at the next one. Evicting a gate drops nothing: leases live in the store. */
export class GateCache<G> {
  private recent = new Map<string, G>()
  private older = new Map<string, G>()
  constructor(
    private readonly create: (key: string) => G,
    /** Gates kept at most (two generations of half as many). */
    private readonly max = MAX_CACHED_GATES,
  ) {}

  get(key: string): G {
    const hit = this.recent.get(key)
    if (hit !== undefined) return hit
    let gate = this.older.get(key)
    if (gate === undefined) gate = this.create(key)
    else this.older.delete(key)
    if (this.recent.size >= this.max / 2) {
      this.older = this.recent
      this.recent = new Map()
    }
    this.recent.set(key, gate)
    return gate
  }

  get size(): number {
    return this.recent.size + this.older.size
  }
}

/** Options of semaphore(), validated once; returns the framework-free admission. `keepAliveMs`: the
 * gateway's permit keep-alive (keep-alive.ts; validated by the gateway's config), 0 = off. */
export function semaphoreAdmission<Req>(
  input: number | SemaphoreMiddlewareOptions<Req>,
  keepAliveMs = 0,
): Admission<Req> {
  const options: SemaphoreMiddlewareOptions<Req> = typeof input === 'number' ? { permits: input } : input
  if (typeof options !== 'object' || options === null) {
    throw new ConfigError('options', 'a number of permits or an options object', input)
  }
  isPlainObjectOrUndefined('options', options)
  rejectUnknownOptions(options, [...SEMAPHORE_KEYS])
  const overload = parseOverload(options)
  const adaptive = options.adaptive === undefined ? undefined : parseAdaptiveOptions(options.adaptive)
  if (adaptive) {
    // One limit, learnt from the requests it admits: one bucket, every request counting 1.
    for (const [option, what] of [
      [
        'permits',
        'an adaptive limit starts at `adaptive.initial` and stays within `adaptive.min` and `adaptive.max`',
      ],
      ['key', 'an adaptive limit is one bucket: use a semaphore per key instead'],
      ['permitsFor', 'an adaptive limit is one bucket'],
      ['weight', 'an adaptive limit counts requests'],
    ] as const) {
      if (options[option] !== undefined)
        throw new ConfigError(option, `no ${option} beside adaptive (${what})`, options[option])
    }
    if (keepAliveMs > 0)
      throw new ConfigError(
        'keepAliveMs',
        'no permit keep-alive beside an adaptive limit (it measures each request)',
        keepAliveMs,
      )
  }
  const permits = adaptive ? adaptive.initial : positiveInt('permits', options.permits, 1_000_000)
  const keyFn = options.key
  if (keyFn !== undefined && typeof keyFn !== 'function') throw new ConfigError('key', 'a function', keyFn)
  const permitsFor = options.permitsFor
  if (permitsFor !== undefined && typeof permitsFor !== 'function') {
    throw new ConfigError('permitsFor', 'a function', permitsFor)
  }
  const weightFn = options.weight
  if (weightFn !== undefined && typeof weightFn !== 'function')
    throw new ConfigError('weight', 'a function of the request returning the permits it counts for', weightFn)
  if (overload && keepAliveMs > 0)
    throw new ConfigError(
      'keepAliveMs',
      'no permit keep-alive beside priority, flow or overload (a kept lease would serve its bucket’s next request past the queue’s order)',
      keepAliveMs,
    )
  const config = resolveCommon(options, 'semaphore')
  // The lock options every bucket's semaphore will get, checked now (ConfigError naming the option).
  parseLockOptions('sem', config.store, config.name, { ttlMs: config.ttlMs })
  // A local adaptive limit is this process's own: its bucket lives in a store of its own.
  const store = adaptive ? adaptiveHome(config.store, adaptive) : config.store
  const gates = new GateCache<Semaphore>((key) => {
    let n = permits
    if (permitsFor) {
      let override: number | undefined
      try {
        override = permitsFor(key)
      } catch (error) {
        config.logger.error('tollgate: permitsFor() threw; using `permits`', { error })
      }
      if (override !== undefined) n = positiveInt('permitsFor() result', override, 1_000_000)
    }
    // The policy name and the bucket share one primitive name; keySpace() encodes what is hostile.
    const semaphoreOptions = { permits: n, ttlMs: config.ttlMs, acquireTimeoutMs: Number.POSITIVE_INFINITY }
    return bucketSemaphore(
      store,
      bucketName(config.name, key),
      overload ? fairSemaphoreOptions(semaphoreOptions, overload.options) : semaphoreOptions,
    )
  })
  // The `overload` values are the semaphore's to check: one bucket made now says a bad one at
  // construction, never at a request.
  if (overload) gates.get(keyFn ? DEFAULT_BUCKET : GLOBAL_KEY)
  const fairOf = overload && fairRequests(options, overload.options, config.logger)
  /** The permits a request counts for in `gate`: the `weight` option's answer, at most the bucket's
   * permits (a heavier request could never be admitted); 1 without the option or when it fails. */
  const weightIn = (req: Req, gate: Semaphore): number => {
    if (!weightFn) return 1
    let weight: unknown
    try {
      weight = weightFn(req)
    } catch (error) {
      config.logger.error('tollgate: weight() threw; counting the request as 1', { error })
      return 1
    }
    if (!(typeof weight === 'number' && Number.isInteger(weight) && weight >= 1)) {
      config.logger.error('tollgate: weight() returned no positive integer; counting the request as 1', {
        weight,
      })
      return 1
    }
    return Math.min(weight, gate.permits, MAX_WEIGHT)
  }
  /** A request's bucket, with its class and flow when the buckets are fair queues. */
  const bucketIn = (req: Req, key: string, keyed: boolean) => {
    const gate = gates.get(key)
    const weight = weightIn(req, gate)
    if (!fairOf) return { key, gate, keyed, weight }
    const fair = fairOf(req)
    return { key, gate, keyed, weight: fair.cap === undefined ? weight : Math.min(weight, fair.cap), fair }
  }
  const admission = new Admission(
    config,
    (req: Req) => {
      if (!keyFn) return bucketIn(req, GLOBAL_KEY, false)
      let key: string
      try {
        key = normalizeKey(keyFn(req))
        // A client's key '*' must not land in the bucket of an unkeyed semaphore of the same name.
        if (key === GLOBAL_KEY) key = '%2A'
      } catch (error) {
        config.logger.warn('tollgate: key() threw; using the default bucket', { error })
        key = DEFAULT_BUCKET
      }
      return bucketIn(req, key, true)
    },
    (gate, weight, fair) =>
      fair ? fairAcquireNow(gate as Semaphore, weight, fair) : acquireNow(gate as Semaphore, weight),
    keepAliveMs,
  )
  admission.semaphoreOf = (key) => gates.get(key)
  // outage: 'share': the same bucket in the outage's memory store, with this process's share.
  admission.localGate = (local, key, n) => {
    const localOptions = { permits: n, ttlMs: config.ttlMs, acquireTimeoutMs: Number.POSITIVE_INFINITY }
    return bucketSemaphore(
      local,
      bucketName(config.name, key),
      overload ? fairSemaphoreOptions(localOptions, overload.options) : localOptions,
    )
  }
  if (overload) admission.overloaded(overload.named)
  if (adaptive)
    admission.adaptive = adaptiveLimitOf(gates.get(GLOBAL_KEY), adaptive, store, config.logger, config.name)
  return admission
}

/** semaphore()'s own options (besides those every middleware takes). */
const SEMAPHORE_KEYS = [
  'permits',
  'key',
  'permitsFor',
  'weight',
  'adaptive',
  'priority',
  'flow',
  'overload',
] as const

const OVERLOAD_KEYS = ['flowWeights', 'flowMax', 'maxQueued'] as const

/** The `overload` option (`{}` when only `priority` or `flow` is given), its keys checked here and
 * its values by the semaphore; and the flows it names (metric labels). Undefined without any of the
 * three: the buckets are plain FIFO queues, as without this feature. */
function parseOverload<Req>(
  options: SemaphoreMiddlewareOptions<Req>,
): { options: OverloadOptions; named: ReadonlySet<string> } | undefined {
  const { priority, flow, overload } = options
  if (priority === undefined && flow === undefined && overload === undefined) return undefined
  for (const [option, value] of [
    ['priority', priority],
    ['flow', flow],
  ] as const) {
    if (value !== undefined && typeof value !== 'function')
      throw new ConfigError(
        option,
        option === 'priority'
          ? "a function of the request returning 'critical', 'standard', 'sheddable' or 0 to 7"
          : 'a function of the request returning its flow (a tenant id, say)',
        value,
      )
  }
  const given = overload ?? {}
  if (typeof given !== 'object' || given === null || Array.isArray(given))
    throw new ConfigError('overload', 'an options object, e.g. { maxQueued: 1000 } (or {})', given)
  rejectUnknown(given, OVERLOAD_KEYS, {
    maxQueue: 'the fleet-wide bound is `overload.maxQueued` (`maxQueue` is per process, beside `overload`)',
    weights: 'it is `flowWeights`',
    max: 'it is `flowMax`',
  })
  const named = new Set<string>()
  for (const table of [given.flowWeights, given.flowMax]) {
    if (typeof table !== 'object' || table === null) continue
    for (const name of Object.keys(table)) if (named.size < MAX_NAMED_FLOWS) named.add(name.trim())
  }
  return { options: given, named }
}

/** What a fair bucket adds to a request: its class, its flow, and its flow's cap where the config
 * says it (a weight above it could never be admitted). A throwing or invalid priority() or flow() is
 * logged once per kind of failure (a hostile header would otherwise write a line per request) and
 * takes the default. Exported for its tests. */
export function fairRequests<Req>(
  options: SemaphoreMiddlewareOptions<Req>,
  overload: OverloadOptions,
  logger: Logger,
): (req: Req) => FairRequest & { cap?: number | undefined } {
  const { priority: priorityFn, flow: flowFn } = options
  const said = new Set<string>()
  const once = (kind: string, message: string, meta: Record<string, unknown>) => {
    if (said.has(kind)) return
    said.add(kind)
    logger.error(`tollgate: ${message} (said once)`, meta)
  }
  const priorityOf = (req: Req): number => {
    if (!priorityFn) return DEFAULT_PRIORITY
    let answer: unknown
    try {
      answer = priorityFn(req)
    } catch (error) {
      once('priority threw', "priority() threw; counting the request as 'standard'", { error })
      return DEFAULT_PRIORITY
    }
    try {
      return priorityNumber(answer as never)
    } catch {
      once('priority invalid', "priority() returned no class; counting the request as 'standard'", {
        priority: answer,
      })
      return DEFAULT_PRIORITY
    }
  }
  const flowOf = (req: Req): string | undefined => {
    if (!flowFn) return undefined
    let answer: unknown
    try {
      answer = flowFn(req)
    } catch (error) {
      once('flow threw', 'flow() threw; counting the request to the default flow', { error })
      return undefined
    }
    if (answer === undefined || answer === null) return undefined
    if (typeof answer !== 'string' && typeof answer !== 'number') {
      once('flow invalid', 'flow() returned no string; counting the request to the default flow', {
        flow: answer,
      })
      return undefined
    }
    // Trimmed, and a name past 256 characters hashed: a hostile header neither fails nor grows.
    const name = normalizeKey(answer)
    return name === DEFAULT_BUCKET ? undefined : name
  }
  const { flowMax } = overload
  const capOf = (flow: string | undefined): number | undefined => {
    if (flow === undefined || flowMax === undefined) return undefined
    let cap: unknown
    if (typeof flowMax === 'number') cap = flowMax
    else if (typeof flowMax === 'function') {
      try {
        cap = flowMax(flow)
      } catch {
        return undefined // the semaphore says it
      }
    } else cap = Object.hasOwn(flowMax, flow) ? flowMax[flow] : undefined
    return typeof cap === 'number' && Number.isInteger(cap) && cap >= 1 ? cap : undefined
  }
  return (req) => {
    const flow = flowOf(req)
    return { priority: priorityOf(req), flow, cap: capOf(flow) }
  }
}

// The one place the middleware hands `overload` to a bucket's semaphore and a request's class and
// flow to its acquire (the other acquire options pass through the Gate as they always did).

/** A bucket semaphore's options with `overload`. */
function fairSemaphoreOptions(
  options: { permits: number; ttlMs: number; acquireTimeoutMs: number },
  overload: OverloadOptions,
): SemaphoreOptions {
  return { ...options, overload }
}

/** acquireNow() in a fair queue: the store grants at once only when nobody waits and the flow is
 * under its cap. */
function fairAcquireNow(gate: Semaphore, weight: number, fair: FairRequest): Lease | undefined {
  return acquireNow(gate, weight, { priority: fair.priority, flow: fair.flow })
}

/** How an adapter reads the method and path of its request type. */
export interface RequestShape<Req> {
  method(req: Req): string
  path(req: Req): string
}

/** Options of rwlock(), validated once: reads share, writes exclude, per resource. */
export function rwlockAdmission<Req>(
  options: RwlockMiddlewareOptions<Req>,
  shape: RequestShape<Req>,
): Admission<Req> {
  isPlainObjectOrUndefined('options', options)
  const opts = options ?? {}
  rejectUnknownOptions(opts, ['resource', 'readMethods'])
  const resource = opts.resource
  if (resource !== undefined && typeof resource !== 'function') {
    throw new ConfigError('resource', 'a function', resource)
  }
  const readMethods = opts.readMethods ?? ['GET', 'HEAD', 'OPTIONS']
  if (
    !Array.isArray(readMethods) ||
    !readMethods.every((m) => typeof m === 'string' && /^[A-Za-z]+$/.test(m))
  ) {
    throw new ConfigError('readMethods', 'an array of HTTP method names', readMethods)
  }
  const reads = new Set(readMethods.map((m) => m.toUpperCase()))
  const config = resolveCommon(opts, 'rwlock')
  parseLockOptions('rw', config.store, config.name, { ttlMs: config.ttlMs }) // as every bucket's lock gets them
  const locks = new GateCache<ReadWriteLock>((key) =>
    bucketReadWriteLock(config.store, bucketName(config.name, key), {
      ttlMs: config.ttlMs,
      acquireTimeoutMs: Number.POSITIVE_INFINITY,
    }),
  )
  const admission = new Admission(config, (req) => {
    let key: string
    try {
      key = resource ? normalizeKey(resource(req)) : normalizePath(shape.path(req))
    } catch (error) {
      config.logger.warn('tollgate: resource() threw; using the default bucket', { error })
      key = DEFAULT_BUCKET
    }
    const lock = locks.get(key)
    const side = reads.has(shape.method(req).toUpperCase()) ? lock.read : lock.write
    return {
      key,
      gate: { permits: undefined, acquire: side.acquire, tryAcquire: () => side.tryAcquire() },
      keyed: true,
      weight: 1,
    }
  })
  admission.lockOf = (key) => locks.get(key)
  return admission
}
