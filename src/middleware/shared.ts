import { createHash } from 'node:crypto'
import { AcquireTimeoutError, ConfigError } from '../core/errors.js'
import type { Lease } from '../core/lease.js'
import { createMemoryStore } from '../core/memory-store.js'
import { defined, isPlainObjectOrUndefined, nonEmptyString, positiveInt } from '../core/options.js'
import type { Store } from '../core/store.js'
import { type StoreHealth, storeHealth } from './store-health.js'
import { createReadWriteLock, type ReadWriteLock } from '../primitives/rwlock.js'
import { createSemaphore, type Semaphore } from '../primitives/semaphore.js'

/** Where log lines go; `console` fits, so do pino and winston. Default: silent. */
export interface Logger {
  warn(message: string, meta?: Record<string, unknown>): void
  error(message: string, meta?: Record<string, unknown>): void
}

/** What a handler sees as `req.tollgate` (Express) or `ctx.state.tollgate` (Koa). */
export interface TollgateInfo {
  /** The policy name (the `name` option). */
  name: string
  /** The bucket this request was counted in (global: '*'). */
  key: string
  /** Permits of the bucket (undefined for a read/write lock). */
  permits: number | undefined
  /** Fencing token of the held permit (G7); undefined when the request passed without one
   * (failOpen, dryRun). Forward it to downstreams that can reject stale holders. */
  fencingToken: number | undefined
  /** The lease itself, e.g. to watch `lease.signal`; undefined without a permit. */
  lease: Lease | undefined
  /** How long the request waited for its permit, ms. */
  waitedMs: number
}

export type RejectReason = 'queue_full' | 'timeout' | 'store_unavailable'

export interface Rejection {
  reason: RejectReason
  status: number
  retryAfterS: number
  key: string
  permits: number | undefined
}

export type OnLost = 'log' | 'abort' | ((info: TollgateInfo, error: Error) => void)

/** Options shared by `semaphore()` and `rwlock()`, for Express and Koa alike. */
export interface CommonOptions<Req> {
  /** Store shared by every instance that must share limits (createRedisStore). Default: one in-memory
   * store per process: limits then hold for this process only. */
  store?: Store
  /** Policy name: part of every key and of the RateLimit headers. Letters, digits, `._:/-`.
   * @default 'default' */
  name?: string
  /** How long a request may wait in the fair queue for a permit before it is rejected. 0 = never wait.
   * @default 1000 */
  maxWaitMs?: number
  /** At most this many requests of one bucket wait in this process; more are rejected at once.
   * @default 100 */
  maxQueue?: number
  /** Lease length; renewed automatically while the response is in flight. @default 30000 */
  ttlMs?: number
  /** Status for rejections. Default: 503 for a global cap, 429 for a keyed one. */
  statusCode?: number
  /** When the store fails or does not answer: true lets the request through (logged once per burst,
   * counted), false rejects with 503. @default false */
  failOpen?: boolean
  /** Compute, count and send headers, but never reject. @default false */
  dryRun?: boolean
  /** Send `RateLimit-Policy` and `RateLimit` (IETF draft) headers. `Retry-After` is always sent on
   * rejection. @default true */
  headers?: boolean
  /** Called before the rejection response is sent; the default response follows unless the callback
   * sent one itself. */
  onRejected?: (req: Req, rejection: Rejection) => void
  /** A held lease was lost (store failover, frozen process): 'log' (default) logs and counts it;
   * 'abort' also destroys the request; a function decides. */
  onLost?: OnLost
  logger?: Logger
}

export interface SemaphoreMiddlewareOptions<Req> extends CommonOptions<Req> {
  /** Permits per bucket (the in-flight cap). */
  permits: number
  /** Chooses the bucket of a request. Default: one global bucket. A missing or empty key goes to the
   * bucket '-' (shared by all requests without one). */
  key?: (req: Req) => string | undefined | null
  /** Per-bucket permits (e.g. a premium tenant); undefined = `permits`. */
  permitsFor?: (key: string) => number | undefined
}

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

