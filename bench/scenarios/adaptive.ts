// Adaptive limits scenario (issue 30): an upstream simulator with a true capacity C (C requests served
// at once, S ms each, the rest queue inside it), closed-loop clients offering about 3x what it serves,
// through gateway replicas on the run's Redis. Three plans: steady; C halves and comes back; replicas
// 1 -> 3 -> 1. Five variants each, one after another: fixed limits of C (the oracle), 4C and C/4, an
// adaptive limit per replica (scope local, what per-instance limiters do) and one for the fleet
// (scope fleet). Every process (upstream, gateways, load generator) is a child of its own, stopped by
// its PID. Also writes a plot of the limit, the upstream's in flight and its p99 over time
// (bench/results/adaptive.svg). BENCH_ADAPTIVE_QUICK=1 runs every plan at a tenth of its length.
import http from 'node:http'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { mkdir, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { onProcessExit } from '../../test/helpers/process-cleanup.js'
import { freePort } from '../../test/helpers/redis-server.js'
import { GATEWAY_BIN, requireBuiltGateway } from '../lib/gateway-bin.js'
import { type BenchProcess, startProcess } from '../lib/processes.js'
import { fmtFixed, fmtInt } from '../lib/report.js'
import type { BenchContext, Scenario, Table, Verdict } from '../lib/scenario.js'
import { median, percentile } from '../lib/stats.js'
import { type Line, type Panel, renderFigure } from '../lib/svg-plot.js'

const QUICK = process.env.BENCH_ADAPTIVE_QUICK === '1'
/** Quick mode: every plan (and its warm-up) at a tenth of its length, a smoke run. */
const SCALE = QUICK ? 0.1 : 1
const CAPACITY = 32
const SERVICE_MS = 10
/** Service time S x (1 +- JITTER), uniform. */
const JITTER = 0.1
/** Closed loop: about 3x what the upstream serves at once. */
const CLIENTS = 3 * CAPACITY
const REPLICAS = 3
const WINDOW_MS = 500
const ADAPTIVE = { min: 1, max: 256, initial: 8, windowMs: WINDOW_MS }
/** Requests wait in the gateway's fair queue rather than being rejected. */
const MAX_WAIT_MS = 10_000
const MAX_QUEUE = 100_000
const POLL_MS = 150
/** Left out of every number (all variants alike): the first seconds after the load starts. */
const WARMUP_S = 5 * SCALE
/** The upstream alone at C/2 concurrency: its unloaded latency. */
const UNLOADED_S = Math.max(1, 5 * SCALE)
const UNLOADED_CLIENTS = CAPACITY / 2
/** The targets' bands: limit within +-25 % of C, upstream in flight <= 1.25 C. */
const BAND = 0.25
const SETTLE_TARGET_S = 5
/** Per-run start and stop of the processes, for the estimate shown before the run. */
const OVERHEAD_S = 2
const ROUTE = 'sim'
const REQUEST_PATH = '/work'
const RESULTS_DIR = new URL('../results/', import.meta.url)

interface PlanEvent {
  atS: number
  capacity?: number
  replicas?: number
}

interface Plan {
  key: 'steady' | 'halving' | 'replicas'
  title: string
  seconds: number
  replicas: number
  events: PlanEvent[]
}

const PLANS: Plan[] = [
  {
    key: 'steady',
    title: `1. steady, C = ${CAPACITY}`,
    seconds: 30 * SCALE,
    replicas: REPLICAS,
    events: [],
  },
  {
    key: 'halving',
    title: `2. C ${CAPACITY} -> ${CAPACITY / 2} at ${20 * SCALE} s -> ${CAPACITY} at ${40 * SCALE} s`,
    seconds: 60 * SCALE,
    replicas: REPLICAS,
    events: [
      { atS: 20 * SCALE, capacity: CAPACITY / 2 },
      { atS: 40 * SCALE, capacity: CAPACITY },
    ],
  },
  {
    key: 'replicas',
    title: `3. replicas 1 -> ${REPLICAS} at ${15 * SCALE} s -> 1 at ${30 * SCALE} s`,
    seconds: 45 * SCALE,
    replicas: 1,
    events: [
      { atS: 15 * SCALE, replicas: REPLICAS },
      { atS: 30 * SCALE, replicas: 1 },
    ],
  },
]

interface Variant {
  key: 'oracle' | 'high' | 'low' | 'local' | 'fleet'
  name: string
  permits?: number
  scope?: 'local' | 'fleet'
  /** The oracle knows C: its limit is set to the new C (PUT /limits) the moment C changes. */
  followsCapacity: boolean
}

const VARIANTS: Variant[] = [
  { key: 'oracle', name: 'fixed C (oracle)', permits: CAPACITY, followsCapacity: true },
  { key: 'high', name: `fixed 4C = ${4 * CAPACITY}`, permits: 4 * CAPACITY, followsCapacity: false },
  { key: 'low', name: `fixed C/4 = ${CAPACITY / 4}`, permits: CAPACITY / 4, followsCapacity: false },
  { key: 'local', name: 'adaptive, local (per replica)', scope: 'local', followsCapacity: false },
  { key: 'fleet', name: 'adaptive, fleet-wide', scope: 'fleet', followsCapacity: false },
]

/** What one replica's GET /limits said. */
interface ReplicaSample {
  replica: number
  effective: number
  holders: number
  queued: number
  limit?: number
  estimate?: number
  leader?: boolean
  replicas?: number
  reason?: string
}

interface Tick {
  /** Seconds since the load started. */
  t: number
  /** The replicas polled (up at that moment); some may not have answered. */
  up: number[]
  samples: ReplicaSample[]
}

interface UpstreamStats {
  ok: number
  shed: number
  abandoned: number
  notKept: number
  samples: { t: number[]; inFlight: number[]; max: number[]; capacity: number[]; overMs: number[] }
  completions: { t: number[]; latency: number[] }
}

interface LoadResult {
  seconds: number
  requests: number
  statuses: Record<string, number>
  errors: number
  firstError: string | null
  clientsStopped: boolean
  p50Ms: number
  p99Ms: number
}

/** A limit over time, one point per poll: fleet and fixed, the one limit; local, the replicas' sum. */
interface LimitSeries {
  t: number[]
  limit: number[]
  /** Permits held (fleet and fixed: fleet-wide, from the store; local: the replicas' sum). */
  holders: number[]
  /** A probe of the baseline (the limit at three quarters of the estimate, or a quarter) or within a
   * window after one. */
  excluded: boolean[]
  probes: number
}

interface RunMetrics {
  plan: Plan['key']
  variant: Variant['key']
  goodput: number
  p50Ms: number
  p99Ms: number
  /** Share of the measured time the upstream's in flight was <= 1.25 C (C of that moment). */
  inFlightOkShare: number
  inFlightMax: number
  inFlightP99: number
  inFlightMean: number
  holdersMean: number
  drainsMs: number[]
  clientP99Ms: number
  rejected: number
  errors: number
  firstError: string | null
  limitMedian: number
  /** Seconds from the load's start until the limit stayed within +-25 % of C (before any event). */
  settledFromStartS: number | undefined
  steady: { median: number; min: number; max: number } | undefined
  halvedSettledS: number | undefined
  restoredSettledS: number | undefined
  phaseMedians: number[]
  /** Seconds from the replicas' removal until some replica led again (fleet). */
  leaderAgainS: number | undefined
  series: LimitSeries
  perSecond: { goodput: number[]; p99Ms: number[] }
  /** Mean upstream in flight per 250 ms. */
  inFlight: { t: number[]; value: number[] }
  events: { t: number; what: string }[]
}

const now = () => performance.timeOrigin + performance.now()
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))
const range = (n: number) => Array.from({ length: n }, (_, i) => i)

