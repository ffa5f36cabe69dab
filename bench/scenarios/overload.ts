// Overload scenario (docs/middleware.md, "Overload"): who gets in when demand exceeds capacity, with 3 gateway
// replicas in front of the upstream simulator of the adaptive bench (C slots of S ms each), under an
// open-loop load (bench/lib/open-loop.ts: arrivals at fixed rates, whatever the answers), each stream
// sticking to one replica (tenant i, or class i, to replica i mod 3: affinity, which a per-replica
// discipline cannot undo). Three shapes:
//   1. Netflix's: critical traffic at 0.5 C's throughput, steady; sheddable at 0.3 C, spiking 12x for
//      20 s;
//   2. a noisy tenant: one tenant offers 10x its fair share beside 9 at 0.5x theirs (after a phase
//      without it, for the quiet tenants' wait without the noisy one);
//   3. alone: one tenant offers 2x capacity.
// Four disciplines, each with a fixed limit of C and with the adaptive limit: FIFO (today); fixed
// per-tenant caps (today: per: tenant); priority and fairness per replica in memory (the Netflix and
// Kubernetes APF design: each replica its own share of C); and fleet-wide priority and fairness.
// BENCH_OVERLOAD_QUICK=1 runs every shape at a tenth of its length (a smoke run, not for results).
// Memory: the generator keeps at most 1,000,000 latencies; every run stops exactly the processes it
// started.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { freePort } from '../../test/helpers/redis-server.js'
import { GATEWAY_BIN } from '../lib/gateway-bin.js'
import { post } from '../lib/control.js'
import { type BenchProcess, startProcess } from '../lib/processes.js'
import { fmtFixed, fmtInt } from '../lib/report.js'
import type { BenchContext, Scenario, Table, Verdict } from '../lib/scenario.js'
import { percentile } from '../lib/stats.js'
import { type Line, type Panel, renderFigure } from '../lib/svg-plot.js'

const QUICK = process.env.BENCH_OVERLOAD_QUICK === '1'
/** BENCH_OVERLOAD_ONLY=fifo,fleet runs those disciplines alone (to look at one; not for results). */
const ONLY = process.env.BENCH_OVERLOAD_ONLY?.split(',')
/** BENCH_OVERLOAD_SHAPES=noisy,alone runs those shapes alone (not for results). */
const ONLY_SHAPES = process.env.BENCH_OVERLOAD_SHAPES?.split(',')
const SCALE = QUICK ? 0.1 : 1
const CAPACITY = 32
/** The simulator's service time. The issue's 10 ms makes C/S = 3,200 req/s and a spike of 13,000
 * offered a second, more than 3 gateways, the generator, Redis and the upstream can handle on 2
 * cores; the ratios (rates as shares of C/S) are what the targets are about. */
const SERVICE_MS = Number(process.env.BENCH_OVERLOAD_SERVICE_MS ?? 40)
const JITTER = 0.1
const THROUGHPUT = (CAPACITY * 1000) / SERVICE_MS
const REPLICAS = 3
const WINDOW_MS = 500
const ADAPTIVE = { min: 1, max: 256, initial: 8, windowMs: WINDOW_MS }
const MAX_WAIT_MS = 1000
const SHEDDABLE_WAIT_MS = 250
/** The fleet's queue bound of the fair variants (eviction of lower classes past it). */
const MAX_QUEUED = 4 * CAPACITY
const TENANTS = 10
const RESULTS_DIR = new URL('../results/', import.meta.url)
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))
const range = (n: number) => Array.from({ length: n }, (_, i) => i)

type Discipline = 'fifo' | 'caps' | 'local' | 'fleet'
type Limit = 'fixed' | 'adaptive'

interface StreamSpec {
  name: string
  /** Replica index. */
  replica: number
  headers: Record<string, string>
  rates: { atMs: number; perS: number }[]
}

interface Shape {
  key: 'netflix' | 'noisy' | 'alone'
  title: string
  seconds: number
  streams: StreamSpec[]
  /** Phases the verdicts read, seconds from the start. */
  phases: Record<string, [number, number]>
}