export const GLOBAL_KEY = '*'
export const DEFAULT_BUCKET = '-'
/** Keys longer than this (after trimming) are replaced by their digest before any use. */
const MAX_KEY_LENGTH = 256
const MAX_CACHED_GATES = 10_000
const SILENT: Logger = { warn() {}, error() {} }

let defaultStore: Store | undefined
/** The process-wide in-memory store behind every middleware without a `store` option. */
export function processStore(): Store {
  defaultStore ??= createMemoryStore()
  return defaultStore
}

/** Normalise an untrusted key (header value, path, tenant id): first of repeated values, trimmed,
 * empty -> DEFAULT_BUCKET, over 256 chars -> `sha256:<digest>`. Never throws. */
export function normalizeKey(raw: unknown): string {
  let value = Array.isArray(raw) ? raw[0] : raw
  if (typeof value === 'number') value = String(value)
  if (typeof value !== 'string') return DEFAULT_BUCKET
  const trimmed = value.trim()
  if (trimmed.length === 0) return DEFAULT_BUCKET
  if (trimmed.length <= MAX_KEY_LENGTH) return trimmed
  return `sha256:${createHash('sha256').update(trimmed, 'utf8').digest('base64url')}`
}

/** `<policy>:<key>` with ':' and '%' escaped in the key, so no key can name another policy's bucket
 * (policy names cannot contain '%'). */
export function bucketName(policy: string, key: string): string {
  return `${policy}:${key.replace(/[%:]/g, encodeURIComponent)}`
}

export type AdmitResult =
  | { outcome: 'admitted'; info: TollgateInfo; left: number }
  | { outcome: 'passed'; info: TollgateInfo; left: number }
  | { outcome: 'rejected'; rejection: Rejection }

/** Something that hands out leases for one bucket: a semaphore, or one side of a read/write lock. */
export interface Gate {
  /** Permits of the bucket; undefined for a read/write lock (no RateLimit headers then). */
  readonly permits: number | undefined
  acquire(options: { signal: AbortSignal; timeoutMs: number; onQueued: () => boolean | void }): Promise<Lease>
  tryAcquire(): Promise<Lease | undefined>
}

export interface ResolvedConfig<Req> {
  store: Store
  name: string
  maxWaitMs: number
  maxQueue: number
  ttlMs: number
  statusCode: number | undefined
  failOpen: boolean
  dryRun: boolean
  headers: boolean
  onRejected: ((req: Req, rejection: Rejection) => void) | undefined
  onLost: OnLost
  logger: Logger
}

const COMMON_DEFAULTS = Object.freeze({
  name: 'default',
  maxWaitMs: 1000,
  maxQueue: 100,
  ttlMs: 30_000,
  failOpen: false,
  dryRun: false,
  headers: true,
  onLost: 'log' as OnLost,
})

