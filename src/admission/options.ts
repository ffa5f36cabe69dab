// The options of semaphore() and rwlock() (for the middleware and the gateway alike), validated once
// over frozen defaults into the fully-required config an admission runs on.
import type { OverloadOptions } from '../primitives/overload.js'
import { ConfigError } from '../core/errors.js'
import { MAX_PRIORITY, MIN_PRIORITY, PRIORITY_CLASSES, type Priority } from '../core/fair.js'
import { createMemoryStore } from '../core/memory/store.js'
import { defined, nonEmptyString, positiveInt, rejectUnknown, storeOption } from '../core/options.js'
import type { Store } from '../core/protocol/store.js'
import type { AdaptiveOptions } from '../primitives/adaptive/options.js'
import type { Lease } from '../core/client/lease.js'

/** Where log lines go; `console` fits, so do pino and winston. Default: silent. */
export interface Logger {
  warn(message: string, meta?: Record<string, unknown>): void
  error(message: string, meta?: Record<string, unknown>): void
  /** Used where given (an adaptive limit's changes); warn() otherwise. */
  info?(message: string, meta?: Record<string, unknown>): void
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
   * (failOpen, dryRun), and under the gateway's permit keep-alive (a permit then serves several
   * requests). Forward it to downstreams that can reject stale holders. */
  fencingToken: number | undefined
  /** The lease itself, e.g. to watch `lease.signal`; undefined without a permit. */
  lease: Lease | undefined
  /** How long the request waited for its permit, ms. */
  waitedMs: number
  /** The permits the request counts for (the `weight` option; 1 by default). */
  weight: number
  /** Under an adaptive limit: when the request was admitted (performance.now()), what its latency
   * is measured from. */
  admittedAt?: number | undefined
  /** Under an adaptive limit: its sample was taken (Admission.measured()). */
  sampled?: boolean | undefined
  /** `outage: 'share'`: admitted in memory, within this process's share, while the store was down
   * (what the process holds for it meanwhile). */
  local?: { readonly key: string; readonly weight: number } | undefined
}

/** Why a request was rejected: `busy`, no permit was free and the request was not to wait
 * (`maxWaitMs: 0`); `timeout`, it waited `maxWaitMs` without one; `queue_full`, `maxQueue` requests of
 * its bucket were waiting already (or, with `overload.maxQueued`, the fleet's queue was full of
 * requests to be served before it); `store_unavailable`, the store failed and `failOpen` is off;
 * `shed`, it was waiting when a request of a higher priority class took its place in a full queue
 * (docs/middleware.md, "Overload"). */
export const REJECT_REASONS = ['busy', 'timeout', 'queue_full', 'store_unavailable', 'shed'] as const
export type RejectReason = (typeof REJECT_REASONS)[number]

export interface Rejection {
  reason: RejectReason
  status: number
  retryAfterS: number
  key: string
  permits: number | undefined
}

export type OnLost = 'log' | 'abort' | ((info: TollgateInfo, error: Error) => void)

/** Which RateLimit header fields (draft-ietf-httpapi-ratelimit-headers) to send:
 * - 'draft-8': `RateLimit-Policy: "name";q=10;qu="concurrent-requests"` and `RateLimit: "name";r=3`,
 *   named, so stacked middlewares append their entries to one header;
 * - 'draft-7': `RateLimit-Policy: 10` and `RateLimit: limit=10, remaining=3, reset=0` (one policy:
 *   the outermost middleware's is kept);
 * - false: none (`Retry-After` is still sent on rejection). */
export type StandardHeaders = 'draft-7' | 'draft-8' | false

/** The rejection body: a string (sent as text/plain), an object (sent as JSON), or a function of the
 * request and the rejection returning either. Default: a JSON object with `error`, `reason` and
 * `retryAfterSeconds`. */
export type RejectionMessage<Req> =
  string | Record<string, unknown> | ((req: Req, rejection: Rejection) => string | Record<string, unknown>)