const s = (seconds: number) => seconds * SCALE
const ms = (seconds: number) => Math.round(seconds * SCALE * 1000)

const SHAPES: Shape[] = [
  {
    key: 'netflix',
    title: "Netflix's shape: critical at 0.5 C steady, sheddable at 0.3 C spiking 12x for 20 s",
    seconds: s(40),
    streams: [
      ...range(REPLICAS).map((r) => ({
        name: 'critical',
        replica: r,
        headers: { 'x-priority': 'critical', 'x-tenant': 'critical' },
        rates: [{ atMs: 0, perS: (0.5 * THROUGHPUT) / REPLICAS }],
      })),
      ...range(REPLICAS).map((r) => ({
        name: 'sheddable',
        replica: r,
        headers: { 'x-priority': 'sheddable', 'x-tenant': 'sheddable' },
        rates: [
          { atMs: 0, perS: (0.3 * THROUGHPUT) / REPLICAS },
          { atMs: ms(10), perS: (12 * 0.3 * THROUGHPUT) / REPLICAS },
          { atMs: ms(30), perS: (0.3 * THROUGHPUT) / REPLICAS },
        ],
      })),
    ],
    phases: { before: [s(3), s(10)], spike: [s(10), s(30)], after: [s(30), s(40)] },
  },
  {
    key: 'noisy',
    title: 'A noisy tenant: one offers 10x its fair share beside 9 at 0.5x theirs',
    seconds: s(30),
    streams: range(TENANTS).map((t) => ({
      name: t === 0 ? 'noisy' : `quiet-${t}`,
      replica: t % REPLICAS,
      headers: { 'x-tenant': `tenant-${t}` },
      rates:
        t === 0
          ? [
              { atMs: 0, perS: 0 },
              { atMs: ms(10), perS: (10 * THROUGHPUT) / TENANTS },
            ]
          : [{ atMs: 0, perS: (0.5 * THROUGHPUT) / TENANTS }],
    })),
    phases: { without: [s(3), s(10)], with: [s(12), s(30)] },
  },
  {
    key: 'alone',
    title: 'Alone: one tenant offers 2x capacity',
    seconds: s(20),
    streams: [
      {
        name: 'tenant-0',
        replica: 0,
        headers: { 'x-tenant': 'tenant-0' },
        rates: [{ atMs: 0, perS: 2 * THROUGHPUT }],
      },
    ],
    phases: { alone: [s(5), s(20)] },
  },
]

/** The route's concurrency for one discipline and limit (the gateway's config, docs/middleware.md, "Overload"). */
function concurrency(
  discipline: Discipline,
  limit: Limit,
  shape: Shape,
  replica: number,
): Record<string, unknown> {
  const share = (n: number) => Math.floor(n / REPLICAS) + (replica < n % REPLICAS ? 1 : 0)
  const base = { maxWaitMs: MAX_WAIT_MS, maxQueue: 100_000 }
  if (discipline === 'caps') {
    // Today's per-tenant caps: C split between the tenants (Netflix's shape: the class is the tenant,
    // critical 20 and sheddable 12).
    const overrides = shape.key === 'netflix' ? { critical: 20, sheddable: 12 } : {}
    return {
      ...base,
      per: 'tenant',
      tenantHeader: 'x-tenant',
      permits: Math.floor(CAPACITY / TENANTS),
      overrides,
    }
  }
  const permits =
    limit === 'adaptive'
      ? { adaptive: { ...ADAPTIVE, scope: discipline === 'local' ? 'local' : 'fleet' } }
      : { permits: discipline === 'local' ? share(CAPACITY) : CAPACITY }
  if (discipline === 'fifo') return { ...base, per: 'route', ...permits }
  return {
    ...base,
    per: 'route',
    ...permits,
    priority: {
      header: 'x-priority',
      trustHeader: true,
      default: 'standard',
      maxWaitMs: { critical: MAX_WAIT_MS, sheddable: SHEDDABLE_WAIT_MS },
    },
    flow: { from: 'header:x-tenant' },
    maxQueued: discipline === 'local' ? share(MAX_QUEUED) : MAX_QUEUED,
  }
}

