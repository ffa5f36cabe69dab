// The gateway: route a request, take its permit (the middleware's framework-free Admission), forward
// it with the fencing token, release the permit exactly once when the response closes, log and count.
// createGateway() builds everything from a GatewayConfig without listening, so tests run it in-process.
import { once } from 'node:events'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Duplex } from 'node:stream'
import { Cluster, Redis } from 'ioredis'
import { pino, type Logger as PinoLogger } from 'pino'
import { createMemoryStore } from '../core/memory-store.js'
import { createRedisStore } from '../core/redis-store.js'
import type { Store } from '../core/store.js'
import {
  type Admission,
  type AdmitResult,
  type Logger,
  normalizeKey,
  normalizePath,
  type Rejection,
  rwlockAdmission,
  semaphoreAdmission,
  type TollgateInfo,
} from '../middleware/shared.js'
import type { ConcurrencyConfig, GatewayConfig, RouteConfig, RwLockConfig } from './config.js'
import { createMetrics, type GatewayMetrics, statusClass } from './metrics.js'
import { createProxy, type UpstreamError } from './proxy.js'
import { whenLost } from '../core/lease.js'

export const FENCING_HEADER = 'x-tollgate-fencing-token'
const FORWARDED_HEADERS = ['x-forwarded-for', 'x-forwarded-host', 'x-forwarded-port', 'x-forwarded-proto']
const READY_TIMEOUT_MS = 1000
const UPGRADE_END_GRACE_MS = 1000
/** The abort reason of a request whose response closed (one object: no stack captured per request). */
const RESPONSE_CLOSED = new Error('response closed')
const REDIS_ERROR_LOG_WINDOW_MS = 10_000

export interface GatewayOptions {
  /** Where logs go. Default: pino at `config.logLevel` on stderr. */
  logger?: PinoLogger
  /** Export Node process metrics (CPU, memory, event loop) on /metrics too. @default true */
  processMetrics?: boolean
}

export interface Gateway {
  readonly config: GatewayConfig
  /** The proxy listener (not listening until listen()). */
  readonly server: http.Server
  /** The admin listener (/metrics, /healthz, /readyz), if configured. */
  readonly admin: http.Server | undefined
  readonly metrics: GatewayMetrics
  readonly logger: PinoLogger
  /** Start both listeners; resolves with their URLs (the real ports when 0 was configured). */
  listen(): Promise<{ url: string; adminUrl: string | undefined }>
  /** True while not shutting down and the store answers (what /readyz says). */
  ready(): Promise<boolean>
  /** Graceful shutdown: stop accepting, let in-flight requests finish (up to shutdownGraceMs, then cut
   * them), release every permit, close the store. Idempotent. */
  close(): Promise<void>
}

/** A route with what serving it needs: its admissions, taken in order (rwlock, then concurrency). */
interface LiveRoute {
  config: RouteConfig
  admissions: Admission<http.IncomingMessage>[]
}

/** Per-request state, from arrival to the response's close. */
interface Exchange {
  route: LiveRoute | undefined
  started: number
  admittedAt: number | undefined
  waitMs: number
  /** Leases held right now, with the admission each came from. */
  held: { admission: Admission<http.IncomingMessage>; info: TollgateInfo }[]
  /** Counted in tollgate_requests_in_flight. */
  inFlight: boolean
  /** Waiting in admitChain(): a close must abort the wait. */
  admitting: boolean
  upstreamError: UpstreamError | undefined
}

/** What admitting a request through every admission of its route came to. */
type ChainResult =
  | { outcome: 'admitted'; headers: Record<string, string>; fencingToken: number | undefined }
  | { outcome: 'rejected'; admission: Admission<http.IncomingMessage>; rejection: Rejection }
  | { outcome: 'gone' }