/** Validate the options every middleware shares (ConfigError naming the option). */
export function resolveCommon<Req>(options: CommonOptions<Req>): ResolvedConfig<Req> {
  const config = { ...COMMON_DEFAULTS, ...defined(options) }
  const name = nonEmptyString('name', config.name, 64)
  if (!/^[\w.:/-]+$/.test(name)) throw new ConfigError('name', 'letters, digits and . _ : / - only', name)
  if (!(Number.isInteger(config.maxWaitMs) && config.maxWaitMs >= 0 && config.maxWaitMs <= 600_000)) {
    throw new ConfigError('maxWaitMs', 'an integer from 0 to 600000', config.maxWaitMs)
  }
  const maxQueue = positiveInt('maxQueue', config.maxQueue, 1_000_000)
  const ttlMs = positiveInt('ttlMs', config.ttlMs, 24 * 3600 * 1000)
  const statusCode = config.statusCode
  if (statusCode !== undefined && !(Number.isInteger(statusCode) && statusCode >= 400 && statusCode <= 599)) {
    throw new ConfigError('statusCode', 'an HTTP error status from 400 to 599', statusCode)
  }
  for (const flag of ['failOpen', 'dryRun', 'headers'] as const) {
    if (typeof config[flag] !== 'boolean') throw new ConfigError(flag, 'a boolean', config[flag])
  }
  if (config.onRejected !== undefined && typeof config.onRejected !== 'function') {
    throw new ConfigError('onRejected', 'a function', config.onRejected)
  }
  const onLost = config.onLost
  if (onLost !== 'log' && onLost !== 'abort' && typeof onLost !== 'function') {
    throw new ConfigError('onLost', "'log', 'abort' or a function", onLost)
  }
  const logger = config.logger ?? SILENT
  if (typeof logger.warn !== 'function' || typeof logger.error !== 'function') {
    throw new ConfigError('logger', 'an object with warn() and error()', logger)
  }
  const store = config.store ?? processStore()
  if (typeof store !== 'object' || typeof store.acquire !== 'function') {
    throw new ConfigError('store', 'a store from createRedisStore() or createMemoryStore()', store)
  }
  return {
    store,
    name,
    maxWaitMs: config.maxWaitMs,
    maxQueue,
    ttlMs,
    statusCode,
    failOpen: config.failOpen,
    dryRun: config.dryRun,
    headers: config.headers,
    onRejected: config.onRejected,
    onLost,
    logger,
  }
}

/**
 * Framework-free admission: find the bucket's gate, take a permit at once or wait for it (bounded by
 * maxWaitMs and maxQueue), and turn every failure into a rejection or a fail-open pass. The adapters
 * only move headers and bodies.
 */
export class Admission<Req> {
  readonly counters: AdmissionCounters = {
    admitted: 0,
    rejected: { queue_full: 0, timeout: 0, store_unavailable: 0 },
    failedOpen: 0,
    dryRunRejected: 0,
    lost: 0,
    storeErrors: 0,
    inFlight: 0,
    queued: 0,
  }
  /** Requests of each bucket waiting in the store's queue (not those whose call is on its way). */
  private readonly waiting = new Map<string, number>()
  /** Whether the store is known down (shared by every admission on the store). */
  readonly health: StoreHealth

  constructor(
    readonly config: ResolvedConfig<Req>,
    /** The gate and bucket of a request. */
    private readonly gateFor: (req: Req) => { key: string; gate: Gate; keyed: boolean },
  ) {
    this.health = storeHealth(config.store)
  }