interface StreamResult {
  name: string
  buckets: { sent: number; ok: number; rejected: Record<string, number>; errors: number; refused: number }[]
  samples: number[]
}

interface LoadResult {
  bucketMs: number
  drained: boolean
  samplesCapped: boolean
  streams: StreamResult[]
}

interface UpstreamStats {
  samples: { t: number[]; inFlight: number[]; max: number[]; capacity: number[]; overMs: number[] }
}

interface Run {
  shape: Shape['key']
  discipline: Discipline
  limit: Limit
  load: LoadResult
  /** Per 250 ms tick of the run: the limit in force summed over replicas (fleet: the leader's). */
  limits: { t: number; limit: number }[]
  upstream: UpstreamStats
  t0: number
}

async function getJson<T>(url: string): Promise<T | undefined> {
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(1000) })
    return response.ok ? ((await response.json()) as T) : undefined
  } catch {
    return undefined
  }
}

interface LimitsReply {
  routes: { buckets?: { effective: number; adaptive?: { limit: number; leader: boolean } }[] }[]
}

async function runOnce(
  ctx: BenchContext,
  loadUrl: string,
  shape: Shape,
  discipline: Discipline,
  limit: Limit,
  dir: string,
): Promise<Run> {
  const processes: BenchProcess[] = []
  const prefix = `bench-overload-${shape.key}-${discipline}-${limit}`
  try {
    const upstream = await startProcess(
      'bench/lib/upstream-sim.ts',
      ['--capacity', String(CAPACITY), '--service-ms', String(SERVICE_MS), '--jitter', String(JITTER)],
      /(http:\/\/\S+)/,
    )
    processes.push(upstream)
    const replicas = await Promise.all(
      range(REPLICAS).map(async (replica) => {
        const config = path.join(dir, `${prefix}-${replica}.json`)
        writeFileSync(
          config,
          JSON.stringify({
            routes: [
              {
                name: 'sim',
                match: { pathPrefix: '/' },
                upstream: upstream.ready,
                concurrency: concurrency(discipline, limit, shape, replica),
              },
            ],
          }),
        )
        const adminPort = await freePort()
        const store =
          discipline === 'local'
            ? []
            : ['--redis', `redis://${ctx.redis.host}:${ctx.redis.port}`, '--prefix', prefix]
        const started = await startProcess(
          GATEWAY_BIN,
          [
            '--config',
            config,
            '--port',
            '0',
            '--admin-port',
            String(adminPort),
            ...store,
            '--log-level',
            'warn',
          ],
          /(http:\/\/\S+)/,
        )
        processes.push(started)
        return { url: started.ready, admin: `http://127.0.0.1:${adminPort}` }
      }),
    )
    await post(`${loadUrl}/start`, {
      durationMs: shape.seconds * 1000,
      streams: shape.streams.map((stream) => ({
        name: stream.name,
        target: replicas[stream.replica]!.url,
        path: '/work',
        headers: stream.headers,
        rates: stream.rates,
      })),
    })
    const t0 = performance.now()
    const limits: Run['limits'] = []
    while (performance.now() - t0 < shape.seconds * 1000) {
      const t = (performance.now() - t0) / 1000
      const answers = await Promise.all(replicas.map((r) => getJson<LimitsReply>(`${r.admin}/limits`)))
      const buckets = answers.map((a) => a?.routes[0]?.buckets ?? []).flat()
      const fleet = buckets.find((b) => b.adaptive?.leader)
      const value =
        discipline === 'fleet' || discipline === 'fifo'
          ? (fleet?.adaptive?.limit ?? buckets[0]?.effective ?? Number.NaN)
          : buckets.reduce((sum, b) => sum + (b.adaptive?.limit ?? b.effective), 0)
      limits.push({ t, limit: value })
      await sleep(250)
    }
    const load = await post<LoadResult>(`${loadUrl}/stop`)
    const stats = (await getJson<UpstreamStats>(`${upstream.ready}/_stats`)) as UpstreamStats
    return {
      shape: shape.key,
      discipline,
      limit,
      load,
      limits,
      upstream: stats,
      t0: performance.timeOrigin + t0,
    }
  } finally {
    await Promise.all(processes.map((child) => child.stop()))
  }
}

