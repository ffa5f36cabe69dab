// The dashboard of the admin listener (docs/gateway/operate.md, "Dashboard"): a page at / and /dashboard
// (dashboard/*, embedded by scripts/embed-dashboard.mjs), and /dashboard/data.json, what it draws.
//
// Cost: a viewer costs the data plane nothing. The data is one snapshot, made at most once a second
// whoever asks (any number of viewers share it), and only while someone asks: its store reads are one
// stats call per route with one bucket, one per busy bucket (at most BUSIEST per keyed route) and
// per busy resource of a read/write-locked route (BUSIEST too), and one per busy flow of a fair
// route (at most BUSIEST_FLOWS: dashboard-scores.ts), each within READ_TIMEOUT_MS, none while the
// store is known down. Without viewers the only work is a timer a second that copies this replica's
// own counters into the charts' history.
// Truth: in flight and waiting come from the store (the fleet's), beside this replica's own; limits
// are the store's (an override, the adaptive limit) over the config's.
// Trust: the page and its data are read-only, like /metrics; bucket names and locked resources
// (request data: tenant ids, addresses, paths) are shown only to a request /limits would answer; changing a limit goes through /limits
// and its rules (a bearer token beyond loopback, the DNS-rebinding guard, no cookie).
import { randomUUID } from 'node:crypto'
import type http from 'node:http'
import type { Logger as PinoLogger } from 'pino'
import { GLOBAL_KEY } from '../../admission/keys.js'
import type { StoreHealth } from '../../admission/store-health.js'
import type { HistogramSeries } from '../../admission/histogram.js'
import type { SemaphoreStats } from '../../primitives/semaphore.js'
import { within } from '../../core/timeout.js'
import type { GatewayConfig } from '../config/index.js'
import type { LiveRoute } from '../routes.js'
import { DASHBOARD_ASSETS } from './dashboard-assets.js'
import { BusiestScores } from './dashboard-scores.js'
import type { Change, DashboardData, Point, Snapshot } from './dashboard-data.js'
import { DASHBOARD_HEADERS, dashboardFile, sinceOf } from './dashboard-http.js'
import { configuredLimit, fairRows, type FairStats, fairStats, limitInForce } from './limit-figures.js'
import type { GatewayMetrics } from './metrics.js'
import { ANSWER_INTERVAL_MS, sharedAnswer } from './shared-answer.js'

const READ_TIMEOUT_MS = 250
/** Points of each route's chart: one a second, 5 minutes. */
const HISTORY = 300
/** A poll that names the last point it holds (?since=) is sent the points of these last ms only
 * (ten a route, not 300), when they cover all it lacks. */
const RECENT_MS = 10_000
/** Latency quantiles over this many seconds. */
const QUANTILE_WINDOW_S = 60
/** Routes shown at most. */
const MAX_ROUTES = 50
const MAX_CHANGES = 50

/** Requests of a route waiting on this replica (every admission of it). */
function queuedHere(live: LiveRoute): number {
  return live.admissions.reduce((sum, a) => sum + a.counters.queued, 0)
}

/** What the dashboard reads of the running gateway. */
export interface DashboardView {
  readonly metrics: GatewayMetrics
  readonly logger: PinoLogger
  readonly version: string
  config(): GatewayConfig
  routes(): readonly LiveRoute[]
  readonly health: StoreHealth
  /** When the running config was loaded, and the last reload's outcome (undefined: none since start). */
  reloads(): { loadedAt: number; last: { at: number; ok: boolean; message: string } | undefined }
}

/** How a request may act, by /limits's rules (admin.ts). */
export interface Access {
  /** The request could read /limits (and so see bucket names). */
  authorized: boolean
  /** A page on this listener can set limits through /limits (with the token where one is needed). */
  canWrite: boolean
  tokenRequired: boolean
  note: string
}