/** A prom-client Registry (prom-client is an optional peer: install it to use this). */
export interface MetricsRegistry {
  registerMetric(metric: unknown): void
  getSingleMetric(name: string): unknown
}

/** Options shared by `semaphore()` and `rwlock()`, for Express and Koa alike. */
export interface CommonOptions<Req> {
  /** Store shared by every instance that must share limits (createRedisStore). Default: one in-memory
   * store per process: limits then hold for this process only. */
  store?: Store
  /** Policy name: part of every key and of the RateLimit headers. Letters, digits, `._:/-`.
   * Unnamed middlewares are all 'default' (never numbered by creation order, which differs between
   * processes); name each policy when several share a store. @default 'default' */
  name?: string
  /** How long a request may wait in the fair queue for a permit before it is rejected. 0 = never wait.
   * A semaphore with `priority` may give it per class instead: `{ critical: 2000, sheddable: 250 }`
   * (by class name or number; a missing class takes `standard`'s, else 1000). @default 1000 */
  maxWaitMs?: number | MaxWaitByClass
  /** At most this many requests of one bucket wait in this process; more are rejected at once.
   * @default 100 */
  maxQueue?: number
  /** Lease length; renewed automatically while the response is in flight. @default 30000 */
  ttlMs?: number
  /** Status for rejections. Default: 503 for a global cap, 429 for a keyed one. */
  statusCode?: number
  /** When the store fails or does not answer: true lets the request through (logged once per burst,
   * counted), false rejects with 503. The older spelling of `outage: 'open'`. @default false */
  failOpen?: boolean
  /** What a request gets while the store is down: `'closed'` a 503 at once; `'open'` straight
   * through, unlimited (`failOpen`); `'share'` (semaphore() only) this process's share of the
   * limit, admitted in memory: the limit divided by the replicas last seen using it (at least 1;
   * `outageShare` when it never saw the store). @default 'closed' */
  outage?: OutageMode
  /** `outage: 'share'`: the permits of each bucket this process admits while the store is down if it
   * has never seen the store (it then does not know how many replicas share the limit). @default 1 */
  outageShare?: number
  /** Compute, count and send headers, but never reject. @default false */
  dryRun?: boolean
  /** Which RateLimit headers to send (see StandardHeaders). @default 'draft-8' */
  standardHeaders?: StandardHeaders
  /** Older spelling: `headers: false` is `standardHeaders: false`. */
  headers?: boolean
  /** Requests for which this returns true (or a promise of true) take no permit, e.g. health checks.
   * A throwing skip is logged and the request is admitted as usual. */
  skip?: (req: Req) => boolean | Promise<boolean>
  /** The body of the rejection response (see RejectionMessage). */
  message?: RejectionMessage<Req>
  /** Called before the rejection response is sent; the default response follows unless the callback
   * sent one itself. */
  onRejected?: (req: Req, rejection: Rejection, ...framework: never[]) => void
  /** Send the rejection yourself (express-rate-limit's `handler`); its arguments are the framework's
   * (see each adapter), with the Rejection last. */
  handler?: unknown
  /** Where the adapter puts TollgateInfo: `req[requestPropertyName]` (Express, Fastify), `ctx.state[...]`
   * (Koa), `c.get(...)` (Hono). @default 'tollgate' */
  requestPropertyName?: string
  /** Count this middleware's admissions, rejections (by reason), fail-open passes, lost leases and
   * store errors, and gauge its requests in flight and waiting, on this prom-client Registry (labelled
   * by `name`). */
  metrics?: { registry: MetricsRegistry }
  /** A held lease was lost (store failover, frozen process): 'log' (default) logs and counts it;
   * 'abort' also destroys the request; a function decides. */
  onLost?: OnLost
  logger?: Logger
}

