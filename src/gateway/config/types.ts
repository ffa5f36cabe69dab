// What the gateway runs on: the validated configuration, its defaults, and the error that names every
// bad field. Built from flags and a file by resolve.ts; nothing here reads anything.
import { ConfigError } from '../../core/errors.js'
import type { ResolvedAdaptiveOptions } from '../../primitives/adaptive/options.js'
import { PATH_DEFAULTS, type PathOptions } from '../http/target.js'

export type Per = 'global' | 'route' | 'tenant' | 'ip'
export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent'

/** Which proxies in front are trusted to say who the client is (X-Forwarded-For): false, none; a
 * number, that many hops (`true` in the config and `--trust-proxy` are 1: the proxy the client
 * connected to); a list, the addresses and CIDR ranges of trusted proxies (also `loopback`,
 * `linklocal`, `uniquelocal`), as Express's `trust proxy` and nginx's `set_real_ip_from`. */
export type TrustProxy = false | number | readonly string[]

/** How the gateway's own log lines are written: one JSON object per line, or pino-pretty's lines for
 * a person at a terminal. */
export type LogFormat = 'json' | 'pretty'

export interface ConcurrencyConfig {
  /** Permits per bucket. */
  permits: number
  /** global: one bucket shared by every route that says global; route: one per route; tenant: one per
   * value of `tenantHeader`; ip: one per client address. */
  per: Per
  tenantHeader: string
  maxWaitMs: number
  maxQueue: number
  /** Rejection status; undefined = 503 for global/route, 429 for tenant/ip. */
  statusCode: number | undefined
  /** `outage` is 'open' (its older spelling). */
  failOpen: boolean
  /** While Redis is down: closed (503), open (unlimited) or share (this replica's share, in memory). */
  outage: 'closed' | 'open' | 'share'
  /** outage share: each bucket's permits here while Redis is down, for a replica that never saw it. */
  outageShare: number | undefined
  /** Permits of particular buckets (tenant ids or addresses). */
  overrides: Readonly<Record<string, number>>
  /** Permit keep-alive: a lease serves this replica's requests of its bucket for up to this long
   * before it goes back to the store (docs/gateway/behaviour.md, "Permit keep-alive"); 0 = off. */
  keepAliveMs: number
  /** The permits one request of the route counts for (an export 5, a health check 1); at most
   * `permits`. Routes of `per: global` share one bucket, each with its own weight. */
  weight: number
  /** An adaptive limit instead of `permits` (docs/adaptive.md); undefined: `permits`. */
  adaptive: ResolvedAdaptiveOptions | undefined
  /** The priority class of the route's requests (docs/gateway/behaviour.md, "Priorities and fair shares");
   * undefined: every request is standard and the bucket is FIFO (unless `flow` is set). */
  priority: PriorityConfig | undefined
  /** The fair share of the route's requests between flows inside its bucket; undefined: none. */
  flow: FlowConfig | undefined
  /** Waiters of the bucket across the fleet at most: past it an arrival evicts a waiter of a strictly
   * lower class, else it is refused (queue_full); 0 = no bound. */
  maxQueued: number
}

/** Where a request's priority class (0..7, core/fair.ts) comes from: the header when trusted and
 * readable, else the tenant's class, else `default`. */
export interface PriorityConfig {
  /** Lower-case header name whose value (a class name or 0..7) sets the class; undefined: none. */
  header: string | undefined
  /** Class by tenant id (the value of `tenantHeader`), own keys only. */
  tenants: Readonly<Record<string, number>>
  /** The class of a request nothing else classes. */
  default: number
  /** How long a request of a class may wait (class number -> ms); a class not listed waits
   * `maxWaitMs`. */
  maxWaitMs: Readonly<Record<number, number>>
}

/** Where a request's flow comes from, and the flows' weights and caps. */
export interface FlowConfig {
  /** tenant: the value of `tenantHeader`; ip: the client address; header: the value of `header`. */
  from: 'tenant' | 'ip' | 'header'
  /** Lower-case header name for `from: header`. */
  header: string | undefined
  /** Share weight by flow name (1..100; others 1). */
  weights: Readonly<Record<string, number>>
  /** Permits any one flow may hold at once; 0 = no cap. */
  max: number
  /** Permits a named flow may hold at once (over `max`). */
  maxFor: Readonly<Record<string, number>>
}

export interface RwLockConfig {
  /** Resource of a request: the first capture group (or the whole match) of this pattern on the path;
   * undefined = the path itself. */
  resourcePattern: RegExp | undefined
  maxWaitMs: number
  maxQueue: number
  statusCode: number | undefined
  failOpen: boolean
}

export interface RouteConfig {
  name: string
  pathPrefix: string
  /** Upper-case methods; undefined = any. */
  methods: readonly string[] | undefined
  /** Lower-case host without port; undefined = any. */
  host: string | undefined
  upstream: URL
  /** Remove `pathPrefix` from the path sent upstream. */
  stripPrefix: boolean
  /** undefined: this route is not limited. */
  concurrency: ConcurrencyConfig | undefined
  rwlock: RwLockConfig | undefined
  timeouts: TimeoutsConfig
  /** Read request bodies up to this many bytes before admission (larger: 413); 0 = stream them. */
  requestBufferBytes: number
}