/** JSON over node:http (fetch would send an Origin on a PUT, which the admin API refuses). The polls
 * of /limits keep their connections alive; every other call takes a connection of its own, so no call
 * that matters can meet a kept connection its server is closing. */
function controlClient() {
  const pollAgent = new http.Agent({ keepAlive: true, maxSockets: 16 })
  const onceAgent = new http.Agent({ keepAlive: false })
  const call = <T = unknown>(method: string, url: string, body?: unknown, timeoutMs = 30_000, poll = false) =>
    new Promise<T>((resolve, reject) => {
      const fail = (error: Error) => reject(new Error(`${method} ${url}: ${error.message}`))
      const payload = body === undefined ? undefined : JSON.stringify(body)
      const headers: Record<string, string | number> =
        payload === undefined
          ? {}
          : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) }
      const agent = poll ? pollAgent : onceAgent
      const req = http.request(url, { method, agent, headers, timeout: timeoutMs }, (res) => {
        const chunks: Buffer[] = []
        res.on('data', (chunk: Buffer) => chunks.push(chunk))
        res.on('error', fail)
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8')
          if ((res.statusCode ?? 0) >= 400) return fail(new Error(`${res.statusCode} ${text.slice(0, 300)}`))
          try {
            resolve((text === '' ? undefined : JSON.parse(text)) as T)
          } catch (error) {
            fail(error as Error)
          }
        })
      })
      req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)))
      req.on('error', fail)
      req.end(payload)
    })
  return {
    call,
    close: () => {
      pollAgent.destroy()
      onceAgent.destroy()
    },
  }
}
type Call = ReturnType<typeof controlClient>['call']

function capacityAt(plan: Plan, t: number): number {
  let capacity = CAPACITY
  for (const event of plan.events)
    if (event.capacity !== undefined && t >= event.atS) capacity = event.capacity
  return capacity
}

function gatewayConfig(variant: Variant, upstream: string): unknown {
  const limit = variant.scope
    ? { adaptive: { ...ADAPTIVE, scope: variant.scope } }
    : { permits: variant.permits as number }
  return {
    routes: [
      {
        name: ROUTE,
        match: { pathPrefix: '/' },
        upstream,
        concurrency: { per: 'route', maxWaitMs: MAX_WAIT_MS, maxQueue: MAX_QUEUE, ...limit },
      },
    ],
  }
}

interface Replica {
  index: number
  url: string
  admin: string
  process: BenchProcess
}

interface LimitsReply {
  routes: {
    buckets?: {
      effective: number
      holders: number
      queued: number
      adaptive?: { limit: number; estimate: number; leader: boolean; replicas: number; reason?: string }
    }[]
  }[]
}

async function poll(call: Call, replicas: readonly Replica[]): Promise<ReplicaSample[]> {
  const answers = await Promise.all(
    replicas.map(async (replica): Promise<ReplicaSample | undefined> => {
      try {
        const reply = await call<LimitsReply>('GET', `${replica.admin}/limits`, undefined, 1000, true)
        const bucket = reply.routes[0]?.buckets?.[0]
        if (!bucket) return undefined
        return {
          replica: replica.index,
          effective: bucket.effective,
          holders: bucket.holders,
          queued: bucket.queued,
          ...(bucket.adaptive
            ? {
                limit: bucket.adaptive.limit,
                estimate: bucket.adaptive.estimate,
                leader: bucket.adaptive.leader,
                replicas: bucket.adaptive.replicas,
                reason: bucket.adaptive.reason,
              }
            : {}),
        }
      } catch {
        return undefined // a replica starting or stopping: no sample this tick
      }
    }),
  )
  return answers.filter((answer): answer is ReplicaSample => answer !== undefined)
}