export interface SemaphoreMiddlewareOptions<Req> extends CommonOptions<Req> {
  /** Permits per bucket (the in-flight cap). Required unless `adaptive` is given. */
  permits?: number
  /** An adaptive limit instead of `permits` (docs/adaptive.md): the limit follows the
   * latency and drops of the requests it admits, within `min` and `max`, one limit for every process
   * sharing the store. One bucket (no `key`, `permitsFor` or `weight` beside it). */
  adaptive?: AdaptiveOptions
  /** Chooses the bucket of a request. Default: one global bucket. A missing or empty key goes to the
   * bucket '-' (shared by all requests without one). */
  key?: (req: Req) => string | undefined | null
  /** Per-bucket permits (e.g. a premium tenant); undefined = `permits`. */
  permitsFor?: (key: string) => number | undefined
  /** How many permits a request counts for (an export 5, a health check 1), as Redisson's
   * `acquire(permits)` and Bottleneck's `weight`: a positive integer, at most the bucket's permits
   * and 1000 (more is counted as that). FIFO holds: a heavy request at the head of the queue is not
   * overtaken by light ones. A throwing or invalid answer is logged and counted as 1. @default 1 */
  weight?: (req: Req) => number
  /** The request's priority class (docs/middleware.md, "Overload"): 'critical', 'standard', 'sheddable' or an
   * integer from 0 to 7, higher first; a higher class is always admitted first. A throwing or invalid
   * answer is logged (once per kind) and counted as 'standard'. Implies `overload: {}`. */
  priority?: (req: Req) => Priority
  /** The flow (a tenant, a user) the request counts to inside its bucket: waiters of a class are
   * admitted fairly between flows, by `overload.flowWeights`. A missing or empty answer is the default
   * flow; a throwing or invalid one is logged (once per kind) and takes the default flow. Implies
   * `overload: {}`. */
  flow?: (req: Req) => string | undefined | null
  /** Make each bucket's queue a fair queue (docs/middleware.md, "Overload"): the per-flow weights and caps, and a
   * fleet-wide bound on waiters that sheds the lowest class first. */
  overload?: OverloadOptions
}

/** `maxWaitMs` per priority class, by class name or number (0-7). */
export type MaxWaitByClass = Readonly<Partial<Record<keyof typeof PRIORITY_CLASSES, number>>> &
  Readonly<Record<number, number>>

/** The semaphore's `overload` option (docs/middleware.md, "Overload"): the bucket's queue becomes a fair queue. */
export type { OverloadOptions } from '../primitives/overload.js'

export interface RwlockMiddlewareOptions<Req> extends CommonOptions<Req> {
  /** The resource a request locks. Default: the request path, normalised (dot segments resolved,
   * duplicate and trailing slashes dropped; the query string is not part of it). */
  resource?: (req: Req) => string | undefined | null
  /** Methods that take the read lock; every other method takes the write lock.
   * @default ['GET', 'HEAD', 'OPTIONS'] */
  readMethods?: string[]
}

/** The name of every unnamed middleware. */
export const DEFAULT_NAME = 'default'

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
  /** `name` was given (not a default one). */
  named: boolean
  /** The wait of the 'standard' class (every request's, without per-class waits). */
  maxWaitMs: number
  /** `maxWaitMs` of each class 0-7 (index), when given per class; undefined when one number. */
  maxWaitByClass: readonly number[] | undefined
  maxQueue: number
  ttlMs: number
  statusCode: number | undefined
  /** `outage` is 'open' (failOpen is its older spelling). */
  failOpen: boolean
  outage: OutageMode
  outageShare: number | undefined
  dryRun: boolean
  /** Send RateLimit headers (standardHeaders !== false). */
  headers: boolean
  standardHeaders: StandardHeaders
  skip: ((req: Req) => boolean | Promise<boolean>) | undefined
  message: RejectionMessage<Req> | undefined
  /** The framework's rejection handler (its signature is the adapter's). */
  handler: ((...args: never[]) => unknown) | undefined
  requestPropertyName: string
  metrics: { registry: MetricsRegistry } | undefined
  onRejected: ((req: Req, rejection: Rejection, ...framework: never[]) => void) | undefined
  onLost: OnLost
  logger: Logger
}

const COMMON_DEFAULTS = Object.freeze({
  maxWaitMs: 1000,
  maxQueue: 100,
  ttlMs: 30_000,
  failOpen: false,
  dryRun: false,
  requestPropertyName: 'tollgate',
  onLost: 'log' as OnLost,
})

