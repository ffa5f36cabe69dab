// The gateway, wired: listeners, the shared context, readiness and the graceful shutdown. What happens
// to one request is in plain-request.ts (HTTP) and websocket.ts (Upgrade); createGateway() builds everything
// from a GatewayConfig without listening, so tests run it in-process.
import { once } from 'node:events'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Socket } from 'node:net'
import { pino, type Logger as PinoLogger } from 'pino'
import type { Logger } from '../admission/options.js'
import { GLOBAL_KEY } from '../admission/keys.js'
import { storeHealth } from '../admission/store-health.js'
import { ConfigError, StoreUnavailableError } from '../core/errors.js'
import { rejectUnknown } from '../core/options.js'
import { within } from '../core/timeout.js'
import { createAdminServer } from './ops/admin.js'
import { ANSWER_INTERVAL_MS, sharedAnswer } from './ops/shared-answer.js'
import { VERSION } from './version.js'
import type { GatewayConfig } from './config/index.js'
import { LineBuffer } from './ops/access-log.js'
import { type GatewayContext, PendingCount } from './context.js'
import { createMetrics, type GatewayMetrics } from './ops/metrics.js'
import { createProxy } from './http/proxy.js'
import { breachReporter } from './http/close-contract.js'
import { checkRedisAccess, openStore, timedStore } from './redis.js'
import { buildRoutes } from './routes.js'
import type { ClientRequest, ClientResponse } from './http/client.js'
import { leanFrontEnd } from './http/lean/front-end.js'
import { handleRequest } from './plain-request.js'
import { handleUpgrade } from './websocket.js'

export { FENCING_HEADER } from './http/headers.js'

const READY_TIMEOUT_MS = 1000
/** How long a scrape waits for the store's run-time limits (tollgate_limit_permits). */
const LIMIT_READ_TIMEOUT_MS = 250
/** After the grace period, cut connections get this long to emit 'close' (and release). */
const CLOSE_SETTLE_MS = 2000

export interface GatewayOptions {
  /** Where logs go. Default: pino at `config.logLevel` on stderr. */
  logger?: PinoLogger
  /** Export Node process metrics (CPU, memory, event loop) on /metrics too. @default true */
  processMetrics?: boolean
  /** The lean paths, on or off together or each on its own: the front end serves the common request
   * (HTTP/1.1, no body, no upgrade) on the raw socket (http/lean/front-end.ts), else every connection
   * is Node's http.Server's; the upstream pool sends bodiless requests to http:// upstreams on sockets
   * of our own (http/lean/upstream-pool.ts), else every request goes through undici. `true`/`false`:
   * both; `{ frontEnd, upstream }`: each, a side left out as config.lean has it.
   * @default config.lean (the `lean` field, `--lean on|off`: both sides) */
  lean?: boolean | { frontEnd?: boolean; upstream?: boolean }
}

/** The store at start: 'up'; 'down' (limits without failOpen answer 503 until Redis answers, and
 * /readyz says not ready); 'down, failing open' (every limit lets requests through meanwhile). */
export type StoreState = 'up' | 'down' | 'down, failing open'

export interface Gateway {
  readonly config: GatewayConfig
  /** The proxy listener (not listening until listen()). */
  readonly server: http.Server
  /** The admin listener (/metrics, /healthz, /readyz), if configured. */
  readonly admin: http.Server | undefined
  readonly metrics: GatewayMetrics
  readonly logger: PinoLogger
  /** Check the Redis user's permissions (RedisAccessError when it lacks one), then start both
   * listeners; resolves with their URLs (the real ports when 0 was configured) and what the store
   * was found to be: up, or down (every request of a limit answered by its outage policy). */
  listen(): Promise<{ url: string; adminUrl: string | undefined; store: StoreState }>
  /** What /readyz says: not shutting down, and the store answers (or every limit fails open). */
  ready(): Promise<boolean>
  /** Apply a new, already validated config (SIGHUP): routes, limits, overrides and timeouts swap for
   * new requests; in-flight ones keep theirs. Returns the sections that need a restart (kept). */
  reload(next: GatewayConfig): { kept: string[] }
  /** A reload that could not be applied (the running config stays): what the dashboard says. */
  reloadFailed(message: string): void
  /** Graceful shutdown: stop accepting, let in-flight requests and WebSockets finish (up to
   * shutdownGraceMs, then cut them), release every permit, close the store. Idempotent. */
  close(): Promise<void>
  /** Resolves once the log has written what it holds, or failed to (its reader has gone), or after
   * `withinMs`: then the process may exit without losing lines or waiting on a dead reader. */
  logWritten(withinMs: number): Promise<void>
}

