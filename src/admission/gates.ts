// Buckets: a gate (a semaphore, or one side of a read/write lock) per key, created on first use and
// evicted past a bound; and the two admissions the middleware and the gateway build from options.
import { ConfigError } from '../core/errors.js'
import { isPlainObjectOrUndefined, parseLockOptions, positiveInt } from '../core/options.js'
import { bucketReadWriteLock, type ReadWriteLock } from '../primitives/rwlock.js'
import {
  acquireNow,
  adaptiveHome,
  adaptiveLimitOf,
  bucketSemaphore,
  type Semaphore,
} from '../primitives/semaphore.js'
import { parseAdaptiveOptions } from '../primitives/adaptive/limit.js'
import { MAX_WEIGHT } from '../core/weight.js'
import { Admission } from './admission.js'
import { bucketName, DEFAULT_BUCKET, GLOBAL_KEY, normalizeKey, normalizePath } from './keys.js'
import {
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
  rejectUnknownOptions(options, ['permits', 'key', 'permitsFor', 'weight', 'adaptive'])
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
    return bucketSemaphore(store, bucketName(config.name, key), {
      permits: n,
      ttlMs: config.ttlMs,
      acquireTimeoutMs: Number.POSITIVE_INFINITY,
    })
  })
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
  const admission = new Admission(
    config,
    (req: Req) => {
      if (!keyFn) {
        const gate = gates.get(GLOBAL_KEY)
        return { key: GLOBAL_KEY, gate, keyed: false, weight: weightIn(req, gate) }
      }
      let key: string
      try {
        key = normalizeKey(keyFn(req))
        // A client's key '*' must not land in the bucket of an unkeyed semaphore of the same name.
        if (key === GLOBAL_KEY) key = '%2A'
      } catch (error) {
        config.logger.warn('tollgate: key() threw; using the default bucket', { error })
        key = DEFAULT_BUCKET
      }
      const gate = gates.get(key)
      return { key, gate, keyed: true, weight: weightIn(req, gate) }
    },
    (gate, weight) => acquireNow(gate as Semaphore, weight),
    keepAliveMs,
  )
  admission.semaphoreOf = (key) => gates.get(key)
  if (adaptive)
    admission.adaptive = adaptiveLimitOf(gates.get(GLOBAL_KEY), adaptive, store, config.logger, config.name)
  return admission
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
  return new Admission(config, (req) => {
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
}