export function createGateway(config: GatewayConfig, options: GatewayOptions = {}): Gateway {
  const logger =
    options.logger ?? pino({ level: config.logLevel }, pino.destination({ dest: 2, sync: false }))
  const coreLogger: Logger = {
    warn: (message, meta) => logger.warn(withErr(meta), message),
    error: (message, meta) => logger.error(withErr(meta), message),
  }
  const { store, redis } = openStore(config, logger)
  const metrics = createMetrics(
    config.routes.map((route) => route.name),
    { processMetrics: options.processMetrics ?? true },
  )
  const proxy = createProxy()
  const routes = buildRoutes(config, store, coreLogger)

  let draining = false
  let closing: Promise<void> | undefined
  let active = 0
  let idle: (() => void) | undefined
  const releases = new Set<Promise<void>>()
  const upgraded = new Set<Duplex>()

  const server = http.createServer((req, res) => handle(req, res))
  server.on('upgrade', (req: http.IncomingMessage, socket: Duplex, head: Buffer) =>
    upgrade(req, socket, head),
  )

  function newExchange(route: LiveRoute | undefined): Exchange {
    return {
      route,
      started: performance.now(),
      admittedAt: undefined,
      waitMs: 0,
      held: [],
      inFlight: false,
      admitting: false,
      upstreamError: undefined,
    }
  }

  function handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    active++
    const route = match(routes, req)
    const exchange = newExchange(route)
    // Attached before any await: a client that leaves while queued aborts its wait, and the permits
    // of an admitted request are released exactly once, whatever ends the response.
    const gone = route && route.admissions.length > 0 ? new AbortController() : undefined
    res.once('close', () => {
      if (exchange.admitting) gone?.abort(RESPONSE_CLOSED)
      release(exchange)
      finished(req, res, exchange)
    })
    if (draining) res.setHeader('connection', 'close')
    if (!route) {
      reply(res, 404, 'no route\n')
      return
    }
    sanitize(req)
    if (!gone) {
      forward(req, res, exchange)
      return
    }
    void admitChain(req, exchange, gone.signal, () => res.destroy()).then(
      (result) => {
        if (result.outcome === 'gone') return
        if (result.outcome === 'rejected') {
          if (res.headersSent) return
          const { status, headers, body } = result.admission.rejectionResponse(result.rejection)
          res.writeHead(status, headers)
          res.end(body)
          return
        }
        if (result.fencingToken !== undefined) req.headers[FENCING_HEADER] = String(result.fencingToken)
        for (const [header, value] of Object.entries(result.headers)) res.setHeader(header, value)
        forward(req, res, exchange)
      },
      (error: unknown) => {
        logger.error({ err: error }, 'admission failed')
        if (!res.headersSent) reply(res, 500, 'admission failed\n')
        else res.destroy()
      },
    )
  }

  /**
   * Take the request's leases from every admission of its route, in order. A rejection gives back
   * what was taken before it; so does a client that leaves. Never rejects.
   */
  async function admitChain(
    req: http.IncomingMessage,
    exchange: Exchange,
    signal: AbortSignal,
    abort: () => void,
  ): Promise<ChainResult> {
    const name = exchange.route!.config.name
    let headers: Record<string, string> = {}
    let fencingToken: number | undefined
    metrics.queued.inc({ route: name })
    exchange.admitting = true
    try {
      for (const admission of exchange.route!.admissions) {
        let result: AdmitResult
        try {
          result = await admission.admit(req, signal)
        } catch (error) {
          if (signal.aborted) return { outcome: 'gone' } // the client left while waiting
          release(exchange) // what earlier admissions of the chain took goes back
          throw error // a bug (e.g. a throwing key function): answered with 500 by the caller
        }
        if (result.outcome === 'rejected') {
          const { reason } = result.rejection
          metrics.rejected.inc({ route: name, reason })
          if (reason === 'store_unavailable') metrics.storeErrors.inc({ route: name })
          release(exchange)
          return signal.aborted
            ? { outcome: 'gone' }
            : { outcome: 'rejected', admission, rejection: result.rejection }
        }
        const { info, left } = result
        exchange.waitMs += info.waitedMs
        if (!info.lease) {
          // Passed without a lease: the store failed and failOpen is on.
          metrics.storeErrors.inc({ route: name })
          metrics.failedOpen.inc({ route: name })
        } else {
          exchange.held.push({ admission, info })
          const lease = info.lease
          whenLost(lease, (error) => {
            metrics.leaseLost.inc({ route: name })
            if (admission.lost(info, error)) abort()
          })
          fencingToken ??= info.fencingToken // the first lease taken: the resource lock's, if any
        }
        headers = { ...headers, ...admission.policyHeaders(info.name, info.permits, left) }
        if (signal.aborted) {
          release(exchange) // the client left while we were being admitted
          return { outcome: 'gone' }
        }
      }
    } finally {
      exchange.admitting = false
      metrics.queued.dec({ route: name })
    }
    if (exchange.held.length > 0) {
      metrics.admitted.inc({ route: name })
      metrics.waitSeconds.observe({ route: name }, exchange.waitMs / 1000)
      metrics.inFlight.inc({ route: name })
      exchange.inFlight = true
      exchange.admittedAt = performance.now()
    }
    return { outcome: 'admitted', headers, fencingToken }
  }

  function forward(req: http.IncomingMessage, res: http.ServerResponse, exchange: Exchange): void {
    const route = exchange.route!.config
    if (route.stripPrefix) req.url = stripPrefix(req.url ?? '/', route.pathPrefix)
    proxy.web(req, res, {
      target: route.upstream,
      timeoutMs: route.upstreamTimeoutMs,
      onResponse: (headers) => {
        if (draining) headers.connection = 'close'
      },
      onError: (error) => {
        exchange.upstreamError = error
        metrics.upstreamErrors.inc({ route: route.name, kind: error.kind })
      },
    })
  }

  function upgrade(req: http.IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => {})
    const route = match(routes, req)
    if (!route || draining) {
      // Destroyed once written: a half-closed socket would keep server.close() waiting forever.
      socket.end(rawResponse(route ? 503 : 404), () => socket.destroy())
      return
    }
    sanitize(req)
    upgraded.add(socket)
    const exchange = newExchange(route)
    // A WebSocket holds its permits for its whole life: released when the client socket closes.
    const gone = new AbortController()
    // The client ended its side: the conversation is over even if the upstream never closes its own.
    socket.once('end', () => setTimeout(() => socket.destroy(), UPGRADE_END_GRACE_MS).unref())
    socket.once('close', () => {
      upgraded.delete(socket)
      gone.abort(RESPONSE_CLOSED)
      release(exchange)
    })
    const target = route.config.upstream
    const onError = (error: UpstreamError) => {
      metrics.upstreamErrors.inc({ route: route.config.name, kind: error.kind })
    }
    void admitChain(req, exchange, gone.signal, () => socket.destroy()).then(
      (result) => {
        if (result.outcome === 'gone') return
        if (result.outcome === 'rejected') {
          const { status, retryAfterS } = result.rejection
          socket.end(rawResponse(status, { 'retry-after': String(retryAfterS) }), () => socket.destroy())
          return
        }
        if (result.fencingToken !== undefined) req.headers[FENCING_HEADER] = String(result.fencingToken)
        proxy.ws(req, socket, head, { target, onError })
      },
      (error: unknown) => {
        logger.error({ err: error }, 'admission failed')
        socket.destroy()
      },
    )
  }

  /** Give every held lease back (once) and remember the pending releases so close() can await them. */
  function release(exchange: Exchange): void {
    if (exchange.inFlight) {
      exchange.inFlight = false
      metrics.inFlight.dec({ route: exchange.route!.config.name })
    }
    for (const { admission, info } of exchange.held.splice(0)) {
      admission.release(info) // counts, and logs a failed release; the lease then expires by itself
      const pending = info.lease?.release()
      if (pending) {
        const tracked = pending.catch(() => {}).finally(() => releases.delete(tracked))
        releases.add(tracked)
      }
    }
  }

  function finished(req: http.IncomingMessage, res: http.ServerResponse, exchange: Exchange): void {
    const now = performance.now()
    // 499: the client closed the connection before a response was sent (nginx's convention).
    const status = res.headersSent ? res.statusCode : 499
    const route = exchange.route?.config.name ?? 'unmatched'
    if (exchange.route) metrics.responses.inc({ route, class: statusClass(status) })
    if (logger.isLevelEnabled('info')) {
      logger.info(
        {
          route,
          method: req.method,
          url: req.url,
          status,
          waitMs: round(exchange.waitMs),
          holdMs: exchange.admittedAt === undefined ? 0 : round(now - exchange.admittedAt),
          durationMs: round(now - exchange.started),
          ...(exchange.upstreamError ? { upstreamError: exchange.upstreamError.kind } : {}),
          ...(res.writableFinished ? {} : { aborted: true }),
        },
        'request',
      )
    }
    active--
    if (draining) {
      server.closeIdleConnections()
      if (active === 0) idle?.()
    }
  }

  function sanitize(req: http.IncomingMessage): void {
    // Only the gateway speaks for the lease: a client-sent token must never reach the upstream.
    // (`delete` only what is there: deleting turns the headers object into a slow dictionary.)
    const headers = req.headers
    if (headers[FENCING_HEADER] !== undefined) delete headers[FENCING_HEADER]
    // At the edge, X-Forwarded-* from clients are not to be believed; behind a trusted proxy they chain.
    if (!config.trustProxy) {
      for (const header of FORWARDED_HEADERS) if (headers[header] !== undefined) delete headers[header]
    }
  }

  async function ready(): Promise<boolean> {
    if (draining) return false
    if (!redis) return true
    // While (re)connecting, ioredis queues the PING: it answers once connected, or the timeout says no.
    let timer: NodeJS.Timeout | undefined
    try {
      const answer = await Promise.race([
        redis.ping(),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error('ping timed out')), READY_TIMEOUT_MS)
        }),
      ])
      return answer === 'PONG'
    } catch {
      return false
    } finally {
      clearTimeout(timer)
    }
  }

  const admin = config.admin
    ? http.createServer((req, res) => {
        void adminRoute(req, res).catch((error: unknown) => {
          logger.error({ err: error }, 'admin request failed')
          if (!res.headersSent) reply(res, 500, 'error\n')
        })
      })
    : undefined

  async function adminRoute(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0]
    if (req.method !== 'GET' && req.method !== 'HEAD') return reply(res, 405, 'method not allowed\n')
    if (path === '/metrics') {
      const body = await metrics.registry.metrics()
      res.writeHead(200, { 'content-type': metrics.registry.contentType })
      res.end(body)
      return
    }
    if (path === '/healthz') return reply(res, 200, 'ok\n')
    if (path === '/readyz')
      return (await ready()) ? reply(res, 200, 'ready\n') : reply(res, 503, 'not ready\n')
    reply(res, 404, 'not found\n')
  }

  async function listen(): Promise<{ url: string; adminUrl: string | undefined }> {
    server.listen(config.port, config.host)
    await once(server, 'listening')
    let adminUrl: string | undefined
    if (admin && config.admin) {
      admin.listen(config.admin.port, config.admin.host)
      await once(admin, 'listening')
      adminUrl = urlOf(admin)
    }
    return { url: urlOf(server), adminUrl }
  }

  async function shutdown(): Promise<void> {
    draining = true
    const stopped = server.listening
      ? new Promise<void>((resolve) => server.close(() => resolve()))
      : Promise.resolve()
    server.closeIdleConnections()
    if (active > 0) {
      const drained = new Promise<void>((resolve) => (idle = resolve))
      let timer: NodeJS.Timeout | undefined
      const grace = new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), config.shutdownGraceMs)
      })
      const clean = await Promise.race([drained.then(() => true), grace])
      clearTimeout(timer)
      if (!clean)
        logger.warn({ inFlight: active }, 'shutdown grace period over: closing the remaining connections')
    }
    server.closeAllConnections()
    for (const socket of upgraded) socket.destroy()
    await bounded(stopped, 1000)
    // Every response has closed, so every release has started: wait for them before closing the store.
    await Promise.allSettled([...releases])
    proxy.close()
    if (admin?.listening) {
      admin.closeAllConnections()
      await new Promise<void>((resolve) => admin.close(() => resolve()))
    }
    // Redis may be down: QUIT would wait for a reconnection that never comes. Bounded, then cut.
    await bounded(store.close(), config.commandTimeoutMs)
    if (redis) {
      await bounded(redis.quit(), config.commandTimeoutMs)
      redis.disconnect()
    }
  }

  return {
    config,
    server,
    admin,
    metrics,
    logger,
    listen,
    ready,
    close() {
      closing ??= shutdown()
      return closing
    },
  }
}