  async admit(req: Req, signal: AbortSignal): Promise<AdmitResult> {
    const started = Date.now()
    const { key, gate, keyed } = this.gateFor(req)
    const info = (lease: Lease | undefined): TollgateInfo => ({
      name: this.config.name,
      key,
      permits: gate.permits,
      fencingToken: lease?.fencingToken,
      lease,
      waitedMs: Date.now() - started,
    })
    const reject = (reason: RejectReason): AdmitResult => {
      if (this.config.dryRun && reason !== 'store_unavailable') {
        this.counters.dryRunRejected++
        return { outcome: 'passed', info: info(undefined), left: 0 }
      }
      this.counters.rejected[reason]++
      const status = reason === 'store_unavailable' ? 503 : (this.config.statusCode ?? (keyed ? 429 : 503))
      const retryAfterS = Math.max(1, Math.ceil(this.config.maxWaitMs / 1000))
      return { outcome: 'rejected', rejection: { reason, status, retryAfterS, key, permits: gate.permits } }
    }

    const storeFailed = (): AdmitResult => {
      this.counters.storeErrors++
      if (this.config.failOpen || this.config.dryRun) {
        this.counters.failedOpen++
        return { outcome: 'passed', info: info(undefined), left: 0 }
      }
      return reject('store_unavailable')
    }
    // The store is known down: answer now, without waiting for another timeout (G14).
    if (this.health.down) {
      this.health.failedFast++
      return storeFailed()
    }

    let lease: Lease | undefined
    let queueFull = false
    let counted = false
    // Counted only once the store put the request in its queue: a request whose call is merely on its
    // way is not waiting for anything.
    const onQueued = () => {
      const waiting = this.waiting.get(key) ?? 0
      if (waiting >= this.config.maxQueue) {
        queueFull = true
        return false
      }
      this.waiting.set(key, waiting + 1)
      this.counters.queued++
      counted = true
      return true
    }
    try {
      if (this.config.maxWaitMs === 0) {
        lease = await gate.tryAcquire()
        if (!lease) return reject('timeout')
      } else {
        try {
          lease = await gate.acquire({ signal, timeoutMs: this.config.maxWaitMs, onQueued })
        } finally {
          if (counted) {
            this.counters.queued--
            const left = (this.waiting.get(key) ?? 1) - 1
            if (left > 0) this.waiting.set(key, left)
            else this.waiting.delete(key)
          }
        }
      }
    } catch (error) {
      if (queueFull) return reject('queue_full')
      if (error instanceof AcquireTimeoutError) return reject('timeout')
      if (signal.aborted) throw error // the client left: nothing to answer
      this.health.failed(error, this.config.logger)
      return storeFailed()
    }
    this.counters.admitted++
    this.counters.inFlight++
    // Permits left right after this admission (unknown holders: a hand-over from a full queue, so 0).
    const left = gate.permits === undefined ? 0 : gate.permits - (lease.holders ?? gate.permits)
    return { outcome: 'admitted', info: info(lease), left: Math.max(0, left) }
  }

  /** Call once per admitted request when its response is done (finish or abort). Never throws. */
  release(info: TollgateInfo): void {
    if (!info.lease) return
    this.counters.inFlight--
    info.lease.release().catch((error: unknown) => {
      // The lease expires on its own; nothing is stuck.
      this.config.logger.warn('tollgate: release failed', { name: this.config.name, error })
    })
  }

  /** Call the onRejected hook; a throwing hook is logged, never allowed to crash the process. */
  notifyRejected(req: Req, rejection: Rejection): void {
    try {
      this.config.onRejected?.(req, rejection)
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
        onLost(info, error)
      } catch (hookError) {
        logger.error('tollgate: onLost threw', { error: hookError })
      }
      return false
    }
    logger.warn('tollgate: lease lost while the request was in flight', { name: info.name, key: info.key })
    return onLost === 'abort'
  }

  /** Headers for an admitted or passed request. */
  policyHeaders(name: string, permits: number | undefined, left: number): Record<string, string> {
    if (!this.config.headers || permits === undefined) return {}
    return {
      'RateLimit-Policy': `"${name}";q=${permits};qu="concurrent-requests"`,
      RateLimit: `"${name}";r=${left}`,
    }
  }

  /** Status, headers and JSON body of a rejection. */
  rejectionResponse(rejection: Rejection): { status: number; headers: Record<string, string>; body: string } {
    const headers: Record<string, string> = {
      'Retry-After': String(rejection.retryAfterS),
      'Content-Type': 'application/json; charset=utf-8',
      ...this.policyHeaders(this.config.name, rejection.permits, 0),
    }
    const body = JSON.stringify({
      error:
        rejection.reason === 'store_unavailable' ? 'limiter_unavailable' : 'too_many_concurrent_requests',
      reason: rejection.reason,
      retryAfterSeconds: rejection.retryAfterS,
    })
    return { status: rejection.status, headers, body }
  }
}

/** Gates per bucket, created on first use and evicted least-recently-used past a bound, so a flood of
 * tenant ids costs bounded memory. Evicting a gate drops nothing: leases live in the store. */
export class GateCache<G> {
  private readonly gates = new Map<string, G>()
  constructor(private readonly create: (key: string) => G) {}