/** One stream group's figures over [from, to) seconds: availability and p99 of the requests sent in
 * it (each answered whenever it was), and the 2xx a second that completed in it (throughput). */
function figures(run: Run, names: (name: string) => boolean, [from, to]: [number, number]) {
  const bucketS = run.load.bucketMs / 1000
  let sent = 0
  let ok = 0
  let completed = 0
  const latencies: number[] = []
  for (const stream of run.load.streams) {
    if (!names(stream.name)) continue
    stream.buckets.forEach((bucket, i) => {
      const t = i * bucketS
      if (t < from || t >= to) return
      sent += bucket.sent + bucket.refused
      ok += bucket.ok
    })
    for (let i = 0; i < stream.samples.length; i += 2) {
      const sentAt = (stream.samples[i] as number) / 1000
      const latency = stream.samples[i + 1] as number
      if (sentAt >= from && sentAt < to) latencies.push(latency)
      const done = sentAt + latency / 1000
      if (done >= from && done < to) completed++
    }
  }
  latencies.sort((a, b) => a - b)
  return {
    sent,
    ok,
    perS: completed / (to - from),
    availability: sent > 0 ? ok / sent : Number.NaN,
    p99: percentile(latencies, 99),
  }
}

/** The upstream's in flight above 1.25 C in the first 5 s (ms in all), and when the limit first stays
 * within +-25 % of C (s). */
function coldStart(run: Run) {
  const { t, overMs } = run.upstream.samples
  let over = 0
  for (let i = 0; i < t.length; i++) if ((t[i] as number) - run.t0 < 5000) over += overMs[i] as number
  let within: number | undefined
  for (const tick of run.limits) {
    const ok = Math.abs(tick.limit - CAPACITY) <= 0.25 * CAPACITY
    if (ok && within === undefined) within = tick.t
    if (!ok) within = undefined
  }
  return { overMs: over, withinS: within }
}

/** The upstream's 50 ms samples of the first `seconds` of a run. */
function firstSeconds(upstream: UpstreamStats, t0: number, seconds: number): Record<string, number[]> {
  const { t } = upstream.samples
  const n = t.findIndex((at) => at - t0 >= seconds * 1000)
  const end = n < 0 ? t.length : n
  return Object.fromEntries(
    Object.entries(upstream.samples).map(([key, values]) => [key, values.slice(0, end)]),
  )
}

const COLORS = [
  '#1f77b4',
  '#ff7f0e',
  '#2ca02c',
  '#d62728',
  '#9467bd',
  '#8c564b',
  '#e377c2',
  '#7f7f7f',
  '#bcbd22',
  '#17becf',
]