export class Dashboard {
  private readonly boot = randomUUID()
  private readonly history = new Map<string, Point[]>()
  /** Each second, a copy of every latency histogram's counts: quantiles over the last minute. */
  private readonly marks: { at: number; series: Map<string, Float64Array> }[] = []
  private readonly changes: Change[] = []
  /** The limit last seen in force per route (for the changes list). */
  private readonly seen = new Map<string, number>()
  /** The busiest buckets of each keyed route, and flows of each fair route (dashboard-scores.ts). */
  private readonly scores = new BusiestScores()
  /** One snapshot a second whoever asks, with its serializations (one Buffer per kind of viewer,
   * shared by every response that sends it). */
  private readonly snapshot = sharedAnswer(ANSWER_INTERVAL_MS, async () => ({
    data: await this.take(),
    bodies: new Map<string, Buffer>(),
  }))
  private lastViewed = Number.NEGATIVE_INFINITY
  private outages = 0
  private downSince: number | undefined
  private lastOutage: { from: number; ms: number | null } | undefined
  private readonly timer: NodeJS.Timeout
  private readonly offHealth: () => void

  constructor(private readonly view: DashboardView) {
    this.offHealth = view.health.onChange((down) => {
      if (down) {
        this.outages++
        this.downSince = Date.now()
        this.lastOutage = { from: this.downSince, ms: null }
      } else if (this.lastOutage) {
        this.lastOutage.ms = Date.now() - this.lastOutage.from
        this.downSince = undefined
      }
    })
    this.timer = setInterval(() => this.sample(), 1000)
    this.timer.unref()
  }

  close(): void {
    clearInterval(this.timer)
    this.offHealth()
  }

  /** A limit this replica changed through /limits (the store's value shows in the next snapshot). */
  noteChange(route: string, to: number | undefined, by: string): void {
    const from = this.seen.get(route)
    if (to === undefined || from === undefined || from === to) return
    this.record({ at: Date.now(), route, from, to, by })
    this.seen.set(route, to)
    // Until the next snapshot reads it from the store, the limit this replica knows is this one (not
    // the one before: the next second's sample would list a change back).
    this.lastEffective.set(route, to)
  }

  /** Serve GET / and /dashboard (the page), /dashboard/*.js and app.css, and /dashboard/data.json;
   * false for any other path. */
  async serve(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    path: string,
    access: Access,
  ): Promise<boolean> {
    const file = dashboardFile(path)
    if (file === undefined) return false
    if (file === 'data.json') {
      const since = sinceOf(req.url ?? '')
      this.lastViewed = performance.now()
      const body = await this.body(access, since)
      res.writeHead(200, {
        ...DASHBOARD_HEADERS,
        'content-type': 'application/json; charset=utf-8',
        'cache-control': 'no-store',
        'content-length': body.length,
      })
      res.end(req.method === 'HEAD' ? undefined : body)
      return true
    }
    const asset = Object.hasOwn(DASHBOARD_ASSETS, file) ? DASHBOARD_ASSETS[file] : undefined
    if (!asset) return false
    const headers = {
      ...DASHBOARD_HEADERS,
      'content-type': asset.type,
      'cache-control': 'no-cache',
      etag: asset.etag,
    }
    if (req.headers['if-none-match'] === asset.etag) {
      res.writeHead(304, headers)
      res.end()
      return true
    }
    res.writeHead(200, { ...headers, 'content-length': Buffer.byteLength(asset.body) })
    res.end(req.method === 'HEAD' ? undefined : asset.body)
    return true
  }

  /** data.json for this request: the snapshot with what it may see, serialized once per snapshot,
   * kind of access and length of history (whole, or recent: a viewer that named the last point it
   * holds, recent enough); a viewer costs the bytes it is sent, not a store read or a serialization. */
  private async body(access: Access, since: number | undefined): Promise<Buffer> {
    const snapshot = await this.snapshot()
    const data = snapshot.data
    // The recent points cover all the viewer lacks: it holds every point up to `since`. A since past
    // the snapshot (the wall clock stepped back since that point) gets the whole history: the page
    // would otherwise wait for the clock to pass it again before it drew a new point.
    const recent = since !== undefined && since >= data.at - RECENT_MS && since <= data.at
    const key = `${recent ? 'recent' : 'whole'} ${JSON.stringify(access)}`
    let body = snapshot.bodies.get(key)
    if (body === undefined) {
      body = Buffer.from(JSON.stringify(this.visible(data, access, recent)))
      snapshot.bodies.set(key, body)
    }
    return body
  }

