// The admin listener: /metrics (Prometheus), /healthz, /readyz, and /limits, the API that reads every
// route's limits, holders and queue and sets a route's or a bucket's limit for every replica sharing
// the store (Semaphore.setPermits). Loopback by default; bound anywhere else, /limits answers only
// with the bearer token (docs/gateway/operate.md, "Admin API").
import http from 'node:http'
import type { Socket } from 'node:net'
import type { AdaptiveStatus } from '../../primitives/adaptive/limit.js'
import type { Logger as PinoLogger } from 'pino'
import { GLOBAL_KEY, normalizeKey } from '../../admission/keys.js'
import type { GatewayConfig } from '../config/index.js'
import { parseInTurns } from '../http/parse-turns.js'
import { inTurn } from '../http/pipelining.js'
import { capConnections } from './connection-cap.js'
import { HttpError } from './http-error.js'
import {
  decodePart,
  isLoopback,
  json,
  jsonBody,
  metricsText,
  readPermits,
  sameSecret,
  send,
  text,
} from './admin-http.js'
import { ANSWER_INTERVAL_MS, paced, sharedAnswer, sharedAnswers } from './shared-answer.js'
import type { GatewayMetrics } from './metrics.js'
import type { LiveRoute } from '../routes.js'
import { type Access, Dashboard, type DashboardView } from './dashboard.js'
import { dashboardFile } from './dashboard-http.js'
import {
  configuredLimit,
  fairFigures,
  type FairStats,
  fairStats,
  flowState,
  limitInForce,
} from './limit-figures.js'

/** What the admin listener reads from the running gateway (the config and routes change on reload). */
export interface AdminView extends DashboardView {
  readonly metrics: GatewayMetrics
  readonly logger: PinoLogger
  config(): GatewayConfig
  routes(): readonly LiveRoute[]
  ready(): Promise<boolean>
}

/** Buckets listed per route by GET /limits (read by name beyond that), and store reads at once. */
const MAX_LISTED_BUCKETS = 100
const READS_AT_ONCE = 16
/** Answers of /limits that read or write the store made a second at most, whatever is asked (a GET
 * not shared, a PUT, a DELETE): each costs the store a call per bucket it shows. */
const LIMITS_ANSWERS_PER_SECOND = 50

/** A bucket as /limits shows it: permits from the config, the run-time override every replica obeys
 * (null: none), what applies, and the store's live holders and queue (fleet-wide). */
interface BucketState {
  bucket: string | null
  /** The permits the config gives (an adaptive limit's `initial`). */
  configured: number
  override: number | null
  /** What applies: the override, else the adaptive limit, else the configured permits. */
  effective: number
  holders: number
  queued: number
  /** An adaptive limit's state (docs/adaptive.md): the limit in force in the store (null: none
   * there now), and what this replica knows of its controller. */
  adaptive?: (AdaptiveStatus & { inStore: number | null; initial: number; algorithm: string }) | undefined
  /** A fair queue's (a route with priority or flow): the fleet's waiters by class, parked at their
   * flow's cap, evicted by class since the bucket was last idle, and the busiest flows this replica
   * saw (docs/gateway/behaviour.md, "Priorities and fair shares"). */
  classes?: Record<string, { waiting: number }>
  parked?: number | null
  evicted?: Record<string, number>
  saturated?: string[]
  mixed?: boolean | null
  flows?: ReturnType<typeof flowState>[]
}

/** The longest a connection of the admin listener may stay without moving (or the send timeout, if
 * shorter). */
const ADMIN_SEND_MS = 10_000
/** Connections the admin listener keeps open at once (connection-cap.ts: the idle go first). */
const ADMIN_CONNECTIONS = 64
/** Requests one connection of the admin listener serves before it is closed (nginx's
 * keepalive_requests): one. Its clients ask every few seconds at most (probes and Prometheus
 * reconnect anyway, past Node's 5 s keep-alive; the dashboard polls once a second), so a kept
 * connection saves them a loopback connect; it gave a client that pipelines and never reads an
 * answer per request, each a write on the data plane's event loop (docs/cost.md, "Why the code is
 * as it is"). */
const ADMIN_REQUESTS_PER_CONNECTION = 1