interface RawRun {
  ticks: Tick[]
  upstream: UpstreamStats
  load: LoadResult
  /** Epoch ms at the load's start. */
  t0: number
  events: { t: number; what: string }[]
  /** SIGTERM to exit of each replica that left during the run, ms. */
  drainsMs: number[]
}

/** One plan x variant: fresh upstream, gateways on a fresh key prefix, the load for the plan's length. */
async function runOnce(
  ctx: BenchContext,
  call: Call,
  loadUrl: string,
  plan: Plan,
  variant: Variant,
  dir: string,
): Promise<RawRun> {
  const processes: BenchProcess[] = []
  const prefix = `bench-adaptive-${plan.key}-${variant.key}`
  const redisUrl = `redis://${ctx.redis.host}:${ctx.redis.port}`
  let loadRunning = false
  try {
    const upstream = await startProcess(
      'bench/lib/upstream-sim.ts',
      ['--capacity', String(CAPACITY), '--service-ms', String(SERVICE_MS), '--jitter', String(JITTER)],
      /(http:\/\/\S+)/,
    )
    processes.push(upstream)
    const configFile = path.join(dir, `${prefix}.json`)
    writeFileSync(configFile, JSON.stringify(gatewayConfig(variant, upstream.ready)))
    let nextIndex = 0
    const startReplica = async (): Promise<Replica> => {
      const index = nextIndex++
      const adminPort = await freePort()
      const started = await startProcess(
        GATEWAY_BIN,
        [
          '--config',
          configFile,
          '--port',
          '0',
          '--admin-port',
          String(adminPort),
          '--redis',
          redisUrl,
          '--prefix',
          prefix,
          '--log-level',
          'warn',
        ],
        /(http:\/\/\S+)/,
      )
      processes.push(started)
      return { index, url: started.ready, admin: `http://127.0.0.1:${adminPort}`, process: started }
    }
    let up: Replica[] = await Promise.all(range(plan.replicas).map(() => startReplica()))
    const events: { t: number; what: string }[] = []
    const drainsMs: number[] = []
    await call('POST', `${loadUrl}/start`, {
      clients: CLIENTS,
      targets: up.map((r) => r.url),
      path: REQUEST_PATH,
      measureAfterMs: WARMUP_S * 1000,
    })
    loadRunning = true
    const t0 = now()
    const elapsed = () => (now() - t0) / 1000
    const note = (what: string) => events.push({ t: elapsed(), what })

    const apply = async (event: PlanEvent): Promise<void> => {
      if (event.capacity !== undefined) {
        const capacity = event.capacity
        await Promise.all([
          call('POST', `${upstream.ready}/_control?capacity=${capacity}`),
          variant.followsCapacity
            ? call('PUT', `${up[0]!.admin}/limits/${ROUTE}`, { permits: capacity })
            : Promise.resolve(),
        ])
        note(`C = ${capacity}`)
      }
      if (event.replicas !== undefined && event.replicas > up.length) {
        const added = await Promise.all(range(event.replicas - up.length).map(() => startReplica()))
        up = [...up, ...added]
        await call('POST', `${loadUrl}/targets`, { targets: up.map((r) => r.url) })
        note(`${up.length} replicas`)
      } else if (event.replicas !== undefined && event.replicas < up.length) {
        // The oldest go (the first one led the fleet): the load leaves them first, then they drain.
        const leaving = up.slice(0, up.length - event.replicas)
        up = up.slice(up.length - event.replicas)
        await call('POST', `${loadUrl}/targets`, { targets: up.map((r) => r.url) })
        note(`${up.length} replica${up.length === 1 ? '' : 's'}`)
        // How long each took from SIGTERM to its exit (3 s: it did not drain and was SIGKILLed).
        await Promise.all(
          leaving.map(async (replica) => {
            const stopping = performance.now()
            await replica.process.stop()
            drainsMs.push(Math.round(performance.now() - stopping))
          }),
        )
      }
    }

    const ticks: Tick[] = []
    // Events run one after another (a replica start may take a while), beside the polls; a failed
    // one ends the run once the plan's time is up (the rest are skipped).
    let applied = Promise.resolve()
    let failure: unknown
    let nextEvent = 0
    while (elapsed() < plan.seconds) {
      while (nextEvent < plan.events.length && elapsed() >= plan.events[nextEvent]!.atS) {
        const event = plan.events[nextEvent++]!
        applied = applied
          .then(() => (failure === undefined ? apply(event) : undefined))
          .catch((error: unknown) => {
            failure ??= error
          })
      }
      const t = elapsed()
      const polled = up
      ticks.push({ t, up: polled.map((r) => r.index), samples: await poll(call, polled) })
      const due = Math.min(plan.seconds, plan.events[nextEvent]?.atS ?? Infinity)
      await sleep(Math.max(0, Math.min(POLL_MS - (elapsed() - t) * 1000, (due - elapsed()) * 1000)))
    }
    await applied
    if (failure !== undefined) throw failure
    const load = await call<LoadResult>('POST', `${loadUrl}/stop`)
    loadRunning = false
    const stats = await call<UpstreamStats>('GET', `${upstream.ready}/_stats`)
    return { ticks, upstream: stats, load, t0, events, drainsMs }
  } finally {
    if (loadRunning) await call('POST', `${loadUrl}/stop`).catch(() => undefined)
    await Promise.all(processes.map((child) => child.stop()))
  }
}