  /** The snapshot, with what this request may see: bucket names to who may read /limits, and each
   * route's points after `historySince` only when `recent` (null: the whole 5 minutes). */
  private visible(snapshot: Snapshot, access: Access, recent: boolean): DashboardData {
    const historySince = recent ? snapshot.at - RECENT_MS : null
    const routes = snapshot.routes.map((route) => ({
      ...route,
      buckets: access.authorized ? route.buckets : [],
      // Resources are request paths, as bucket names are request data.
      locks: route.locks && (access.authorized ? route.locks : []),
      // Flow names are request data, as bucket names are.
      ...(route.flows ? { flows: access.authorized ? route.flows : [] } : {}),
      history: historySince === null ? route.history : route.history.filter((p) => p.t > historySince),
    }))
    return { ...snapshot, routes, historySince, access: { ...access, bucketsShown: access.authorized } }
  }

  /** Each second: this replica's own counters into the charts, the latency marks, the busiest
   * buckets, and a change of the limit this replica knows of (an adaptive step). */
  private sample(): void {
    const t = Date.now()
    // A reload changes configured limits: what the last snapshot read is stale until the next one.
    const loadedAt = this.view.reloads().loadedAt
    if (loadedAt !== this.loadedAt) {
      if (this.loadedAt !== undefined) this.lastEffective.clear()
      this.loadedAt = loadedAt
    }
    const viewed = performance.now() - this.lastViewed < 10_000
    for (const live of this.view.routes().slice(0, MAX_ROUTES)) {
      const name = live.config.name
      const points = this.history.get(name) ?? []
      const local = this.view.metrics.route(name).inFlight
      const last = this.lastFleet.get(name)
      const known = this.knownLimit(live)
      points.push({
        t,
        local,
        // The fleet's figures only while someone looks (they cost a store read); this replica's always.
        fleet: viewed && last ? last.holders : null,
        queued: viewed && last ? last.queued : queuedHere(live),
        limit: known,
      })
      if (points.length > HISTORY) points.splice(0, points.length - HISTORY)
      this.history.set(name, points)
      if (known !== null) this.compare(name, known, live.concurrency?.adaptive ? 'adaptive limit' : 'config')
      if (live.concurrency && live.config.concurrency && isKeyed(live.config.concurrency.per))
        this.scores.score(name, live.concurrency.arrivals)
      if (live.rwlock) this.scores.score(name, live.rwlock.arrivals, 'resources')
      const fair = live.fair ? this.view.metrics.route(name).fairSeries : undefined
      if (fair) this.scores.scoreFlows(name, fair.takeArrivals())
    }
    const series = new Map<string, Float64Array>()
    for (const [label, s] of this.view.metrics.waitSeconds.entries())
      series.set(`wait ${label}`, s.counts.slice())
    for (const [label, s] of this.view.metrics.redisSeconds.entries())
      series.set(`redis ${label}`, s.counts.slice())
    this.marks.push({ at: t, series })
    if (this.marks.length > QUANTILE_WINDOW_S + 1) this.marks.shift()
    for (const name of this.history.keys())
      if (!this.view.routes().some((live) => live.config.name === name)) {
        this.history.delete(name)
        this.scores.forget(name)
      }
  }

  /** The busiest buckets of a keyed route on this replica, highest first (dashboard-scores.ts). */
  busiest(route: string): string[] {
    return this.scores.busiest(route)
  }

  /** The busiest flows of a fair route on this replica, with their shares (dashboard-scores.ts). */
  busiestFlows(route: string): { flow: string; share: number }[] {
    return this.scores.busiestFlows(route)
  }