function buildRoutes(config: GatewayConfig, store: Store, logger: Logger): LiveRoute[] {
  let global: Admission<http.IncomingMessage> | undefined
  return config.routes.map((route) => {
    const admissions: Admission<http.IncomingMessage>[] = []
    if (route.rwlock) admissions.push(rwlockFor(route, route.rwlock, config, store, logger))
    const concurrency = route.concurrency
    if (concurrency?.per === 'global') {
      global ??= semaphoreFor('global', concurrency, config, store, logger)
      admissions.push(global)
    } else if (concurrency) {
      admissions.push(semaphoreFor(route.name, concurrency, config, store, logger))
    }
    return { config: route, admissions }
  })
}

function semaphoreFor(
  name: string,
  concurrency: ConcurrencyConfig,
  config: GatewayConfig,
  store: Store,
  logger: Logger,
): Admission<http.IncomingMessage> {
  const { per, overrides } = concurrency
  const header = concurrency.tenantHeader
  const key =
    per === 'tenant'
      ? (req: http.IncomingMessage) => normalizeKey(req.headers[header])
      : per === 'ip'
        ? (req: http.IncomingMessage) => normalizeKey(clientAddress(req, config.trustProxy))
        : undefined
  const hasOverrides = Object.keys(overrides).length > 0
  return semaphoreAdmission<http.IncomingMessage>({
    store,
    name,
    permits: concurrency.permits,
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
    logger,
  })
}