/** The limit per poll; ticks in a probe of the baseline, or within a window after one, are marked. */
function limitSeries(ticks: readonly Tick[], variant: Variant): LimitSeries {
  const series: LimitSeries = { t: [], limit: [], holders: [], excluded: [], probes: 0 }
  let lastProbeT = Number.NEGATIVE_INFINITY
  let inProbe = false
  // A replica that did not answer one poll counts with its last answer (local sums would dip else).
  const last = new Map<number, ReplicaSample>()
  for (const tick of ticks) {
    for (const sample of tick.samples) last.set(sample.replica, sample)
    const known = tick.up.map((replica) => last.get(replica)).filter((s) => s !== undefined)
    if (tick.samples.length === 0 || known.length === 0) continue
    const probing = known.some(
      (s) => s.limit !== undefined && s.estimate !== undefined && s.limit < 0.85 * s.estimate,
    )
    if (probing && !inProbe) series.probes++
    inProbe = probing
    if (probing) lastProbeT = tick.t
    const one = tick.samples.find((s) => s.leader) ?? tick.samples[0]!
    const local = variant.scope === 'local'
    series.t.push(tick.t)
    series.limit.push(local ? known.reduce((sum, s) => sum + s.effective, 0) : one.effective)
    series.holders.push(local ? known.reduce((sum, s) => sum + s.holders, 0) : one.holders)
    series.excluded.push(probing || tick.t - lastProbeT <= WINDOW_MS / 1000)
  }
  return series
}

/** Seconds after `from` until the limit entered [target x 0.75, target x 1.25] and stayed there until
 * `to` (probe ticks aside); undefined when it was outside at the end. */
function settledAfter(series: LimitSeries, from: number, to: number, target: number): number | undefined {
  const low = target * (1 - BAND)
  const high = target * (1 + BAND)
  let settled: number | undefined = from
  let lastInRange: number | undefined
  for (let i = 0; i < series.t.length; i++) {
    const t = series.t[i]!
    if (t < from || t >= to || series.excluded[i]) continue
    lastInRange = t
    const value = series.limit[i]!
    if (value < low || value > high) settled = undefined
    else settled ??= t
  }
  return lastInRange === undefined || settled === undefined ? undefined : settled - from
}

function limitsBetween(series: LimitSeries, from: number, to: number): number[] {
  return series.limit.filter((_, i) => series.t[i]! >= from && series.t[i]! < to && !series.excluded[i])
}

function analyse(plan: Plan, variant: Variant, raw: RawRun): RunMetrics {
  const from = WARMUP_S
  const to = plan.seconds
  const rel = (epochMs: number) => (epochMs - raw.t0) / 1000
  // Upstream completions in the measured time.
  const { t: ends, latency } = raw.upstream.completions
  const measured: number[] = []
  const perSecond = range(Math.ceil(to)).map(() => [] as number[])
  for (let i = 0; i < ends.length; i++) {
    const t = rel(ends[i]!)
    if (t < 0 || t >= to) continue
    perSecond[Math.floor(t)]?.push(latency[i]!)
    if (t >= from) measured.push(latency[i]!)
  }
  measured.sort((a, b) => a - b)
  // In flight: the exact time above 1.25 C within each 50 ms sample.
  const samples = raw.upstream.samples
  let overMs = 0
  let spanMs = 0
  let inFlightMax = 0
  const inFlightSeen: number[] = []
  const quarter = range(Math.ceil(to * 4)).map(() => ({ sum: 0, n: 0 }))
  for (let i = 1; i < samples.t.length; i++) {
    const t = rel(samples.t[i]!)
    if (t >= 0 && t < to) {
      const bucket = quarter[Math.floor(t * 4)]!
      bucket.sum += samples.inFlight[i]!
      bucket.n++
    }
    if (t <= from || t > to) continue
    overMs += samples.overMs[i]!
    spanMs += samples.t[i]! - samples.t[i - 1]!
    inFlightMax = Math.max(inFlightMax, samples.max[i]!)
    inFlightSeen.push(samples.inFlight[i]!)
  }
  inFlightSeen.sort((a, b) => a - b)
  const series = limitSeries(raw.ticks, variant)
  const adaptive = variant.scope !== undefined
  const firstEvent = plan.events[0]?.atS ?? to
  const settledFromStartS = adaptive ? settledAfter(series, 0, firstEvent, CAPACITY) : undefined
  let steady: RunMetrics['steady']
  if (adaptive && plan.key === 'steady') {
    // From when it settled; from the warm-up's end if it never did (the range then says why).
    const values = limitsBetween(series, Math.max(from, settledFromStartS ?? from), to)
    if (values.length > 0)
      steady = { median: median(values), min: Math.min(...values), max: Math.max(...values) }
  }
  const drop = plan.events.find((e) => e.capacity !== undefined && e.capacity < CAPACITY)
  const back = plan.events.find((e) => e.capacity === CAPACITY)
  const halvedSettledS =
    adaptive && drop ? settledAfter(series, drop.atS, back?.atS ?? to, drop.capacity!) : undefined
  const restoredSettledS = adaptive && back ? settledAfter(series, back.atS, to, CAPACITY) : undefined
  // Median limit per phase between events (the first 2 s of each left out: the limit moves then).
  const bounds = [0, ...plan.events.map((e) => e.atS), to]
  const phaseMedians = bounds
    .slice(0, -1)
    .map((start, i) => median(limitsBetween(series, start + 2 * SCALE, bounds[i + 1]!)))
  let leaderAgainS: number | undefined
  const shrink = plan.events.find((e) => e.replicas !== undefined && e.replicas < REPLICAS)
  if (variant.scope === 'fleet' && shrink) {
    const removed = raw.events.find((e) => e.what.endsWith(' replica'))?.t ?? shrink.atS
    const again = raw.ticks.find((tick) => tick.t > removed && tick.samples.some((s) => s.leader))
    leaderAgainS = again ? again.t - removed : undefined
  }
  const statuses = raw.load.statuses
  const rejected = Object.entries(statuses).reduce(
    (sum, [status, n]) => (status === '200' ? sum : sum + n),
    0,
  )
  const perSecondSorted = perSecond.map((values) => values.sort((a, b) => a - b))
  return {
    plan: plan.key,
    variant: variant.key,
    goodput: measured.length / (to - from),
    p50Ms: percentile(measured, 50),
    p99Ms: percentile(measured, 99),
    // max: the exact time over can pass the span by a rounding (a share of -0.0 %).
    inFlightOkShare: spanMs > 0 ? Math.max(0, 1 - overMs / spanMs) : Number.NaN,
    inFlightMax,
    inFlightP99: percentile(inFlightSeen, 99),
    inFlightMean: inFlightSeen.reduce((sum, n) => sum + n, 0) / inFlightSeen.length,
    holdersMean: mean(series.holders.filter((_, i) => series.t[i]! >= from && series.t[i]! < to)),
    drainsMs: raw.drainsMs,
    clientP99Ms: raw.load.p99Ms,
    rejected,
    errors: raw.load.errors,
    firstError: raw.load.firstError,
    limitMedian: median(limitsBetween(series, from, to)),
    settledFromStartS,
    steady,
    halvedSettledS,
    restoredSettledS,
    phaseMedians,
    leaderAgainS,
    series,
    perSecond: {
      goodput: perSecondSorted.map((values) => values.length),
      p99Ms: perSecondSorted.map((values) => round(percentile(values, 99))),
    },
    inFlight: {
      t: quarter.map((_, i) => (i + 0.5) / 4),
      value: quarter.map((b) => (b.n === 0 ? Number.NaN : round(b.sum / b.n))),
    },
    events: raw.events.map((e) => ({ t: round(e.t), what: e.what })),
  }
}