export function createAdminServer(view: AdminView): http.Server {
  /** Buckets of per: tenant/ip routes set through this replica, listed by GET /limits. */
  const setHere = new Map<string, Set<string>>()
  const dashboard = new Dashboard(view)
  // One text a second, whoever scrapes: its collectors read the store (tollgate_store_up's PING,
  // tollgate_limit_permits). Sent as one Buffer that every response shares.
  const scrape = sharedAnswer(ANSWER_INTERVAL_MS, () => metricsText(view.metrics.registry))
  // /limits reads the store for each thing asked: a GET's answer is shared per thing asked for a
  // second (until a limit is set or dropped through this replica), and answers that need the store
  // are made in turns, so many a second, in the order asked.
  const listed = sharedAnswers<Buffer>(ANSWER_INTERVAL_MS)
  const storeTurn = paced(LIMITS_ANSWERS_PER_SECOND)

  // A slow client holds an admin socket for seconds, not Node's default 5 minutes: a head has 5 s, a
  // request 10 s, checked every second (Node checks every 30 s by default, so a head trickled in a
  // byte at a time stayed up to 35 s).
  const server = http.createServer(
    {
      requestTimeout: 10_000,
      headersTimeout: 5_000,
      connectionsCheckingInterval: 1_000,
    },
    (req, res) =>
      // One request at a time per connection, as on the data plane: nothing of a pipelined request
      // is computed before the answers ahead of it are done.
      inTurn(req, res, () => {
        route(req, res).catch((error: unknown) => {
          if (error instanceof HttpError)
            return json(res, error.status, { error: error.message }, error.headers)
          view.logger.error({ err: error }, 'admin request failed')
          if (!res.headersSent) json(res, 500, { error: 'internal error' })
          else res.destroy()
        })
      }),
  )
  // An Expect other than 100-continue: Node's answer, in turn and counted (parse-turns.ts).
  server.on('checkExpectation', (req: http.IncomingMessage, res: http.ServerResponse) =>
    inTurn(req, res, () => text(res, 417, 'expectation failed\n')),
  )
  capConnections(server, ADMIN_CONNECTIONS)
  // What is parsed ahead of a request in flight is a slice, not a read of 64 KB; connections take
  // turns with each other and with the data plane's I/O; a connection serves so many requests (a
  // scraper or a probe reconnects, a pipelining flood is done).
  parseInTurns(server, ADMIN_REQUESTS_PER_CONNECTION)
  // Every answer is bounded, as nginx's send_timeout bounds them: a connection on which nothing moves
  // (nothing read, nothing taken) for the send timeout, at most ADMIN_SEND_MS, is cut.
  server.on('connection', (socket: Socket) =>
    socket.setTimeout(Math.min(ADMIN_SEND_MS, view.config().sendTimeoutMs)),
  )
  server.once('close', () => dashboard.close())
  return server

  async function route(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0] as string
    if (path === '/limits' || path.startsWith('/limits/')) return limits(req, res, path)
    if (req.method !== 'GET' && req.method !== 'HEAD')
      throw new HttpError(405, 'method not allowed', { allow: 'GET, HEAD' })
    if (path === '/metrics') {
      const body = await scrape()
      res.writeHead(200, {
        'content-type': view.metrics.registry.contentType,
        'content-length': body.length,
      })
      res.end(req.method === 'HEAD' ? undefined : body)
      return
    }
    if (path === '/healthz') return text(res, 200, 'ok\n')
    if (path === '/readyz')
      return (await view.ready()) ? text(res, 200, 'ready\n') : text(res, 503, 'not ready\n')
    if (dashboardFile(path) !== undefined) {
      // DNS rebinding: a page of another site, its name pointed at 127.0.0.1, sends its own Host.
      const admin = view.config().admin
      const host = (req.headers.host ?? '').replace(/:\d+$/, '')
      if (admin && isLoopback(admin.host) && !isLoopback(host))
        throw new HttpError(403, 'this listener is on loopback: open the dashboard at 127.0.0.1 or localhost')
      if (await dashboard.serve(req, res, path, accessOf(req))) return
    }
    text(res, 404, 'not found\n')
  }

  /** What a page on this listener may do, by /limits's rules (authorize()). */
  function accessOf(req: http.IncomingMessage): Access {
    let authorized = true
    try {
      authorize(req)
    } catch {
      authorized = false
    }
    const admin = view.config().admin
    if (admin?.token !== undefined) {
      return {
        authorized,
        canWrite: true,
        tokenRequired: true,
        note: 'Setting a limit needs the admin token (--admin-token-file or TOLLGATE_ADMIN_TOKEN): enter it below. It applies to every replica sharing the store.',
      }
    }
    if (admin && !isLoopback(admin.host)) {
      return {
        authorized: false,
        canWrite: false,
        tokenRequired: false,
        note: 'Read-only: this admin listener is not on loopback and has no token, so /limits answers no one. Give the gateway --admin-token-file (or TOLLGATE_ADMIN_TOKEN) to set limits from this page.',
      }
    }
    return {
      authorized,
      canWrite: authorized,
      tokenRequired: false,
      note: authorized
        ? 'A limit set here applies to every replica sharing the store (PUT /limits). No token is configured: only local requests may set limits.'
        : 'Read-only: without a token, /limits answers only requests to a loopback address (open this page at 127.0.0.1).',
    }
  }

  async function limits(req: http.IncomingMessage, res: http.ServerResponse, path: string): Promise<void> {
    authorize(req)
    // /limits, /limits/<route>, /limits/<route>/buckets/<bucket> (each part percent-encoded)
    const parts = path.split('/').slice(2).map(decodePart)
    const method = req.method ?? 'GET'
    if (parts.length === 0) {
      if (method !== 'GET' && method !== 'HEAD')
        throw new HttpError(405, 'method not allowed', { allow: 'GET, HEAD' })
      return send(
        res,
        200,
        await read(req, '', async () => ({
          routes: await Promise.all(view.routes().map((live) => describeRoute(live))),
        })),
      )
    }
    const live = view.routes().find((r) => r.config.name === parts[0])
    if (!live) throw new HttpError(404, `no route named ${JSON.stringify(parts[0])}`)
    const concurrency = live.config.concurrency
    const admission = live.concurrency
    if (!concurrency || !admission?.semaphoreOf)
      throw new HttpError(409, `route ${JSON.stringify(live.config.name)} has no concurrency limit`)
    const perBucket = concurrency.per === 'tenant' || concurrency.per === 'ip'
    let key: string
    if (parts.length === 1) {
      if (perBucket && method !== 'GET' && method !== 'HEAD') {
        throw new HttpError(
          409,
          `route ${JSON.stringify(live.config.name)} has one bucket per ${concurrency.per}: set one with /limits/${encodeURIComponent(live.config.name)}/buckets/<${concurrency.per}>, or its default in the config (then reload)`,
        )
      }
      if (perBucket) return send(res, 200, await read(req, routeKey(live), () => describeRoute(live)))
      key = GLOBAL_KEY
    } else if (parts.length === 3 && parts[1] === 'flows' && live.fair && concurrency.flow) {
      // Any flow, by name (the listing shows the busiest only); read only.
      if (method !== 'GET' && method !== 'HEAD')
        throw new HttpError(405, 'method not allowed', { allow: 'GET, HEAD' })
      if (perBucket)
        throw new HttpError(
          409,
          `route ${JSON.stringify(live.config.name)} has one bucket per ${concurrency.per}: its flows are read per bucket`,
        )
      const flow = normalizeKey(parts[2])
      return send(
        res,
        200,
        await read(req, JSON.stringify([live.config.name, 'flow', flow]), async () =>
          flowState(concurrency, await readFair(admission.semaphoreOf!(GLOBAL_KEY), [flow]), flow),
        ),
      )
    } else if (parts.length === 3 && parts[1] === 'buckets') {
      if (!perBucket) {
        throw new HttpError(
          409,
          `route ${JSON.stringify(live.config.name)} is per: ${concurrency.per} (one bucket): use /limits/${encodeURIComponent(live.config.name)}`,
        )
      }
      key = normalizeKey(parts[2])
    } else {
      throw new HttpError(
        404,
        'not found: /limits, /limits/<route>, /limits/<route>/buckets/<bucket> or /limits/<route>/flows/<flow>',
      )
    }
    const semaphore = admission.semaphoreOf(key)
    const bucketLabel = key === GLOBAL_KEY ? null : key
    if (method === 'GET' || method === 'HEAD')
      return send(
        res,
        200,
        parts.length === 1
          ? await read(req, routeKey(live), () => describeRoute(live))
          : await read(req, JSON.stringify([live.config.name, key]), () => bucketState(live, bucketLabel)),
      )
    if (method === 'PUT') {
      const permits = await readPermits(req)
      if (!(await storeTurn(() => req.socket.destroyed))) return
      await semaphore.setPermits(permits)
      listed.clear()
      if (bucketLabel === null) dashboard.noteChange(live.config.name, permits, 'override (this replica)')
      // This replica's kept permits (permit keep-alive) obey the new limit at once; other replicas'
      // within their keepAliveMs.
      admission.kept?.flush(key)
      if (bucketLabel !== null) rememberSet(live.config.name, bucketLabel)
      view.logger.info(
        { route: live.config.name, bucket: bucketLabel, permits, client: req.socket.remoteAddress },
        'admin: limit set',
      )
      return json(res, 200, await bucketState(live, bucketLabel))
    }
    if (method === 'DELETE') {
      if (!(await storeTurn(() => req.socket.destroyed))) return
      await semaphore.resetPermits()
      listed.clear()
      if (bucketLabel === null)
        dashboard.noteChange(
          live.config.name,
          live.concurrency?.adaptive?.status().limit ?? concurrency.permits,
          'override dropped (this replica)',
        )
      admission.kept?.flush(key)
      if (bucketLabel !== null) setHere.get(live.config.name)?.delete(bucketLabel)
      view.logger.info(
        { route: live.config.name, bucket: bucketLabel, client: req.socket.remoteAddress },
        'admin: limit override dropped',
      )
      return json(res, 200, await bucketState(live, bucketLabel))
    }
    throw new HttpError(405, 'method not allowed', { allow: 'GET, HEAD, PUT, DELETE' })
  }

  /** A GET's answer for `key`: shared (sharedAnswers()), else made in its turn. */
  function read(req: http.IncomingMessage, key: string, describe: () => Promise<unknown>): Promise<Buffer> {
    return listed(key, req.socket, async (gone) => {
      if (!(await storeTurn(gone))) throw new HttpError(503, 'nobody waits for this answer any more')
      return jsonBody(await describe())
    })
  }

  function rememberSet(routeName: string, bucket: string): void {
    let buckets = setHere.get(routeName)
    if (!buckets) setHere.set(routeName, (buckets = new Set()))
    if (buckets.size < 1000) buckets.add(bucket)
  }

  async function describeRoute(live: LiveRoute) {
    const concurrency = live.config.concurrency
    if (!concurrency || !live.concurrency) return { route: live.config.name, limited: false }
    const perBucket = concurrency.per === 'tenant' || concurrency.per === 'ip'
    // The live buckets are the busiest the dashboard follows on this replica (those with requests
    // in flight or waiting here among them).
    const busiest = perBucket ? dashboard.busiest(live.config.name) : []
    const all = perBucket
      ? [
          ...new Set([
            ...Object.keys(concurrency.overrides),
            ...(setHere.get(live.config.name) ?? []),
            ...busiest,
          ]),
        ]
      : [null]
    // Bounded: a config with thousands of overrides must not turn one GET into thousands of store
    // reads at once (every other bucket is read by name).
    const keys = all.slice(0, MAX_LISTED_BUCKETS)
    const buckets: BucketState[] = []
    const outage = live.concurrency!.outage
    try {
      for (let i = 0; i < keys.length; i += READS_AT_ONCE)
        buckets.push(
          ...(await Promise.all(keys.slice(i, i + READS_AT_ONCE).map((key) => bucketState(live, key)))),
        )
    } catch (error) {
      // outage: share answers without the store: what this replica admits meanwhile is its own.
      if (!outage?.local) throw error
    }
    return {
      route: live.config.name,
      limited: true,
      per: concurrency.per,
      permits: concurrency.adaptive ? null : concurrency.permits,
      ...(concurrency.adaptive
        ? { adaptive: { min: concurrency.adaptive.min, max: concurrency.adaptive.max } }
        : {}),
      outage: outage
        ? {
            mode: concurrency.outage,
            local: outage.local,
            replicas: outage.replicas ?? null,
            share: outage.share(configuredLimit(concurrency)),
            inMemory: outage.inFlight,
            outageMs: outage.local ? Date.now() - outage.since : null,
          }
        : { mode: concurrency.outage },
      buckets,
      ...(perBucket ? { busiest } : {}),
      ...(all.length > keys.length
        ? { truncated: true, bucketsListed: keys.length, bucketsKnown: all.length }
        : {}),
    }
  }

  async function bucketState(live: LiveRoute, bucket: string | null): Promise<BucketState> {
    const concurrency = live.config.concurrency!
    const semaphore = live.concurrency!.semaphoreOf!(bucket ?? GLOBAL_KEY)
    const configured =
      bucket !== null && Object.hasOwn(concurrency.overrides, bucket)
        ? (concurrency.overrides[bucket] as number)
        : configuredLimit(concurrency)
    const busiest = live.fair && concurrency.flow ? dashboard.busiestFlows(live.config.name) : []
    let stats: Awaited<ReturnType<typeof semaphore.stats>> & FairStats
    try {
      stats = live.fair
        ? await fairStats(
            semaphore,
            busiest.map((b) => b.flow),
          )
        : await semaphore.stats()
    } catch (error) {
      throw new HttpError(503, `the store did not answer: ${(error as Error).message}`)
    }
    const adaptive = live.concurrency!.adaptive
    const status = adaptive?.status()
    return {
      bucket,
      configured,
      override: stats.override ?? null,
      effective: limitInForce(stats, status, configured),
      holders: stats.holders,
      queued: stats.queued,
      ...(adaptive && status
        ? {
            adaptive: {
              ...status,
              inStore: stats.adaptive ?? null,
              initial: adaptive.options.initial,
              algorithm: adaptive.options.algorithm,
            },
          }
        : {}),
      ...(live.fair
        ? {
            ...fairFigures(stats),
            ...(concurrency.flow
              ? { flows: busiest.map(({ flow, share }) => flowState(concurrency, stats, flow, share)) }
              : {}),
          }
        : {}),
    }
  }

  async function readFair(semaphore: Parameters<typeof fairStats>[0], flows: string[]): Promise<FairStats> {
    try {
      return await fairStats(semaphore, flows)
    } catch (error) {
      throw new HttpError(503, `the store did not answer: ${(error as Error).message}`)
    }
  }

  /** /limits answers only with the token; with none configured, only on a loopback listener, and only
   * to requests that name a loopback host and come from no web page: a browser on the machine,
   * steered by a page (DNS rebinding, a cross-site request), sends a foreign Host or an Origin. */
  function authorize(req: http.IncomingMessage): void {
    const admin = view.config().admin
    const token = admin?.token
    if (token === undefined) {
      if (admin && !isLoopback(admin.host)) {
        throw new HttpError(
          403,
          'the admin listener is not on loopback: the /limits API needs a token (--admin-token-file or TOLLGATE_ADMIN_TOKEN)',
        )
      }
      const host = (req.headers.host ?? '').replace(/:\d+$/, '')
      // A page of another origin (a cross-site request, or DNS rebinding) sends its own Origin; the
      // dashboard, served by this listener, sends this one's.
      const origin = req.headers.origin
      if (!isLoopback(host) || (origin !== undefined && origin !== `http://${req.headers.host}`)) {
        throw new HttpError(
          403,
          'without a token, /limits answers only local requests (loopback Host, no Origin but this page’s)',
        )
      }
      return
    }
    const given = /^Bearer (\S+)$/i.exec(req.headers.authorization ?? '')?.[1]
    if (given === undefined || !sameSecret(given, token)) {
      throw new HttpError(401, 'a valid bearer token is required', {
        'www-authenticate': 'Bearer realm="tollgate-admin"',
      })
    }
  }
}

/** The key of a route's listing among the shared answers of /limits. */
const routeKey = (live: LiveRoute) => JSON.stringify([live.config.name])