/** GET/HEAD/OPTIONS share the read lock of the request's resource, other methods take its write lock. */
function rwlockFor(
  route: RouteConfig,
  rwlock: RwLockConfig,
  config: GatewayConfig,
  store: Store,
  logger: Logger,
): Admission<http.IncomingMessage> {
  const pathOf = (req: http.IncomingMessage) => (req.url ?? '/').split('?')[0] ?? '/'
  const pattern = rwlock.resourcePattern
  return rwlockAdmission<http.IncomingMessage>(
    {
      store,
      name: `${route.name}:rw`,
      // The first capture group (or the whole match) of the pattern; the normalised path otherwise.
      resource: pattern
        ? (req) => {
            const path = pathOf(req)
            const found = pattern.exec(path)
            return found ? (found[1] ?? found[0]) : normalizePath(path)
          }
        : undefined,
      maxWaitMs: rwlock.maxWaitMs,
      maxQueue: rwlock.maxQueue,
      ttlMs: config.ttlMs,
      statusCode: rwlock.statusCode,
      failOpen: rwlock.failOpen,
      logger,
    },
    { method: (req) => req.method ?? 'GET', path: pathOf },
  )
}

function openStore(
  config: GatewayConfig,
  logger: PinoLogger,
): { store: Store; redis: Redis | Cluster | undefined } {
  const storeConfig = config.store
  if (storeConfig.kind === 'memory')
    return { store: createMemoryStore({ prefix: config.prefix }), redis: undefined }
  // No ioredis auto-pipelining: the store already sends the acquires (and releases) of a turn as one
  // script call, and auto-pipelining's per-command bookkeeping then costs more than it saves
  // (npm run bench -- gateway, Redis vs in-memory req/s: 0.94-0.98 without, 0.82-0.83 with).
  let redis: Redis | Cluster
  if (storeConfig.kind === 'redis') {
    redis = new Redis(storeConfig.url, { enableAutoPipelining: false })
  } else {
    const [first] = storeConfig.urls.map((url) => new URL(url))
    redis = new Cluster(
      storeConfig.urls.map((url) => {
        const { hostname, port } = new URL(url)
        return { host: hostname, port: Number(port || 6379) }
      }),
      {
        enableAutoPipelining: false,
        redisOptions: {
          username: first?.username ? decodeURIComponent(first.username) : undefined,
          password: first?.password ? decodeURIComponent(first.password) : undefined,
          tls: first?.protocol === 'rediss:' ? {} : undefined,
        },
      },
    )
  }
  // Connection trouble is reported by the store's errors (503 or failOpen) and /readyz; log it here at
  // most once per window so a Redis outage does not flood the log.
  let loggedAt = 0
  redis.on('error', (error: Error) => {
    const now = Date.now()
    if (now - loggedAt < REDIS_ERROR_LOG_WINDOW_MS) return
    loggedAt = now
    logger.warn({ err: error }, 'redis connection error')
  })
  return {
    store: createRedisStore(redis, { prefix: config.prefix, commandTimeoutMs: config.commandTimeoutMs }),
    redis,
  }
}