/** Under sonic-boom's 16 KB maxWrite: one write call per batch. */
const LOG_BUFFER_BYTES = 16_000
const LOG_FLUSH_MS = 1000

export function createGateway(config: GatewayConfig, options: GatewayOptions = {}): Gateway {
  // Checked before anything opens (a store connection, a log destination).
  checkGatewayOptions(options)
  // The access log leaves in 16 KB batches, at most LOG_FLUSH_MS late (access-log.ts); every other
  // line is written at once, after the access lines before it. Still asynchronous: a stalled log
  // reader never blocks requests. close() and the process's exit (an uncaught exception too) flush; a
  // SIGKILL loses at most the last batch.
  const destination = options.logger ? undefined : pino.destination({ dest: 2, sync: false })
  const accessLines = destination && new LineBuffer((text) => destination.write(text), LOG_BUFFER_BYTES)
  const flusher = accessLines && setInterval(() => accessLines.flush(), LOG_FLUSH_MS).unref()
  // At exit (also after an uncaught exception or a process.exit() elsewhere), what the batch holds is
  // written synchronously, as pino does for its own buffer.
  const flushAtExit = () => {
    try {
      accessLines?.flush()
      destination?.flushSync()
    } catch {
      // stderr is gone: nothing left to tell
    }
  }
  if (destination) process.once('exit', flushAtExit)
  const logger =
    options.logger ??
    pino(
      {
        level: config.logLevel,
        hooks: {
          logMethod(args, method) {
            accessLines?.flush()
            method.apply(this, args)
          },
        },
      },
      destination,
    )
  const coreLogger: Logger = {
    warn: (message, meta) => logger.warn(withErr(meta), message),
    error: (message, meta) => logger.error(withErr(meta), message),
    info: (message, meta) => logger.info(withErr(meta), message),
  }
  // Read at scrape time, through `ctx` (routes change on reload) and the store's health.
  const liveRoute = (name: string) => ctx.routes.find((route) => route.config.name === name)
  const metrics = createMetrics(
    config.routes.map((route) => route.name),
    {
      processMetrics: options.processMetrics ?? true,
      queuedOf: (name) =>
        liveRoute(name)?.admissions.reduce((sum, admission) => sum + admission.counters.queued, 0) ?? 0,
      keptOf: (name) => liveRoute(name)?.concurrency?.kept?.size ?? 0,
      // Known down, or no PONG within a short bound: also without traffic to notice an outage.
      storeUp: async () => !redis || (!health.down && (await within(redis.ping(), LIMIT_READ_TIMEOUT_MS)).ok),
      limits: effectiveLimits,
      adaptiveOf: (name) => liveRoute(name)?.concurrency?.adaptive?.status(),
      outageOf: (name) => liveRoute(name)?.concurrency?.outage,
    },
  )
  const opened = openStore(config, logger)
  const redis = opened.redis
  const store = redis ? timedStore(opened.store, metrics.redisSeconds) : opened.store
  const routes = buildRoutes(config, store, coreLogger)
  const lean = leanSides(options.lean, config.lean)
  let settled: (() => void) | undefined
  const ctx: GatewayContext = {
    config,
    routes,
    metrics,
    proxy: createProxy({ lean: lean.upstream }),
    logger,
    accessLog: accessLines && ((line) => accessLines.pushAccess(line)),
    draining: false,
    active: 0,
    releases: new PendingCount(),
    tunnels: new Set(),
    contractBreach: breachReporter(
      (step) => metrics.contractBreaches.inc({ step }),
      (step, message) =>
        logger.error(
          { step },
          `close contract breached: ${message}. A bug of the gateway; later breaches of this step are only counted (tollgate_close_contract_breaches_total)`,
        ),
    ),
    onSettled: () => {
      if (ctx.draining) {
        server.closeIdleConnections()
        if (ctx.active === 0) settled?.()
      }
    },
  }
  const health = storeHealth(store)
  // With every limit failing open, a Redis outage does not stop this replica from serving: it stays
  // ready (otherwise every replica goes unready at once and failOpen is defeated).
  const allFailOpen = () => {
    const admissions = ctx.routes.flatMap((route) => route.admissions)
    return admissions.length > 0 && admissions.every((admission) => admission.config.outage !== 'closed')
  }
  const onRequest = (req: ClientRequest, res: ClientResponse) => handleRequest(ctx, req, res)
  const server = http.createServer(onRequest)
  if (lean.frontEnd) leanFrontEnd(server, onRequest)
  // With a listener, Node leaves `Expect: 100-continue` to us: the 100 goes out only once the request
  // is admitted (plain-request.ts), so a rejected client never uploads its body.
  server.on('checkContinue', onRequest)
  server.on('upgrade', (req, socket, head) => handleUpgrade(ctx, req, socket, head))
  // CONNECT is for forward proxies: answered, never tunnelled (the socket would otherwise just close).
  server.on('connect', (_req: http.IncomingMessage, socket: Socket) => {
    metrics.refused.inc({ reason: 'connect' })
    socket.on('error', () => {})
    socket.end(
      'HTTP/1.1 405 Method Not Allowed\r\nallow: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS\r\nconnection: close\r\ncontent-length: 0\r\n\r\n',
      () => socket.destroy(),
    )
  })

  // One PING a second, however many ask /readyz: while (re)connecting, ioredis queues it; it answers
  // once connected, or the timeout says no.
  const pinged =
    redis &&
    sharedAnswer(ANSWER_INTERVAL_MS, async () => {
      const answer = await within(redis.ping(), READY_TIMEOUT_MS)
      return answer.ok && answer.value === 'PONG'
    })
  async function ready(): Promise<boolean> {
    // What is known here (draining, failing open, the store known down) is never a second old.
    if (ctx.draining) return false
    if (!pinged || allFailOpen()) return true
    if (health.down) return false
    // A drain that began while the PING was awaited shows at once too.
    return (await pinged()) && !ctx.draining
  }

  // tollgate_limit_permits: the effective limit of each route's bucket (the fleet-wide override if
  // one is set, read from the store at scrape time), the configured default for per: tenant/ip.
  async function effectiveLimits(): Promise<{ route: string; permits: number }[]> {
    // Read in parallel under one short deadline, and not at all while the store is known down: a
    // scrape must answer (tollgate_store_up=0 included) well within Prometheus's timeout.
    return Promise.all(
      ctx.routes.flatMap((live) => {
        const concurrency = live.config.concurrency
        const cap = live.concurrency
        if (!concurrency || !cap?.semaphoreOf) return []
        const route = live.config.name
        // An adaptive limit: the one this replica knows (the store's, learnt each window).
        const configured = cap.adaptive?.status().limit ?? concurrency.permits
        if (health.down || (concurrency.per !== 'global' && concurrency.per !== 'route'))
          return [Promise.resolve({ route, permits: configured })]
        return [
          within(cap.semaphoreOf(GLOBAL_KEY).stats(), LIMIT_READ_TIMEOUT_MS).then((stats) => ({
            route,
            permits: stats.ok && stats.value.override !== undefined ? stats.value.override : configured,
          })),
        ]
      }),
    )
  }

  /** When the running config was loaded, and the last reload's outcome (the dashboard shows them). */
  const reloads: { loadedAt: number; last: { at: number; ok: boolean; message: string } | undefined } = {
    loadedAt: Date.now(),
    last: undefined,
  }
  const admin = config.admin
    ? createAdminServer({
        metrics,
        logger,
        ready,
        config: () => ctx.config,
        routes: () => ctx.routes,
        version: VERSION,
        health,
        reloads: () => reloads,
      })
    : undefined

  /**
   * Swap in a new config: validated already (loadConfig), applied at once. Requests in flight keep
   * the route (and leases) they started with; new requests see the new routes, limits, overrides and
   * timeouts. What only a restart can change (listeners, store, prefix) is kept, with a warning.
   */
  function reload(next: GatewayConfig): { kept: string[] } {
    const running = ctx.config
    const kept: string[] = []
    const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b)
    if (next.host !== running.host || next.port !== running.port) kept.push('listen')
    if (
      !same(
        next.admin && { ...next.admin, token: undefined },
        running.admin && { ...running.admin, token: undefined },
      )
    )
      kept.push('admin')
    if (!same(next.store, running.store)) kept.push('redis')
    if (next.prefix !== running.prefix) kept.push('redis.prefix')
    if (next.commandTimeoutMs !== running.commandTimeoutMs) kept.push('redis.commandTimeoutMs')
    if (next.lean !== running.lean) kept.push('lean')
    if (next.logFormat !== running.logFormat) kept.push('logFormat')
    const applied: GatewayConfig = {
      ...next,
      host: running.host,
      port: running.port,
      admin: running.admin && { ...running.admin, token: next.admin?.token },
      store: running.store,
      prefix: running.prefix,
      commandTimeoutMs: running.commandTimeoutMs,
      lean: running.lean,
      logFormat: running.logFormat,
    }
    const nextRoutes = buildRoutes(applied, store, coreLogger)
    metrics.addRoutes(applied.routes.map((route) => route.name))
    const retired = ctx.routes
    ctx.config = applied
    ctx.routes = nextRoutes
    // The old admissions keep no lease for reuse: their kept ones go back now, and requests still on
    // them give theirs straight back when they finish.
    for (const route of retired)
      for (const admission of route.admissions) ctx.releases.track(admission.close())
    logger.level = applied.logLevel
    reloads.loadedAt = Date.now()
    reloads.last = {
      at: reloads.loadedAt,
      ok: true,
      message: kept.length > 0 ? `applied; these need a restart: ${kept.join(', ')}` : 'applied',
    }
    return { kept }
  }

  async function listen(): Promise<{ url: string; adminUrl: string | undefined; store: StoreState }> {
    const unanswered = redis ? await checkRedisAccess(store, redis, config.prefix) : undefined
    if (unanswered !== undefined) {
      // Known down from the start: the first requests are answered by the outage policy at once, as
      // later ones are, instead of each waiting commandTimeoutMs; the probe notices Redis come back.
      const cause = unanswered instanceof Error ? unanswered : new Error(String(unanswered))
      health.failed(
        cause instanceof StoreUnavailableError
          ? cause
          : new StoreUnavailableError(`Redis did not answer: ${cause.message}`, { cause }),
        coreLogger,
      )
      const off = health.onChange((down) => {
        if (down) return
        off()
        if (!ctx.draining) logger.info('tollgate ready: Redis answers')
      })
    }
    server.listen(config.port, config.host)
    await once(server, 'listening')
    let adminUrl: string | undefined
    if (admin && config.admin) {
      admin.listen(config.admin.port, config.admin.host)
      await once(admin, 'listening')
      adminUrl = urlOf(admin)
    }
    const state: StoreState = !health.down ? 'up' : allFailOpen() ? 'down, failing open' : 'down'
    return { url: urlOf(server), adminUrl, store: state }
  }

  /** Resolves when no request or tunnel is open, or after `ms` (false then). */
  function allClosed(ms: number): Promise<boolean> {
    if (ctx.active === 0) return Promise.resolve(true)
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        settled = undefined
        resolve(false)
      }, ms)
      settled = () => {
        clearTimeout(timer)
        settled = undefined
        resolve(true)
      }
    })
  }

  async function shutdown(): Promise<void> {
    ctx.draining = true
    // Permits kept for reuse (permit keep-alive) go back now, and requests still in flight give
    // theirs straight back: the other replicas get them without waiting for the drain.
    const keptBack = Promise.all(ctx.routes.flatMap((route) => route.admissions.map((a) => a.close())))
    const stopped = server.listening
      ? new Promise<void>((resolve) => server.close(() => resolve()))
      : Promise.resolve()
    server.closeIdleConnections()
    // Requests and WebSockets alike get the grace period.
    if (!(await allClosed(ctx.config.shutdownGraceMs))) {
      logger.warn({ open: ctx.active }, 'shutdown grace period over: closing the remaining connections')
    }
    server.closeAllConnections()
    for (const socket of ctx.tunnels) socket.destroy()
    // Cut sockets emit 'close' (which releases their permits) only on a later turn: wait for every one,
    // so no lease is left behind to hold capacity the other replicas need.
    await allClosed(CLOSE_SETTLE_MS)
    await within(stopped, 1000)
    await ctx.releases.settled()
    await within(keptBack, config.commandTimeoutMs) // bounded: Redis may be down
    await within(ctx.proxy.close(), 1000)
    if (admin?.listening) {
      admin.closeAllConnections()
      await new Promise<void>((resolve) => admin.close(() => resolve()))
    }
    clearInterval(flusher)
    accessLines?.flush()
    // Redis may be down: QUIT would wait for a reconnection that never comes. Bounded, then cut.
    await within(store.close(), config.commandTimeoutMs)
    if (redis) {
      await within(redis.quit(), config.commandTimeoutMs)
      redis.disconnect()
    }
  }

  let closing: Promise<void> | undefined
  return {
    server,
    admin,
    metrics,
    logger,
    get config() {
      return ctx.config
    },
    listen,
    ready,
    reload,
    reloadFailed(message) {
      reloads.last = { at: Date.now(), ok: false, message }
    },
    close() {
      closing ??= shutdown()
      return closing
    },
    logWritten(withinMs) {
      accessLines?.flush()
      if (!destination) return Promise.resolve()
      return written(destination, withinMs)
    },
  }
}