  /** The fleet's figures of each route's one bucket at the last snapshot. */
  private readonly lastFleet = new Map<string, { holders: number; queued: number }>()

  /** The limit of a route this replica knows without asking the store: the last override or
   * adaptive limit read, else what it knows of the adaptive limit, else the config's. */
  private knownLimit(live: LiveRoute): number | null {
    const concurrency = live.config.concurrency
    if (!concurrency) return null
    const adaptive = live.concurrency?.adaptive?.status()
    return this.lastEffective.get(live.config.name) ?? adaptive?.limit ?? concurrency.permits
  }

  private readonly lastEffective = new Map<string, number>()
  private loadedAt: number | undefined

  private compare(route: string, limit: number, by: string): void {
    const from = this.seen.get(route)
    // Adaptive steps are listed once they moved the limit 20 % from the last one listed (as the log
    // line does): a list of every step would push the operators' changes out.
    if (by === 'adaptive limit' && from !== undefined && Math.abs(limit - from) < 0.2 * from) return
    this.seen.set(route, limit)
    if (from !== undefined && from !== limit) this.record({ at: Date.now(), route, from, to: limit, by })
  }

  private record(change: Change): void {
    this.changes.unshift(change)
    if (this.changes.length > MAX_CHANGES) this.changes.pop()
  }

  /** Quantiles of a histogram series over the last minute (from the oldest mark), as bucket bounds in
   * ms: "p99 <= 25 ms". Undefined without observations in that minute. */
  private quantiles(key: string, bounds: readonly number[], current: HistogramSeries) {
    const old = this.marks[0]?.series.get(key)
    const counts = Array.from(current.counts, (count, i) => count - (old?.[i] ?? 0))
    const total = counts.reduce((a, b) => a + b, 0)
    if (total <= 0) return { p50Ms: null, p99Ms: null, count: 0 }
    const at = (q: number) => {
      let cumulative = 0
      for (let i = 0; i < counts.length; i++) {
        cumulative += counts[i] as number
        if (cumulative >= q * total) return i < bounds.length ? (bounds[i] as number) * 1000 : null
      }
      return null
    }
    return { p50Ms: at(0.5), p99Ms: at(0.99), count: total }
  }