const round = (value: number) => Math.round(value * 100) / 100
const mean = (values: readonly number[]) => values.reduce((sum, n) => sum + n, 0) / values.length

/** The upstream alone, UNLOADED_CLIENTS closed-loop clients straight at it: its unloaded latency. */
async function measureUnloaded(call: Call, loadUrl: string) {
  const upstream = await startProcess(
    'bench/lib/upstream-sim.ts',
    ['--capacity', String(CAPACITY), '--service-ms', String(SERVICE_MS), '--jitter', String(JITTER)],
    /(http:\/\/\S+)/,
  )
  let loadRunning = false
  try {
    await call('POST', `${loadUrl}/start`, {
      clients: UNLOADED_CLIENTS,
      targets: [upstream.ready],
      path: REQUEST_PATH,
    })
    loadRunning = true
    const t0 = now()
    await sleep(UNLOADED_S * 1000)
    await call('POST', `${loadUrl}/stop`)
    loadRunning = false
    const stats = await call<UpstreamStats>('GET', `${upstream.ready}/_stats`)
    // The first fifth is warm-up (connections, JIT).
    const skip = t0 + (UNLOADED_S * 1000) / 5
    const values = stats.completions.latency.filter((_, i) => stats.completions.t[i]! >= skip)
    values.sort((a, b) => a - b)
    return {
      p50Ms: percentile(values, 50),
      p99Ms: percentile(values, 99),
      perSecond: values.length / ((UNLOADED_S * 4) / 5),
    }
  } finally {
    if (loadRunning) await call('POST', `${loadUrl}/stop`).catch(() => undefined)
    await upstream.stop()
  }
}

const COLORS = { fleet: '#1f77b4', local: '#ff7f0e', oracle: '#2ca02c', capacity: '#222', bound: '#d62728' }

function plot(
  results: readonly RunMetrics[],
  unloadedP99: number,
  title: string,
): { svg: string; plans: string[] } {
  const plans = PLANS.filter((p) => p.key !== 'steady')
  const pick = (plan: Plan, variant: Variant['key']) =>
    results.find((r) => r.plan === plan.key && r.variant === variant)
  const points = (t: readonly number[], v: readonly number[]) =>
    t.map((x, i): [number, number] => [x, v[i]!]).filter((p) => Number.isFinite(p[1]))
  const capacityLine = (plan: Plan, factor: number, name: string, color: string, dash: string): Line => ({
    name,
    color,
    dash,
    step: true,
    width: 1.5,
    points: [0, ...plan.events.filter((e) => e.capacity !== undefined).map((e) => e.atS), plan.seconds].map(
      (t): [number, number] => [t, capacityAt(plan, t) * factor],
    ),
  })
  const columns = plans.map((plan) => {
    const fleet = pick(plan, 'fleet')
    const local = pick(plan, 'local')
    const oracle = pick(plan, 'oracle')
    const markers = (fleet ?? local)?.events.map((e) => ({ x: e.t, label: e.what })) ?? []
    const limit: Panel = {
      title: `${plan.title}: the limit in force`,
      xLabel: 'seconds since the load started',
      yLabel: 'requests',
      xMax: plan.seconds,
      markers,
      lines: [
        capacityLine(plan, 1, 'true capacity C', COLORS.capacity, '6 4'),
        ...(local
          ? [
              {
                name: 'adaptive, local: sum over replicas',
                color: COLORS.local,
                step: true,
                points: points(local.series.t, local.series.limit),
              },
            ]
          : []),
        ...(fleet
          ? [
              {
                name: 'adaptive, fleet-wide',
                color: COLORS.fleet,
                step: true,
                width: 2,
                points: points(fleet.series.t, fleet.series.limit),
              },
            ]
          : []),
      ],
    }
    const runs = [
      { run: oracle, name: 'fixed C (oracle)', color: COLORS.oracle },
      { run: local, name: 'adaptive, local', color: COLORS.local },
      { run: fleet, name: 'adaptive, fleet-wide', color: COLORS.fleet },
    ].filter((entry): entry is { run: RunMetrics; name: string; color: string } => entry.run !== undefined)
    const inFlight: Panel = {
      title: 'upstream in flight (serving + queued), mean per 250 ms',
      xLabel: 'seconds since the load started',
      yLabel: 'requests',
      xMax: plan.seconds,
      markers,
      lines: [
        capacityLine(plan, 1 + BAND, '1.25 C', COLORS.bound, '2 3'),
        ...runs.map(({ run, name, color }) => ({
          name,
          color,
          width: run.variant === 'fleet' ? 2 : 1.2,
          points: points(run.inFlight.t, run.inFlight.value),
        })),
      ],
    }
    const p99: Panel = {
      title: 'upstream latency, p99 per second (arrival to response)',
      xLabel: 'seconds since the load started',
      yLabel: 'ms',
      xMax: plan.seconds,
      markers,
      lines: [
        {
          name: '2 x unloaded p99',
          color: COLORS.bound,
          dash: '2 3',
          points: [
            [0, 2 * unloadedP99],
            [plan.seconds, 2 * unloadedP99],
          ],
        },
        ...runs.map(({ run, name, color }) => ({
          name,
          color,
          width: run.variant === 'fleet' ? 2 : 1.2,
          points: points(
            run.perSecond.p99Ms.map((_, i) => i + 0.5),
            run.perSecond.p99Ms,
          ),
        })),
      ],
    }
    return [limit, inFlight, p99]
  })
  const rows = [0, 1, 2].map((row) => columns.map((column) => column[row]!))
  return {
    svg: renderFigure({
      title,
      subtitle: [
        `Upstream simulator: C = ${CAPACITY} served at once, S = ${SERVICE_MS} ms +-${JITTER * 100} %, the rest queue inside it; ${CLIENTS} closed-loop clients; gateways on one Redis; adaptive: ${JSON.stringify(ADAPTIVE)}.`,
        'Local: each replica runs its own limit on its own samples; the line is their sum, what the upstream faces. Dips to three quarters of the limit are probes of the baseline.',
      ],
      rows,
    }),
    plans: plans.map((p) => p.key),
  }
}

