// The options of semaphore() and rwlock() (for the middleware and the gateway alike), validated once
// over frozen defaults into the fully-required config an admission runs on.
import { ConfigError } from '../core/errors.js'
import { createMemoryStore } from '../core/memory/store.js'
import { defined, nonEmptyString, positiveInt, storeOption } from '../core/options.js'
import type { Store } from '../core/protocol/store.js'
import type { Lease } from '../core/client/lease.js'

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

export interface RwlockMiddlewareOptions<Req> extends CommonOptions<Req> {
  /** The resource a request locks. Default: the request path, normalised (dot segments resolved,
   * duplicate and trailing slashes dropped; the query string is not part of it). */
  resource?: (req: Req) => string | undefined | null
  /** Methods that take the read lock; every other method takes the write lock.
   * @default ['GET', 'HEAD', 'OPTIONS'] */
  readMethods?: string[]
}

const SILENT: Logger = { warn() {}, error() {} }

let defaultStore: Store | undefined
/** The process-wide in-memory store behind every middleware without a `store` option. */
export function processStore(): Store {
  defaultStore ??= createMemoryStore()
  return defaultStore
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
  const store = config.store === undefined ? processStore() : storeOption('store', config.store)
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