/** Every bound on how long a request may hold a permit (G14). */
export interface TimeoutsConfig {
  /** Upstream silent this long (no response headers, or a stalled body) -> 504; also the WebSocket
   * handshake bound. */
  upstreamMs: number
  /** A client that takes no response byte for this long is cut (nginx send_timeout). */
  sendMs: number
  /** No request body byte for this long -> 408 (nginx client_body_timeout). */
  clientBodyMs: number
  /** The whole request (headers and body) must have arrived within this long of its start -> 408. */
  requestMs: number
  /** A WebSocket with no byte either way for this long is closed. */
  websocketIdleMs: number
}

/** TLS to Redis: PEM text (read from the files the config names), and the name to verify. */
export interface RedisTlsConfig {
  ca: string | undefined
  cert: string | undefined
  key: string | undefined
  servername: string | undefined
}

/** How to reach Redis beyond its address: a password (from a file or the environment, so never in
 * `ps`; it wins over one in the URL) and TLS (also on for rediss:// URLs). */
export interface RedisAuth {
  password: string | undefined
  tls: RedisTlsConfig | undefined
}

export type StoreConfig =
  | { kind: 'memory' }
  | ({ kind: 'redis'; url: string } & RedisAuth)
  | ({ kind: 'cluster'; urls: readonly string[] } & RedisAuth)
  | ({ kind: 'sentinel'; sentinels: readonly { host: string; port: number }[]; name: string } & RedisAuth)

export interface GatewayConfig {
  host: string
  port: number
  /** The admin listener (/metrics, /healthz, /readyz, /limits); undefined = none. `token`: the bearer
   * token the /limits API asks for (required for it when `host` is not a loopback address). */
  admin: { host: string; port: number; token: string | undefined } | undefined
  store: StoreConfig
  /** Prefix of every Redis key. */
  prefix: string
  commandTimeoutMs: number
  ttlMs: number
  shutdownGraceMs: number
  logLevel: LogLevel
  /** The proxies trusted to say who the client is (per: ip, the access log, and whether the
   * X-Forwarded-* headers that came in are kept and extended upstream). */
  trustProxy: TrustProxy
  logFormat: LogFormat
  /** The lean HTTP paths (docs/gateway/internals.md, "Lean paths"): on by default; false serves every request
   * through Node's http.Server and undici only. */
  lean: boolean
  /** How request paths are made canonical before routing (docs/gateway/behaviour.md, "Paths"). */
  paths: PathOptions
  /** Share of successful (status < 400) requests written to the access log; the others always are. */
  accessLogSample: number
  /** The send bound of what the gateway answers before a route is known (400, 404): the defaults'
   * (a route's own bounds its answers once it is known). */
  sendTimeoutMs: number
  /** Matched in order: the first route that matches a request serves it. */
  routes: readonly RouteConfig[]
}

/** Defaults of every setting, also what `--help` and docs/gateway.md print. */
export const GATEWAY_DEFAULTS = Object.freeze({
  host: '127.0.0.1',
  port: 8080,
  adminHost: '127.0.0.1',
  adminPort: 9090,
  prefix: 'tollgate',
  sentinelName: 'mymaster',
  accessLogSample: 1,
  commandTimeoutMs: 2000,
  ttlMs: 30_000,
  shutdownGraceMs: 10_000,
  logLevel: 'info' as LogLevel,
  trustProxy: false as TrustProxy,
  logFormat: 'json' as LogFormat,
  lean: true,
  permits: 10,
  per: 'global' as Per,
  tenantHeader: 'x-tenant-id',
  maxWaitMs: 1000,
  maxQueue: 100,
  failOpen: false,
  keepAliveMs: 0,
  upstreamTimeoutMs: 30_000,
  sendTimeoutMs: 60_000,
  clientBodyTimeoutMs: 10_000,
  requestTimeoutMs: 60_000,
  websocketIdleTimeoutMs: 60_000,
  requestBufferBytes: 0,
  mergeSlashes: PATH_DEFAULTS.mergeSlashes,
  escapedSlashes: PATH_DEFAULTS.escapedSlashes,
})

/** The problems found while resolving a config, each at its path (GatewayConfigError reports them). */
export type Issues = { path: string; message: string }[]

/** A ConfigError carrying every problem found, each as `path: expected ...`. */
export class GatewayConfigError extends ConfigError {
  readonly issues: readonly { path: string; message: string }[]

  constructor(issues: { path: string; message: string }[]) {
    super(issues[0]?.path ?? 'config', issues[0]?.message ?? 'a valid configuration')
    this.issues = issues
    this.message = issues.map((issue) => `${issue.path}: ${issue.message}`).join('\n')
  }
}