function plot(shape: Shape, runs: Run[]): string {
  const rows: Panel[][] = []
  for (const limit of ['fixed', 'adaptive'] as const) {
    const panels: Panel[] = []
    for (const run of runs.filter((r) => r.limit === limit)) {
      const groups = [
        ...new Set(
          run.load.streams.map((st) =>
            shape.key === 'noisy' && st.name !== 'noisy' ? 'quiet (each)' : st.name,
          ),
        ),
      ]
      const lines: Line[] = groups.map((group, g) => {
        const members = run.load.streams.filter((st) =>
          group === 'quiet (each)' ? st.name !== 'noisy' : st.name === group,
        )
        const count = group === 'quiet (each)' ? members.length : 1
        const n = Math.max(...members.map((m) => m.buckets.length))
        const points: [number, number][] = range(n).map((i) => [
          (i * run.load.bucketMs) / 1000,
          members.reduce((sum, m) => sum + (m.buckets[i]?.ok ?? 0), 0) / count / (run.load.bucketMs / 1000),
        ])
        return { name: `${group} admitted/s`, color: COLORS[g % COLORS.length] as string, points }
      })
      lines.push({
        name: 'limit x S (req/s)',
        color: '#222',
        step: true,
        dash: '6 4',
        points: run.limits
          .filter((l) => Number.isFinite(l.limit))
          .map((l) => [l.t, (l.limit * 1000) / SERVICE_MS]),
      })
      panels.push({
        title: `${run.discipline}, ${limit} limit`,
        xLabel: 's',
        yLabel: 'req/s',
        xMax: shape.seconds,
        lines,
      })
    }
    rows.push(panels)
  }
  return renderFigure({ title: `overload: ${shape.title}`, rows })
}