/** Every option of semaphore() and rwlock() (besides their own): anything else is a mistake. */
const COMMON_KEYS = [
  'store',
  'name',
  'maxWaitMs',
  'maxQueue',
  'ttlMs',
  'statusCode',
  'failOpen',
  'outage',
  'outageShare',
  'dryRun',
  'standardHeaders',
  'headers',
  'skip',
  'message',
  'handler',
  'onRejected',
  'requestPropertyName',
  'metrics',
  'onLost',
  'logger',
]

/** What users of express-rate-limit (and p-limit, Bottleneck) reach for, and what it is here. */
const HINTS: Record<string, string> = {
  keyGenerator: 'tollgate calls it `key`',
  max: 'a concurrency cap is `permits`',
  limit: 'a concurrency cap is `permits`',
  concurrency: 'a concurrency cap is `permits`',
  windowMs: 'tollgate caps requests in flight: there is no window; see `maxWaitMs`',
  legacyHeaders: 'only the IETF RateLimit headers are sent: see `standardHeaders`',
  validate: 'options are always validated at construction',
  requestWasSuccessful: 'every request holds its permit until its response closes',
  skipFailedRequests: 'every request holds its permit until its response closes',
  skipSuccessfulRequests: 'every request holds its permit until its response closes',
}

/** Reject an option no middleware knows, naming it (ConfigError), with a hint for familiar names. */
export function rejectUnknownOptions(options: object, own: readonly string[]): void {
  rejectUnknown(options, [...COMMON_KEYS, ...own], HINTS)
}

/** Names a request object already has (Node's IncomingMessage, Express, Koa's ctx.req, Fastify):
 * `requestPropertyName` must not overwrite them. */
const RESERVED_PROPERTIES = new Set([
  'prototype',
  'headers',
  'rawHeaders',
  'trailers',
  'rawTrailers',
  'socket',
  'connection',
  'url',
  'method',
  'httpVersion',
  'statusCode',
  'statusMessage',
  'complete',
  'aborted',
  'ip',
  'ips',
  'query',
  'params',
  'body',
  'app',
  'res',
  'req',
  'get',
  'header',
  'route',
  'path',
  'baseUrl',
  'originalUrl',
  'hostname',
  'host',
  'protocol',
  'secure',
  'cookies',
  'signedCookies',
  'subdomains',
  'xhr',
  'fresh',
  'stale',
  'server',
  'routeOptions',
  'routerPath',
  'id',
  'log',
  'raw',
  'context',
  'user',
  'session',
  'state',
  'is',
  'accepts',
  'range',
  'emit',
  'on',
  'once',
  'pipe',
  'read',
  'destroy',
])

/** Unnamed middlewares of one kind seen per store: a second one shares the first one's buckets. */
const unnamedOn = new WeakMap<Store, Set<string>>()
const warnedUnnamed = new WeakSet<Store>()
/**
 * Every unnamed middleware is 'default', whatever the order in which a process creates them: the
 * same policy in several apps or processes counts in the same buckets. Two unnamed middlewares of one
 * kind on one store therefore share them; said once per store (TOLLGATE_UNNAMED_POLICY), as
 * express-rate-limit warns when one store serves two limiters.
 */
function noteUnnamed(store: Store, kind: string): void {
  let kinds = unnamedOn.get(store)
  if (!kinds) unnamedOn.set(store, (kinds = new Set()))
  const second = kinds.has(kind)
  kinds.add(kind)
  if (!second || warnedUnnamed.has(store)) return
  warnedUnnamed.add(store)
  process.emitWarning(
    `tollgate: two ${kind} middlewares without a \`name\` share one store, so they count in the same ` +
      'buckets ("default"). Fine if they are one policy mounted in several apps; otherwise give each ' +
      'its own `name`.',
    { code: 'TOLLGATE_UNNAMED_POLICY' },
  )
}

const MAX_WAIT_MS = 600_000

