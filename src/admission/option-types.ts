// The options of semaphore() and rwlock() as an application writes them (for the middleware and the
// gateway alike), and what they hand back to it: the request's TollgateInfo and a Rejection.
import type { Lease } from '../core/client/lease.js'
import type { Priority, PRIORITY_CLASSES } from '../core/fair.js'
import type { Store } from '../core/protocol/store.js'
import type { AdaptiveOptions } from '../primitives/adaptive/options.js'
import type { OverloadOptions } from '../primitives/overload.js'

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

export type OutageMode = 'closed' | 'open' | 'share'