/**
 * Resolves once `destination` has written everything it holds ('drain'), or a write failed
 * ('error': pino then stops writing to it, EPIPE included), or after `withinMs`. Exiting before then
 * would leave the lines to the exit handlers' flushSync(), which retries a failed write every 100 ms
 * for ever (sonic-boom 4.2: any error but EAGAIN): a reader that has gone would keep the process.
 */
function written(destination: ReturnType<typeof pino.destination>, withinMs: number): Promise<void> {
  // What sonic-boom holds and whether a write is on the way (its own fields: no public getter). Nothing
  // held, or fields this version lacks: nothing to wait for.
  const pending = destination as unknown as { _len?: unknown; _writing?: unknown }
  if (typeof pending._len !== 'number' || (pending._len === 0 && pending._writing !== true))
    return Promise.resolve()
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer)
      destination.off('drain', done)
      destination.off('error', done)
      resolve()
    }
    const timer = setTimeout(done, withinMs)
    destination.once('drain', done)
    destination.once('error', done)
    destination.flush()
  })
}

/** GatewayOptions as given: unknown keys and values of the wrong type are ConfigErrors naming them. */
function checkGatewayOptions(options: GatewayOptions): void {
  if (typeof options !== 'object' || options === null || Array.isArray(options))
    throw new ConfigError('options', 'an options object, e.g. { lean: false }', options)
  rejectUnknown(options, ['logger', 'processMetrics', 'lean'])
  if (options.processMetrics !== undefined && typeof options.processMetrics !== 'boolean')
    throw new ConfigError('processMetrics', 'true or false', options.processMetrics)
  const lean: unknown = options.lean
  if (lean === undefined || typeof lean === 'boolean') return
  if (typeof lean !== 'object' || lean === null || Array.isArray(lean))
    throw new ConfigError('lean', 'true, false, or { frontEnd?: boolean, upstream?: boolean }', lean)
  rejectUnknown(lean, ['frontEnd', 'upstream'])
  for (const side of ['frontEnd', 'upstream'] as const) {
    const value = (lean as Record<string, unknown>)[side]
    if (value !== undefined && typeof value !== 'boolean')
      throw new ConfigError(`lean.${side}`, 'true or false', value)
  }
}

/** Which lean path runs: GatewayOptions.lean, a side it leaves out as the config's `lean` has it. */
function leanSides(
  option: GatewayOptions['lean'],
  configured: boolean,
): { frontEnd: boolean; upstream: boolean } {
  if (typeof option !== 'object') return { frontEnd: option ?? configured, upstream: option ?? configured }
  return { frontEnd: option.frontEnd ?? configured, upstream: option.upstream ?? configured }
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