/** `maxWaitMs` by class ({ critical: 2000, sheddable: 250 }, or by number): each class's wait, a
 * missing class taking standard's, else the default. */
function parseMaxWaitByClass(value: object): number[] {
  if (Array.isArray(value))
    throw new ConfigError('maxWaitMs', 'a number, or an object by priority class', value)
  const given = new Map<number, number>()
  for (const [key, wait] of Object.entries(value)) {
    const priority = Object.hasOwn(PRIORITY_CLASSES, key)
      ? PRIORITY_CLASSES[key as keyof typeof PRIORITY_CLASSES]
      : /^\d$/.test(key) && Number(key) >= MIN_PRIORITY && Number(key) <= MAX_PRIORITY
        ? Number(key)
        : undefined
    if (priority === undefined)
      throw new ConfigError(
        `maxWaitMs.${key}`,
        {
          message: `Unknown priority class "${key}" in maxWaitMs: the classes are critical, standard, sheddable or 0 to ${MAX_PRIORITY}`,
        },
        wait,
      )
    if (given.has(priority))
      throw new ConfigError(
        `maxWaitMs.${key}`,
        { message: `maxWaitMs gives class ${priority} twice ("${key}")` },
        wait,
      )
    if (!(typeof wait === 'number' && Number.isInteger(wait) && wait >= 0 && wait <= MAX_WAIT_MS))
      throw new ConfigError(`maxWaitMs.${key}`, `an integer from 0 to ${MAX_WAIT_MS}`, wait)
    given.set(priority, wait)
  }
  const standard = given.get(PRIORITY_CLASSES.standard) ?? COMMON_DEFAULTS.maxWaitMs
  const waits: number[] = []
  for (let p = MIN_PRIORITY; p <= MAX_PRIORITY; p++) waits.push(given.get(p) ?? standard)
  return waits
}

/** Validate the options every middleware shares (ConfigError naming the option). `kind` (semaphore,
 * rwlock) tells unnamed middlewares apart for the shared-store warning: their keys never meet. */