export const overloadScenario: Scenario = {
  name: 'overload',
  title: `who gets in under overload: ${REPLICAS} replicas, C = ${CAPACITY}, S = ${SERVICE_MS} ms, open-loop; FIFO, per-tenant caps, per-replica and fleet-wide priority and fairness`,
  seconds: SHAPES.reduce((sum, shape) => sum + 7 * (shape.seconds + 5), 0),
  async run(ctx) {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tollgate-bench-overload-'))
    const load = await startProcess('bench/lib/open-loop.ts', [], /(http:\/\/\S+)/)
    const runs: Run[] = []
    try {
      for (const shape of SHAPES) {
        if (ONLY_SHAPES && !ONLY_SHAPES.includes(shape.key)) continue
        for (const limit of ['fixed', 'adaptive'] as const) {
          for (const discipline of ['fifo', 'caps', 'local', 'fleet'] as const) {
            // Today's per-tenant caps cannot be adaptive (an adaptive limit refuses per: tenant).
            if (discipline === 'caps' && limit === 'adaptive') continue
            if (ONLY && !ONLY.includes(discipline)) continue
            ctx.log(`  ${shape.key}: ${discipline}, ${limit} limit`)
            runs.push(await runOnce(ctx, load.ready, shape, discipline, limit, dir))
          }
        }
      }
    } finally {
      await load.stop()
      rmSync(dir, { recursive: true, force: true })
    }

    const verdicts: Verdict[] = []
    const tables: Table[] = []
    const notes: string[] = []
    const outDir = QUICK ? os.tmpdir() : fileURLToPath(RESULTS_DIR)
    mkdirSync(outDir, { recursive: true })
    for (const shape of SHAPES) {
      const mine = runs.filter((r) => r.shape === shape.key)
      if (mine.length === 0) continue
      const file = path.join(outDir, `overload-${shape.key}.svg`)
      writeFileSync(file, plot(shape, mine))
      notes.push(
        `Plot of ${shape.key}: ${QUICK ? file : `[overload-${shape.key}.svg](overload-${shape.key}.svg)`}.`,
      )
    }

    // 1. Netflix's shape.
    const netflix = runs.filter((r) => r.shape === 'netflix')
    const unloadedP99 = (run: Run) => figures(run, (n) => n === 'critical', SHAPES[0]!.phases.before!).p99
    tables.push({
      columns: [
        'discipline',
        'limit',
        'critical availability (spike)',
        'critical p99 before / spike (ms)',
        'sheddable ok/s (spike)',
        'goodput / oracle (spike)',
      ],
      rows: netflix.map((run) => {
        const critical = figures(run, (n) => n === 'critical', SHAPES[0]!.phases.spike!)
        const sheddable = figures(run, (n) => n === 'sheddable', SHAPES[0]!.phases.spike!)
        const offered = (0.5 + 12 * 0.3) * THROUGHPUT
        const goodput = (critical.perS + sheddable.perS) / Math.min(offered, THROUGHPUT)
        if (run.discipline === 'fleet') {
          verdicts.push(
            {
              target: `netflix, fleet, ${run.limit}: critical availability >= 99.9 % through the spike`,
              pass: critical.availability >= 0.999,
              detail: `${fmtFixed(critical.availability * 100, 2)} % (${fmtInt(critical.ok)} of ${fmtInt(critical.sent)})`,
            },
            {
              target: `netflix, fleet, ${run.limit}: critical p99 <= 2 x its unloaded p99`,
              pass: critical.p99 <= 2 * unloadedP99(run),
              detail: `${fmtFixed(critical.p99, 1)} ms vs ${fmtFixed(unloadedP99(run), 1)} ms before the spike`,
            },
            {
              target: `netflix, fleet, ${run.limit}: goodput >= 0.95 x the oracle's`,
              pass: goodput >= 0.95,
              detail: `${fmtFixed(goodput, 2)} x (${fmtInt(critical.perS + sheddable.perS)}/s of ${fmtInt(THROUGHPUT)}/s)`,
            },
          )
        }
        return [
          run.discipline,
          run.limit,
          `${fmtFixed(critical.availability * 100, 2)} %`,
          `${fmtFixed(unloadedP99(run), 1)} / ${fmtFixed(critical.p99, 1)}`,
          fmtInt(sheddable.perS),
          fmtFixed(goodput, 2),
        ]
      }),
    })

    // 2. A noisy tenant.
    const noisy = runs.filter((r) => r.shape === 'noisy')
    const quiet = (name: string) => name.startsWith('quiet-')
    tables.push({
      columns: [
        'discipline',
        'limit',
        'quiet: worst share of what it asks',
        'quiet p99 without / with (ms)',
        'noisy ok/s',
        'total ok/s',
      ],
      rows: noisy.map((run) => {
        const { without, with: withNoisy } = SHAPES[1]!.phases as Record<string, [number, number]>
        const shares = run.load.streams
          .filter((st) => quiet(st.name))
          .map((st) => {
            const f = figures(run, (n) => n === st.name, withNoisy!)
            return f.sent > 0 ? f.ok / f.sent : Number.NaN
          })
        const worst = Math.min(...shares)
        const before = figures(run, quiet, without!).p99
        const during = figures(run, quiet, withNoisy!).p99
        const loud = figures(run, (n) => n === 'noisy', withNoisy!)
        const all = figures(run, () => true, withNoisy!)
        if (run.discipline === 'fleet') {
          verdicts.push(
            {
              target: `noisy, fleet, ${run.limit}: each quiet tenant gets >= 0.95 of what it asks`,
              pass: worst >= 0.95,
              detail: `worst ${fmtFixed(worst, 3)}`,
            },
            {
              target: `noisy, fleet, ${run.limit}: the quiet tenants' p99 <= 2 x without the noisy one`,
              pass: during <= 2 * before,
              detail: `${fmtFixed(during, 1)} ms vs ${fmtFixed(before, 1)} ms`,
            },
            {
              target: `noisy, fleet, ${run.limit}: the noisy tenant gets the rest (work-conserving: total >= 0.95 x C/S)`,
              pass: all.perS >= 0.95 * THROUGHPUT,
              detail: `total ${fmtInt(all.perS)}/s of ${fmtInt(THROUGHPUT)}/s; noisy ${fmtInt(loud.perS)}/s`,
            },
          )
        }
        return [
          run.discipline,
          run.limit,
          fmtFixed(worst, 3),
          `${fmtFixed(before, 1)} / ${fmtFixed(during, 1)}`,
          fmtInt(loud.perS),
          fmtInt(all.perS),
        ]
      }),
    })

    // 3. Alone.
    const alone = runs.filter((r) => r.shape === 'alone')
    tables.push({
      columns: [
        'discipline',
        'limit',
        'ok/s',
        'share of C/S',
        'cold start: ms above 1.25 C in 5 s',
        'limit within +-25 % of C from (s)',
      ],
      rows: alone.map((run) => {
        const f = figures(run, () => true, SHAPES[2]!.phases.alone!)
        const cold = coldStart(run)
        if (run.discipline === 'fleet') {
          verdicts.push({
            target: `alone, fleet, ${run.limit}: the lone tenant uses >= 0.95 of the limit`,
            pass: f.perS >= 0.95 * THROUGHPUT,
            detail: `${fmtInt(f.perS)}/s of ${fmtInt(THROUGHPUT)}/s (${fmtFixed(f.perS / THROUGHPUT, 3)})`,
          })
          if (run.limit === 'adaptive')
            verdicts.push({
              target:
                'alone, fleet, adaptive cold start: in flight <= 1.25 C except <= 0.5 s in all, limit within +-25 % of C within 3 s',
              pass: cold.overMs <= 500 && cold.withinS !== undefined && cold.withinS <= 3,
              detail: `${fmtInt(cold.overMs)} ms above 1.25 C; within +-25 % from ${cold.withinS === undefined ? 'never' : `${fmtFixed(cold.withinS, 2)} s`}`,
            })
        }
        return [
          run.discipline,
          run.limit,
          fmtInt(f.perS),
          fmtFixed(f.perS / THROUGHPUT, 3),
          run.limit === 'adaptive' ? fmtInt(cold.overMs) : 'n/a',
          run.limit === 'adaptive'
            ? cold.withinS === undefined
              ? 'never'
              : fmtFixed(cold.withinS, 2)
            : 'n/a',
        ]
      }),
    })

    notes.push(
      `${REPLICAS} replicas of the built bin (node ${GATEWAY_BIN}) in front of bench/lib/upstream-sim.ts (C = ${CAPACITY}, S = ${SERVICE_MS} ms +- ${JITTER * 100} %: ${fmtInt(THROUGHPUT)} req/s); load from bench/lib/open-loop.ts (Poisson arrivals at fixed rates, each stream sticking to one replica: class or tenant i to replica i mod ${REPLICAS}). Rates are shares of C/S as the issue gives them; S is ${SERVICE_MS} ms, not 10, so that the spike's offered rate (12 x 0.3 + 0.5 = 4.1 x C/S) stays within what this 2-core machine can generate and proxy (BENCH_OVERLOAD_SERVICE_MS changes it).`,
      `Disciplines: fifo: per: route, one FIFO queue (Redis); caps: per: tenant, C / ${TENANTS} permits each (netflix: critical 20, sheddable 12), today's fixed caps (not adaptive: an adaptive limit refuses per: tenant); local: each replica in memory with its share of C (${range(
        REPLICAS,
      )
        .map((r) => Math.floor(CAPACITY / REPLICAS) + (r < CAPACITY % REPLICAS ? 1 : 0))
        .join(
          '/',
        )}) and the same priority and flow config, or an adaptive limit of scope local: the Netflix and APF design; fleet: Redis, one limit and one queue for the fleet, priority from x-priority (critical, sheddable), flows from x-tenant, maxQueued ${MAX_QUEUED}. maxWaitMs ${MAX_WAIT_MS} (sheddable ${SHEDDABLE_WAIT_MS}). Adaptive: ${JSON.stringify(ADAPTIVE)}.`,
      'Availability: 2xx over requests sent (rejections, errors and sends refused by the generator past 4,096 in flight count against it). p99: of the 2xx, as the client saw them (queueing in the gateway included). The oracle: min(offered, C/S) a second.',
    )
    return {
      tables,
      verdicts,
      notes,
      data: {
        // Per run: the limit polled, each stream's 250 ms buckets, and the upstream's in-flight samples
        // of the first 5 s (the cold start); not every request's completion (megabytes a run).
        runs: runs.map(({ load, upstream, ...rest }) => ({
          ...rest,
          upstreamFirst5s: firstSeconds(upstream, rest.t0, 5),
          streams: load.streams.map((st) => ({ name: st.name, buckets: st.buckets })),
        })),
      },
    }
  },
}
export const overloadScenarios: Scenario[] = [overloadScenario]