  private async take(): Promise<Snapshot> {
    const { metrics, health } = this.view
    const config = this.view.config()
    const rejected = new Map<string, Record<string, number>>()
    for (const value of (await metrics.rejected.get()).values) {
      const route = String(value.labels.route)
      const reasons = rejected.get(route) ?? {}
      reasons[String(value.labels.reason)] = value.value
      rejected.set(route, reasons)
    }
    const readable = !health.down
    // A read of the fleet's figures that timed out or failed: the store is not answering (a hung
    // Redis is not known down until a request's call times out).
    let unanswered = 0
    const routes = await Promise.all(
      this.view
        .routes()
        .slice(0, MAX_ROUTES)
        .map(async (live) => {
          const name = live.config.name
          const concurrency = live.config.concurrency
          const cap = live.concurrency
          const keyed = concurrency !== undefined && isKeyed(concurrency.per)
          const adaptive = cap?.adaptive?.status()
          let stats: (SemaphoreStats & FairStats) | undefined
          const busiestFlows = live.fair && concurrency?.flow ? this.scores.busiestFlows(name) : []
          if (concurrency && cap?.semaphoreOf && !keyed && readable) {
            const semaphore = cap.semaphoreOf(GLOBAL_KEY)
            const read = await within(
              live.fair
                ? fairStats(
                    semaphore,
                    busiestFlows.map((b) => b.flow),
                  )
                : semaphore.stats(),
              READ_TIMEOUT_MS,
            )
            if (read.ok) stats = read.value
            else unanswered++
          }
          const configured = concurrency ? configuredLimit(concurrency) : null
          const limit = concurrency
            ? {
                configured,
                override: stats ? (stats.override ?? null) : null,
                adaptive: adaptive ? { ...adaptive, inStore: stats?.adaptive ?? null } : null,
                effective: limitInForce(stats, adaptive, configured as number),
                perBucket: keyed,
              }
            : null
          if (stats) {
            this.lastFleet.set(name, { holders: stats.holders, queued: stats.queued })
            this.lastEffective.set(name, limit!.effective)
            this.compare(
              name,
              limit!.effective,
              stats.override !== undefined ? 'override' : adaptive ? 'adaptive limit' : 'config',
            )
          }
          /** Each key's figures from the store, within READ_TIMEOUT_MS (undefined where the read failed:
           * the store is not answering). */
          const readEach = <T, R>(
            keys: string[],
            read: (key: string) => Promise<T>,
            row: (key: string, s?: T) => R,
          ) =>
            Promise.all(
              keys.map(async (key) => {
                const answer = await within(read(key), READ_TIMEOUT_MS)
                if (!answer.ok) unanswered++
                return row(key, answer.ok ? answer.value : undefined)
              }),
            )
          const semaphoreOf = cap?.semaphoreOf
          const buckets =
            keyed && semaphoreOf && readable
              ? await readEach(
                  this.scores.busiest(name),
                  (bucket) => semaphoreOf(bucket).stats(),
                  (bucket, s) => ({
                    bucket,
                    holders: s?.holders ?? null,
                    queued: s?.queued ?? null,
                    effective: s?.limit ?? null,
                  }),
                )
              : []
          const lockOf = live.rwlock?.lockOf
          const locks = lockOf
            ? readable
              ? await readEach(
                  this.scores.busiest(name, 'resources'),
                  (resource) => lockOf(resource).stats(),
                  (resource, s) => ({
                    resource,
                    readers: s?.readers ?? null,
                    writer: s?.writer ?? null,
                    queued: s?.queued ?? null,
                  }),
                )
              : []
            : null
          const waitKey = `wait ${name}`
          const outage = concurrency ? live.concurrency?.outage : undefined
          return {
            name,
            limited: concurrency !== undefined,
            settable: concurrency !== undefined && !keyed,
            per: concurrency?.per ?? null,
            limit,
            fleet: stats ? { holders: stats.holders, queued: stats.queued } : null,
            local: {
              inFlight: metrics.route(name).inFlight,
              queued: queuedHere(live),
              kept: cap?.kept?.size ?? 0,
            },
            wait: this.quantiles(waitKey, metrics.waitSeconds.bounds, metrics.waitSeconds.series(name)),
            rejected: rejected.get(name) ?? {},
            history: this.history.get(name) ?? [],
            buckets,
            locks,
            outage: outage?.local
              ? {
                  share: outage.share(configured as number),
                  of: configured as number,
                  replicas: outage.replicas ?? null,
                  inMemory: outage.inFlight,
                }
              : null,
            ...(live.fair && concurrency
              ? fairRows(metrics.route(name).fairSeries?.classes, concurrency, stats, busiestFlows)
              : {}),
          }
        }),
    )
    const latency: Record<string, { p50Ms: number | null; p99Ms: number | null; count: number }> = {}
    for (const [call, series] of metrics.redisSeconds.entries())
      latency[call] = this.quantiles(`redis ${call}`, metrics.redisSeconds.bounds, series)
    const reloads = this.view.reloads()
    return {
      at: Date.now(),
      replica: { version: this.view.version, pid: process.pid, boot: this.boot },
      store: {
        kind: config.store.kind,
        up: !health.down,
        // false: this snapshot's reads of the fleet's figures timed out or failed (null: none made).
        answering: readable ? unanswered === 0 : null,
        downSince: this.downSince ?? null,
        outages: this.outages,
        lastOutage: this.lastOutage ?? null,
        latency,
      },
      config: { loadedAt: reloads.loadedAt, lastReload: reloads.last ?? null, routes: config.routes.length },
      routes,
      changes: this.changes,
    }
  }
}

function isKeyed(per: string): boolean {
  return per === 'tenant' || per === 'ip'
}