const text = (value: number | undefined, digits = 1, unit = ' s') =>
  value === undefined || !Number.isFinite(value) ? 'n/a' : `${value.toFixed(digits)}${unit}`
const pct = (value: number) => (Number.isFinite(value) ? `${(value * 100).toFixed(1)} %` : 'n/a')

export const adaptiveScenario: Scenario = {
  name: 'adaptive',
  title: `adaptive limits: upstream of capacity C = ${CAPACITY} (S = ${SERVICE_MS} ms), ${CLIENTS} closed-loop clients, ${REPLICAS} gateway replicas on one Redis; fixed C / 4C / C/4 vs adaptive local and fleet-wide${QUICK ? ' (QUICK: every plan at a tenth of its length)' : ''}`,
  seconds: Math.round(
    UNLOADED_S + 3 + VARIANTS.length * PLANS.reduce((sum, plan) => sum + plan.seconds + OVERHEAD_S, 0),
  ),
  async run(ctx) {
    requireBuiltGateway()
    const control = controlClient()
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tollgate-bench-adaptive-'))
    const forgetDir = onProcessExit(() => rmSync(dir, { recursive: true, force: true }))
    let load: BenchProcess | undefined
    try {
      load = await startProcess('bench/lib/closed-loop.ts', [], /(http:\/\/\S+)/)
      const unloaded = await measureUnloaded(control.call, load.ready)
      ctx.log(
        `  unloaded upstream (${UNLOADED_CLIENTS} clients straight at it): p50 ${fmtFixed(unloaded.p50Ms)} ms, p99 ${fmtFixed(unloaded.p99Ms)} ms, ${fmtInt(unloaded.perSecond)}/s`,
      )
      const results: RunMetrics[] = []
      const loads: Record<string, LoadResult> = {}
      for (const plan of PLANS) {
        for (const variant of VARIANTS) {
          const raw = await runOnce(ctx, control.call, load.ready, plan, variant, dir)
          const metrics = analyse(plan, variant, raw)
          results.push(metrics)
          loads[`${plan.key}/${variant.key}`] = raw.load
          ctx.log(
            `  ${plan.key} / ${variant.name}: ${fmtInt(metrics.goodput)}/s, upstream p99 ${fmtFixed(metrics.p99Ms)} ms, in flight <= 1.25 C ${pct(metrics.inFlightOkShare)}, limit median ${fmtFixed(metrics.limitMedian, 1)}, rejected ${metrics.rejected}, errors ${metrics.errors}`,
          )
        }
      }
      const find = (plan: Plan['key'], variant: Variant['key']) =>
        results.find((r) => r.plan === plan && r.variant === variant)!
      const planOf = (key: Plan['key']) => PLANS.find((p) => p.key === key)!
      const variantOf = (key: Variant['key']) => VARIANTS.find((v) => v.key === key)!

      const main: Table = {
        columns: [
          'plan',
          'variant',
          'goodput/s',
          'x oracle',
          'upstream p50',
          'upstream p99',
          'x unloaded p99',
          'time in flight <= 1.25 C',
          'in flight mean',
          'in flight p99',
          'in flight max',
          'limit median',
          'permits held mean',
          'client p99',
          'rejected',
          'errors',
        ],
        rows: results.map((r) => [
          r.plan,
          variantOf(r.variant).name,
          fmtInt(r.goodput),
          fmtFixed(r.goodput / find(r.plan, 'oracle').goodput),
          text(r.p50Ms, 2, ' ms'),
          text(r.p99Ms, 2, ' ms'),
          fmtFixed(r.p99Ms / unloaded.p99Ms),
          pct(r.inFlightOkShare),
          fmtFixed(r.inFlightMean, 1),
          fmtInt(r.inFlightP99),
          fmtInt(r.inFlightMax),
          fmtFixed(r.limitMedian, 1),
          fmtFixed(r.holdersMean, 1),
          text(r.clientP99Ms, 1, ' ms'),
          fmtInt(r.rejected),
          fmtInt(r.errors),
        ]),
      }
      const steadyText = (values: RunMetrics['steady']) =>
        values
          ? `${fmtFixed(values.median, 1)} (${values.min}..${values.max}; ${fmtFixed((values.min / values.median - 1) * 100, 0)} % / +${fmtFixed((values.max / values.median - 1) * 100, 0)} %)`
          : 'n/a'
      const adaptiveTable: Table = {
        columns: [
          'plan',
          'variant',
          `within +-25 % of C from the start after`,
          'steady: median (min..max)',
          `C halved: within +-25 % of ${CAPACITY / 2} after`,
          `C back: within +-25 % of ${CAPACITY} after`,
          'limit median per phase',
          'leader again after',
          'probes (excluded)',
        ],
        rows: results
          .filter((r) => variantOf(r.variant).scope !== undefined)
          .map((r) => [
            r.plan,
            variantOf(r.variant).name,
            text(r.settledFromStartS),
            r.plan === 'steady' ? steadyText(r.steady) : '-',
            r.plan === 'halving' ? text(r.halvedSettledS) : '-',
            r.plan === 'halving' ? text(r.restoredSettledS) : '-',
            r.phaseMedians.map((m) => fmtFixed(m, 1)).join(' / '),
            r.plan === 'replicas' && r.variant === 'fleet' ? text(r.leaderAgainS) : '-',
            String(r.series.probes),
          ]),
      }

      const fleet = (plan: Plan['key']) => find(plan, 'fleet')
      const local = (plan: Plan['key']) => find(plan, 'local')
      const ratio = (plan: Plan['key'], variant: Variant['key']) =>
        find(plan, variant).goodput / find(plan, 'oracle').goodput
      const p99Limit = 2 * unloaded.p99Ms
      const steadyOf = (r: RunMetrics) =>
        r.steady !== undefined &&
        r.steady.max <= r.steady.median * (1 + BAND) &&
        r.steady.min >= r.steady.median * (1 - BAND)
      const planKeys = PLANS.map((p) => p.key)
      const verdicts: Verdict[] = [
        {
          target: 'fleet-wide adaptive: goodput >= 0.95 x the oracle (fixed C) in every plan',
          pass: planKeys.every((plan) => ratio(plan, 'fleet') >= 0.95),
          detail: `${planKeys.map((plan) => `${plan} ${fmtFixed(ratio(plan, 'fleet'))} x (${fmtInt(fleet(plan).goodput)}/s vs ${fmtInt(find(plan, 'oracle').goodput)}/s)`).join(', ')}; local-only ${planKeys.map((plan) => `${plan} ${fmtFixed(ratio(plan, 'local'))} x`).join(', ')}`,
        },
        {
          target: `fleet-wide adaptive: upstream p99 of admitted requests <= 2 x the unloaded p99 (steady plan)`,
          pass: fleet('steady').p99Ms <= p99Limit,
          detail: `${fmtFixed(fleet('steady').p99Ms)} ms vs 2 x ${fmtFixed(unloaded.p99Ms)} ms = ${fmtFixed(p99Limit)} ms (halving ${fmtFixed(fleet('halving').p99Ms)} ms, replicas ${fmtFixed(fleet('replicas').p99Ms)} ms); local-only steady ${fmtFixed(local('steady').p99Ms)} ms, oracle ${fmtFixed(find('steady', 'oracle').p99Ms)} ms`,
        },
        {
          target: 'fleet-wide adaptive: upstream in flight <= 1.25 C for >= 99 % of the time (steady plan)',
          pass: fleet('steady').inFlightOkShare >= 0.99,
          detail: `${pct(fleet('steady').inFlightOkShare)}, in flight max ${fleet('steady').inFlightMax} (halving ${pct(fleet('halving').inFlightOkShare)}, replicas ${pct(fleet('replicas').inFlightOkShare)}); local-only steady ${pct(local('steady').inFlightOkShare)}, max ${local('steady').inFlightMax} (replicas ${pct(local('replicas').inFlightOkShare)})`,
        },
        {
          target: `fleet-wide adaptive: after C halves, the limit is within +-25 % of ${CAPACITY / 2} within ${SETTLE_TARGET_S} s and stays`,
          pass: (fleet('halving').halvedSettledS ?? Infinity) <= SETTLE_TARGET_S,
          detail: `${text(fleet('halving').halvedSettledS)} (back to ${CAPACITY}: ${text(fleet('halving').restoredSettledS)}); local-only (sum) ${text(local('halving').halvedSettledS)}`,
        },
        {
          target:
            'fleet-wide adaptive: in steady state the limit stays within +-25 % of its median (steady plan, after it settled, probes excluded)',
          pass: steadyOf(fleet('steady')),
          detail: `${steadyText(fleet('steady').steady)}, C = ${CAPACITY}; local-only (sum) ${steadyText(local('steady').steady)}`,
        },
      ]

      const figure = plot(
        results,
        unloaded.p99Ms,
        `Adaptive limits: fleet-wide vs local-only vs the oracle${QUICK ? ' (QUICK smoke run)' : ''}`,
      )
      const svgFile = QUICK
        ? path.join(os.tmpdir(), 'tollgate-adaptive-quick.svg')
        : fileURLToPath(new URL('adaptive.svg', RESULTS_DIR))
      await mkdir(path.dirname(svgFile), { recursive: true })
      await writeFile(svgFile, figure.svg)
      ctx.log(`  plot: ${svgFile}`)

      const failed = results.filter((r) => r.firstError !== null)
      return {
        tables: [main, adaptiveTable],
        verdicts,
        notes: [
          `Upstream simulator (bench/lib/upstream-sim.ts, its own process): C = ${CAPACITY} requests served at once, each ${SERVICE_MS} ms x (1 +- ${JITTER}) uniform (a Node timer: it fires at or after that), the rest in a FIFO queue inside it; no 503s (its queue limit Q is off). In flight = serving + queued, sampled every 50 ms, the time above 1.25 C accounted exactly. Latency = arrival at the upstream to its response, for admitted requests only (what the gateway let through): the 'p99 of admitted requests'. Unloaded: ${UNLOADED_CLIENTS} closed-loop clients straight at the upstream for ${UNLOADED_S} s: p50 ${fmtFixed(unloaded.p50Ms)} ms, p99 ${fmtFixed(unloaded.p99Ms)} ms.`,
          `Load (bench/lib/closed-loop.ts, its own process): ${CLIENTS} closed-loop clients (3 C), keep-alive undici pools, round-robin over the replicas up at that moment. Gateways: the built bin (node ${GATEWAY_BIN}), one route per: route with maxWaitMs ${MAX_WAIT_MS} and maxQueue ${MAX_QUEUE} (requests wait in the fair queue rather than being rejected; 'rejected' = non-200 answers, 'errors' = failed connections, e.g. a replica leaving), --log-level warn, all on this run's Redis with a fresh key prefix per run. 'client p99': what the clients saw, queueing in the gateway included. 'in flight mean': the upstream's, sampled every 50 ms; 'permits held mean': the gateway's holders over the polls (fixed and fleet: fleet-wide, from the store; local: the replicas' sum): a limit the upstream never sees fully used is lost to the gateway's own path (hand-over of a permit to the next waiter, proxying).`,
          `Variants, one after another in each plan (never at once: they share this 2-core machine with Redis, the upstream and the load): fixed ${CAPACITY} (the oracle; in the halving plan it is set to the new C through PUT /limits/${ROUTE} the moment C changes), fixed ${4 * CAPACITY} (too high), fixed ${CAPACITY / 4} (too low), adaptive ${JSON.stringify(ADAPTIVE)} with scope local (each replica its own limit from its own samples: the summed limit is what the upstream faces) and scope fleet (one limit, stepped by the leader from every replica's samples). Fixed limits are fleet-wide (one permit set in Redis).`,
          `Every number leaves out the first ${WARMUP_S} s after the load started (all variants alike: connections, JIT, the adaptive limit's slow start from ${ADAPTIVE.initial}); goodput = 200s per second at the upstream over the rest. Plans: steady ${planOf('steady').seconds} s; halving ${planOf('halving').seconds} s, C = ${CAPACITY / 2} from ${planOf('halving').events[0]!.atS} s to ${planOf('halving').events[1]!.atS} s; replicas ${planOf('replicas').seconds} s, 1 replica, ${REPLICAS} from ${planOf('replicas').events[0]!.atS} s (once started), 1 again from ${planOf('replicas').events[1]!.atS} s: the two oldest leave (the load stops sending to them, then SIGTERM; the first replica led the fleet, so leadership moves).`,
          `The limit: GET /limits of every replica every ${POLL_MS} ms (bucket 'effective'; fleet: the one limit, local: the sum over the replicas up). The controller runs one window in 60 (every ${(60 * WINDOW_MS) / 1000} s) at three quarters of its estimate (a quarter if that window still queued) to re-measure the baseline: polls in such a probe (limit < 0.85 x the estimate on some replica) and within one window (${WINDOW_MS} ms) after it are left out of the settling times and the steady range, not out of goodput, latency or in flight (a probe costs what it costs). 'within +-25 % of X after': from the start (or the change of C) until the limit entered [0.75 X, 1.25 X] and stayed there until the next change (n/a: it was outside at the end). 'steady': from when it settled to the end; ranges as % of the median. 'limit median per phase': between events, the first ${2 * SCALE} s of each left out. 'leader again after': from the leader's removal until a replica reported leading.`,
          `Plot: [adaptive.svg](adaptive.svg)${QUICK ? ` (QUICK runs write ${svgFile} instead)` : ''}: for the halving and replicas plans, the limit (fleet-wide, local summed, true C), the upstream's in flight (mean per 250 ms, against 1.25 C) and its p99 per second (against 2 x the unloaded p99), for fleet-wide, local and the oracle.`,
          ...(QUICK
            ? [
                'QUICK run (BENCH_ADAPTIVE_QUICK=1): every plan at a tenth of its length, shorter than a few of the controller windows: a smoke test of the harness, the numbers mean nothing.',
              ]
            : []),
          `Replicas leaving (replicas plan), SIGTERM to exit: ${results
            .filter((r) => r.plan === 'replicas')
            .map((r) => `${variantOf(r.variant).name} ${r.drainsMs.map((ms) => `${ms} ms`).join(', ')}`)
            .join('; ')} (3,000 ms or more: not drained, SIGKILLed by bench/lib/processes.ts).`,
          ...failed.map(
            (r) =>
              `Load errors in ${r.plan} / ${variantOf(r.variant).name}: ${r.errors}, the first: ${r.firstError}.`,
          ),
        ],
        data: {
          quick: QUICK,
          capacity: CAPACITY,
          serviceMs: SERVICE_MS,
          clients: CLIENTS,
          adaptive: ADAPTIVE,
          unloaded,
          plans: PLANS,
          variants: VARIANTS,
          loads,
          results: results.map((r) => ({
            ...r,
            series: {
              t: r.series.t.map(round),
              limit: r.series.limit,
              holders: r.series.holders,
              excluded: r.series.excluded,
              probes: r.series.probes,
            },
          })),
        },
      }
    } finally {
      await load?.stop()
      control.close()
      rmSync(dir, { recursive: true, force: true })
      forgetDir()
    }
  },
}

export const adaptiveScenarios: Scenario[] = [adaptiveScenario]