/** The first route that matches the path prefix (on a segment boundary), method and host. */
function match(routes: readonly LiveRoute[], req: http.IncomingMessage): LiveRoute | undefined {
  const url = req.url ?? '/'
  const query = url.indexOf('?')
  const path = query === -1 ? url : url.slice(0, query)
  let host: string | undefined
  for (const route of routes) {
    const { pathPrefix, methods } = route.config
    if (methods && !methods.includes(req.method ?? 'GET')) continue
    if (route.config.host) {
      host ??= hostOf(req)
      if (host !== route.config.host) continue
    }
    if (pathPrefix === '/' || path === pathPrefix) return route
    if (path.startsWith(pathPrefix) && (pathPrefix.endsWith('/') || path[pathPrefix.length] === '/'))
      return route
  }
  return undefined
}

function hostOf(req: http.IncomingMessage): string {
  const raw = (req.headers.host ?? '').toLowerCase()
  if (raw.startsWith('[')) return raw.slice(0, raw.indexOf(']') + 1)
  const colon = raw.indexOf(':')
  return colon === -1 ? raw : raw.slice(0, colon)
}

function stripPrefix(url: string, prefix: string): string {
  if (prefix === '/') return url
  const rest = url.slice(prefix.endsWith('/') ? prefix.length - 1 : prefix.length)
  return rest.startsWith('/') ? rest : `/${rest}`
}