export function resolveCommon<Req>(options: CommonOptions<Req>, kind = 'semaphore'): ResolvedConfig<Req> {
  const config = { ...COMMON_DEFAULTS, ...defined(options) }
  const named = config.name !== undefined
  const name = nonEmptyString('name', config.name ?? DEFAULT_NAME, 64)
  if (!/^[\w.:/-]+$/.test(name)) throw new ConfigError('name', 'letters, digits and . _ : / - only', name)
  const maxWaitByClass =
    typeof config.maxWaitMs === 'object' && config.maxWaitMs !== null && kind === 'semaphore'
      ? parseMaxWaitByClass(config.maxWaitMs)
      : undefined
  const maxWaitMs = (maxWaitByClass ? maxWaitByClass[PRIORITY_CLASSES.standard] : config.maxWaitMs) as number
  if (!(Number.isInteger(maxWaitMs) && maxWaitMs >= 0 && maxWaitMs <= MAX_WAIT_MS)) {
    throw new ConfigError(
      'maxWaitMs',
      `an integer from 0 to ${MAX_WAIT_MS}${kind === 'semaphore' ? ', or an object of them by priority class' : ''}`,
      config.maxWaitMs,
    )
  }
  const maxQueue = positiveInt('maxQueue', config.maxQueue, 1_000_000)
  const ttlMs = positiveInt('ttlMs', config.ttlMs, 24 * 3600 * 1000)
  const statusCode = config.statusCode
  if (statusCode !== undefined && !(Number.isInteger(statusCode) && statusCode >= 400 && statusCode <= 599)) {
    throw new ConfigError('statusCode', 'an HTTP error status from 400 to 599', statusCode)
  }
  for (const flag of ['failOpen', 'dryRun'] as const) {
    if (typeof config[flag] !== 'boolean') throw new ConfigError(flag, 'a boolean', config[flag])
  }
  if (config.headers !== undefined && typeof config.headers !== 'boolean')
    throw new ConfigError('headers', 'a boolean', config.headers)
  if (config.headers !== undefined && config.standardHeaders !== undefined)
    throw new ConfigError(
      'headers',
      'not given with standardHeaders (it is its older spelling)',
      config.headers,
    )
  const { outage, outageShare } = resolveOutage(config, kind)
  const standardHeaders: StandardHeaders =
    config.standardHeaders ?? (config.headers === false ? false : 'draft-8')
  if (standardHeaders !== 'draft-7' && standardHeaders !== 'draft-8' && standardHeaders !== false) {
    throw new ConfigError(
      'standardHeaders',
      "'draft-7', 'draft-8' or false (express-rate-limit's true is an older draft: use 'draft-7' or 'draft-8')",
      standardHeaders,
    )
  }
  for (const hook of ['onRejected', 'skip', 'handler'] as const) {
    if (config[hook] !== undefined && typeof config[hook] !== 'function') {
      throw new ConfigError(hook, 'a function', config[hook])
    }
  }
  const message = config.message
  if (
    message !== undefined &&
    typeof message !== 'string' &&
    typeof message !== 'function' &&
    !(typeof message === 'object' && message !== null && !Array.isArray(message))
  ) {
    throw new ConfigError('message', 'a string, an object or a function', message)
  }
  const requestPropertyName = config.requestPropertyName
  if (
    typeof requestPropertyName !== 'string' ||
    !/^[A-Za-z_$][\w$]{0,63}$/.test(requestPropertyName) ||
    requestPropertyName in Object.prototype ||
    RESERVED_PROPERTIES.has(requestPropertyName)
  ) {
    throw new ConfigError(
      'requestPropertyName',
      'a property name (letters, digits, _ and $) that requests of Node, Express, Koa and Fastify do not already use',
      requestPropertyName,
    )
  }
  const metrics = config.metrics
  if (
    metrics !== undefined &&
    (typeof metrics !== 'object' ||
      metrics === null ||
      typeof metrics.registry?.registerMetric !== 'function' ||
      typeof metrics.registry?.getSingleMetric !== 'function')
  ) {
    throw new ConfigError('metrics', 'an object { registry } with a prom-client Registry', metrics)
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
  if (!named) noteUnnamed(store, kind)
  return {
    store,
    name,
    named,
    maxWaitMs,
    maxWaitByClass,
    maxQueue,
    ttlMs,
    statusCode,
    failOpen: outage === 'open',
    outage,
    outageShare,
    dryRun: config.dryRun,
    headers: standardHeaders !== false,
    standardHeaders,
    skip: config.skip,
    message,
    handler: config.handler as ((...args: never[]) => unknown) | undefined,
    requestPropertyName,
    metrics,
    onRejected: config.onRejected,
    onLost,
    logger,
  }
}

export type OutageMode = 'closed' | 'open' | 'share'

/** `outage` and its older spelling `failOpen` (which says 'open' or 'closed'), and `outageShare`. */
function resolveOutage(
  config: { failOpen: boolean; outage?: unknown; outageShare?: unknown },
  kind: string,
): { outage: OutageMode; outageShare: number | undefined } {
  const given = config.outage
  if (given !== undefined && given !== 'closed' && given !== 'open' && given !== 'share')
    throw new ConfigError('outage', "'closed', 'open' or 'share'", given)
  if (given === 'share' && kind !== 'semaphore')
    throw new ConfigError(
      'outage',
      "'closed' or 'open' (a lock shared out in memory while the store is down would no longer exclude: 'share' is semaphore()'s)",
      given,
    )
  if (given !== undefined && config.failOpen && given !== 'open')
    throw new ConfigError('failOpen', `not true beside outage: '${given}' (it is outage: 'open')`, true)
  const outage: OutageMode = given ?? (config.failOpen ? 'open' : 'closed')
  if (config.outageShare !== undefined && outage !== 'share')
    throw new ConfigError('outageShare', "only with outage: 'share'", config.outageShare)
  const outageShare =
    config.outageShare === undefined ? undefined : positiveInt('outageShare', config.outageShare, 1_000_000)
  return { outage, outageShare }
}