  get(key: string): G {
    let gate = this.gates.get(key)
    if (gate) {
      this.gates.delete(key)
    } else {
      gate = this.create(key)
      if (this.gates.size >= MAX_CACHED_GATES) this.gates.delete(this.gates.keys().next().value as string)
    }
    this.gates.set(key, gate)
    return gate
  }
}

/** Options of semaphore(), validated once; returns the framework-free admission. */
export function semaphoreAdmission<Req>(input: number | SemaphoreMiddlewareOptions<Req>): Admission<Req> {
  const options: SemaphoreMiddlewareOptions<Req> = typeof input === 'number' ? { permits: input } : input
  if (typeof options !== 'object' || options === null) {
    throw new ConfigError('options', 'a number of permits or an options object', input)
  }
  isPlainObjectOrUndefined('options', options)
  const permits = positiveInt('permits', options.permits, 1_000_000)
  const keyFn = options.key
  if (keyFn !== undefined && typeof keyFn !== 'function') throw new ConfigError('key', 'a function', keyFn)
  const permitsFor = options.permitsFor
  if (permitsFor !== undefined && typeof permitsFor !== 'function') {
    throw new ConfigError('permitsFor', 'a function', permitsFor)
  }
  const config = resolveCommon(options)
  // Validate the lock options once (throws ConfigError) with a probe name.
  createSemaphore(config.store, config.name, { permits, ttlMs: config.ttlMs })
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
    return createSemaphore(config.store, bucketName(config.name, key), {
      permits: n,
      ttlMs: config.ttlMs,
      acquireTimeoutMs: Number.POSITIVE_INFINITY,
    })
  })
  return new Admission(config, (req) => {
    if (!keyFn) return { key: GLOBAL_KEY, gate: gates.get(GLOBAL_KEY), keyed: false }
    let key: string
    try {
      key = normalizeKey(keyFn(req))
    } catch (error) {
      config.logger.warn('tollgate: key() threw; using the default bucket', { error })
      key = DEFAULT_BUCKET
    }
    return { key, gate: gates.get(key), keyed: true }
  })
}

export interface RwlockMiddlewareOptions<Req> extends CommonOptions<Req> {
  /** The resource a request locks. Default: the request path, normalised (dot segments resolved,
   * duplicate and trailing slashes dropped; the query string is not part of it). */
  resource?: (req: Req) => string | undefined | null
  /** Methods that take the read lock; every other method takes the write lock.
   * @default ['GET', 'HEAD', 'OPTIONS'] */
  readMethods?: string[]
}

/** How an adapter reads the method and path of its request type. */
export interface RequestShape<Req> {
  method(req: Req): string
  path(req: Req): string
}

/** Normalise a request path into a resource name: `/docs//42/../42/` -> `/docs/42`. */
export function normalizePath(path: string): string {
  let pathname: string
  try {
    // Concatenated, not resolved against a base: '//host/x' must stay a path, not become a host.
    pathname = new URL(`http://resource.invalid${path.startsWith('/') ? '' : '/'}${path}`).pathname
  } catch {
    return normalizeKey(path)
  }
  const collapsed = pathname.replace(/\/{2,}/g, '/')
  return normalizeKey(collapsed.length > 1 ? collapsed.replace(/\/$/, '') : collapsed)
}

/** Options of rwlock(), validated once: reads share, writes exclude, per resource. */
export function rwlockAdmission<Req>(
  options: RwlockMiddlewareOptions<Req>,
  shape: RequestShape<Req>,
): Admission<Req> {
  isPlainObjectOrUndefined('options', options)
  const opts = options ?? {}
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
  const config = resolveCommon(opts)
  createReadWriteLock(config.store, config.name, { ttlMs: config.ttlMs }) // validates the lock options
  const locks = new GateCache<ReadWriteLock>((key) =>
    createReadWriteLock(config.store, bucketName(config.name, key), {
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
      gate: { permits: undefined, acquire: side.acquire, tryAcquire: side.tryAcquire },
      keyed: true,
    }
  })
}