function clientAddress(req: http.IncomingMessage, trustProxy: boolean): string | undefined {
  if (trustProxy) {
    const forwarded = req.headers['x-forwarded-for']
    // The rightmost entry is the one our trusted proxy appended; clients can write anything left of it.
    const last = (Array.isArray(forwarded) ? forwarded.at(-1) : forwarded)?.split(',').at(-1)?.trim()
    if (last) return last
  }
  return req.socket.remoteAddress
}

function reply(res: http.ServerResponse, status: number, body: string): void {
  res.writeHead(status, {
    'content-type': 'text/plain; charset=utf-8',
    'content-length': Buffer.byteLength(body),
  })
  res.end(body)
}

function rawResponse(status: number, headers: Record<string, string> = {}): string {
  const lines = [
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? ''}`,
    'connection: close',
    'content-length: 0',
  ]
  for (const [name, value] of Object.entries(headers)) lines.push(`${name}: ${value}`)
  return `${lines.join('\r\n')}\r\n\r\n`
}

function urlOf(server: http.Server): string {
  const { address, port } = server.address() as AddressInfo
  return `http://${address.includes(':') ? `[${address}]` : address}:${port}`
}

function withErr(meta: Record<string, unknown> | undefined): Record<string, unknown> {
  if (!meta || !('error' in meta)) return meta ?? {}
  const { error, ...rest } = meta
  return { ...rest, err: error }
}

/** Wait for `work` at most `ms`; its failure or lateness is not an error here. */
async function bounded(work: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined
  await Promise.race([
    work.catch(() => {}),
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, ms)
    }),
  ])
  clearTimeout(timer)
}

function round(ms: number): number {
  return Math.round(ms * 10) / 10
}
