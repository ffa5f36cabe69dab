// npm run bench -- outage: what a limited route does while Redis is down, per `outage` mode (closed,
// open, share), 3 gateway replicas of the built bin on one private redis-server, a limit of 12, in
// front of bench/lib/upstream-sim.ts (capacity far above 12: it only counts its own requests in flight
// and serves each in ~20 ms), with 36 closed-loop clients (bench/lib/closed-loop.ts).
// Phases, 10 s each (BENCH_OUTAGE_SECONDS): normal; Redis SIGSTOPped (hung); recovery (SIGCONT);
// Redis SIGKILLed and started again on the same port (dead for the phase); recovery. The load runs
// phase by phase (started and stopped at each edge), so each phase has its own latencies.
// --command-timeout-ms 500 for every mode (docs/gateway/behaviour.md, "Redis outages": share answers within
// the command timeout when Redis hangs).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { freePort, startRedisServer } from '../../test/helpers/redis-server.js'
import { GATEWAY_BIN } from '../lib/gateway-bin.js'
import { post } from '../lib/control.js'
import { type BenchProcess, startProcess } from '../lib/processes.js'
import { fmtFixed, fmtInt } from '../lib/report.js'
import type { Scenario, Table, Verdict } from '../lib/scenario.js'
import { type Line, type Panel, renderFigure } from '../lib/svg-plot.js'

const RESULTS_DIR = new URL('../results/', import.meta.url)
const REPLICAS = 3
const LIMIT = 12
const CLIENTS = 36
const SERVICE_MS = 20
const PHASE_S = Number(process.env.BENCH_OUTAGE_SECONDS ?? 10)
const MODES = ['closed', 'open', 'share'] as const
type Mode = (typeof MODES)[number]
const PHASES = ['normal', 'hung', 'recovery (hung)', 'dead', 'recovery (dead)'] as const
type Phase = (typeof PHASES)[number]

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

interface LoadResult {
  statuses: Record<string, number>
  errors: number
  maxMs: number
  p99Ms: number
  seconds: number
}

interface UpstreamStats {
  samples: { t: number[]; max: number[] }
  completions: { t: number[] }
}

interface PhaseFigures {
  phase: Phase
  from: number
  to: number
  load: LoadResult
  /** The upstream's most in flight in the phase, and in its first second. */
  maxInFlight: number
  firstSecondMax: number
  /** 2xx a second the upstream served in the phase. */
  okPerS: number
  /** Seconds from the phase's start until a second of it had >= 0.8 x the normal goodput. */
  backWithinS: number | undefined
}

interface ModeRun {
  mode: Mode
  phases: PhaseFigures[]
  t0: number
  series: { t: number[]; inFlight: number[]; okPerS: number[] }
}

async function runMode(mode: Mode, loadUrl: string, dir: string): Promise<ModeRun> {
  const redis = await startRedisServer()
  const processes: BenchProcess[] = []
  try {
    const upstream = await startProcess(
      'bench/lib/upstream-sim.ts',
      ['--capacity', '1000', '--service-ms', String(SERVICE_MS), '--jitter', '0.1'],
      /(http:\/\/\S+)/,
    )
    processes.push(upstream)
    const config = path.join(dir, `outage-${mode}.json`)
    writeFileSync(
      config,
      JSON.stringify({
        routes: [
          {
            name: 'work',
            match: { pathPrefix: '/' },
            upstream: upstream.ready,
            concurrency: { per: 'route', permits: LIMIT, outage: mode },
          },
        ],
      }),
    )
    const replicas = await Promise.all(
      Array.from({ length: REPLICAS }, async () => {
        const started = await startProcess(
          GATEWAY_BIN,
          [
            ...['--config', config, '--port', '0', '--admin-port', String(await freePort())],
            ...['--redis', `redis://${redis.host}:${redis.port}`, '--prefix', `bench-outage-${mode}`],
            ...['--command-timeout-ms', '500', '--log-level', 'warn'],
          ],
          /(http:\/\/\S+)/,
        )
        processes.push(started)
        return started.ready
      }),
    )
    await sleep(2500) // every replica counted on Redis (share: presence every 2 s)
    const t0 = Date.now()
    const phases: PhaseFigures[] = []
    const loads: { phase: Phase; from: number; to: number; load: LoadResult }[] = []
    for (const phase of PHASES) {
      if (phase === 'hung') redis.kill('SIGSTOP')
      if (phase === 'recovery (hung)') redis.kill('SIGCONT')
      if (phase === 'dead') redis.kill('SIGKILL')
      if (phase === 'recovery (dead)') await redis.restart()
      const from = Date.now()
      await post(`${loadUrl}/start`, { clients: CLIENTS, targets: replicas, path: '/work' })
      await sleep(PHASE_S * 1000)
      const load = await post<LoadResult>(`${loadUrl}/stop`)
      loads.push({ phase, from, to: Date.now(), load })
    }
    const stats = (await (await fetch(`${upstream.ready}/_stats`)).json()) as UpstreamStats
    // The upstream's figures per second from t0.
    const seconds = Math.ceil((Date.now() - t0) / 1000)
    const okPerS = Array.from({ length: seconds }, () => 0)
    for (const t of stats.completions.t) {
      const s = Math.floor((t - t0) / 1000)
      if (s >= 0 && s < seconds) okPerS[s] = (okPerS[s] ?? 0) + 1
    }
    const inFlight = Array.from({ length: seconds }, () => 0)
    stats.samples.t.forEach((t, i) => {
      const s = Math.floor((t - t0) / 1000)
      if (s >= 0 && s < seconds) inFlight[s] = Math.max(inFlight[s] ?? 0, stats.samples.max[i] ?? 0)
    })
    const maxBetween = (from: number, to: number) => {
      let max = 0
      stats.samples.t.forEach((t, i) => {
        if (t >= from && t < to) max = Math.max(max, stats.samples.max[i] ?? 0)
      })
      return max
    }
    const servedBetween = (from: number, to: number) =>
      stats.completions.t.filter((t) => t >= from && t < to).length / ((to - from) / 1000)
    const normal = loads[0] as (typeof loads)[number]
    const normalRate = servedBetween(normal.from + 1000, normal.to)
    for (const { phase, from, to, load } of loads) {
      let backWithinS: number | undefined
      for (let s = 0; from + (s + 1) * 1000 <= to; s++) {
        if (servedBetween(from + s * 1000, from + (s + 1) * 1000) >= 0.8 * normalRate) {
          backWithinS = s + 1
          break
        }
      }
      phases.push({
        phase,
        from: (from - t0) / 1000,
        to: (to - t0) / 1000,
        load,
        maxInFlight: maxBetween(from, to),
        firstSecondMax: maxBetween(from, from + 1000),
        okPerS: servedBetween(from, to),
        backWithinS,
      })
    }
    return { mode, phases, t0, series: { t: okPerS.map((_, s) => s), inFlight, okPerS } }
  } finally {
    for (const child of processes.reverse()) await child.stop()
    await redis.stop()
  }
}

function plot(runs: ModeRun[]): string {
  const colors: Record<Mode, string> = { closed: '#c0392b', open: '#7f8c8d', share: '#2471a3' }
  const xMax = Math.max(...runs.map((run) => run.series.t.length))
  // One line per mode of a series over the run's seconds.
  const lines = (key: 'inFlight' | 'okPerS') =>
    runs.map((run): Line => ({
      name: run.mode,
      color: colors[run.mode],
      points: run.series.t.map((t, i) => [t, run.series[key][i] ?? 0] as [number, number]),
    }))
  const panels: Panel[] = [
    {
      title: 'upstream in flight (most per second); the limit is 12',
      xLabel: 's',
      yLabel: 'in flight',
      xMax,
      lines: lines('inFlight'),
    },
    {
      title: 'goodput (2xx a second at the upstream)',
      xLabel: 's',
      yLabel: 'req/s',
      xMax,
      lines: lines('okPerS'),
    },
  ]
  return renderFigure({
    title: `outage: 3 replicas, limit 12; phases of ${PHASE_S} s: normal, Redis hung, recovery, Redis dead, recovery`,
    rows: panels.map((panel) => [panel]),
  })
}

export const outageScenario: Scenario = {
  name: 'outage',
  title: `Redis down: closed, open and share side by side; ${REPLICAS} replicas, limit ${LIMIT}, ${CLIENTS} closed-loop clients, upstream ~${SERVICE_MS} ms`,
  seconds: MODES.length * (PHASES.length * PHASE_S + 10),
  async run(ctx) {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tollgate-bench-outage-'))
    const load = await startProcess('bench/lib/closed-loop.ts', [], /(http:\/\/\S+)/)
    const runs: ModeRun[] = []
    try {
      for (const mode of MODES) {
        ctx.log(`  ${mode}`)
        runs.push(await runMode(mode, load.ready, dir))
      }
    } finally {
      await load.stop()
      rmSync(dir, { recursive: true, force: true })
    }
    const ok = (l: LoadResult) =>
      Object.entries(l.statuses)
        .filter(([status]) => status.startsWith('2'))
        .reduce((sum, [, n]) => sum + n, 0)
    const table: Table = {
      columns: [
        'mode',
        'phase',
        'upstream max in flight',
        'first second max',
        'goodput (req/s)',
        'vs normal',
        'answers (2xx / other)',
        'slowest 2xx (ms)',
        '>= 0.8x normal after (s)',
      ],
      rows: [],
    }
    const verdicts: Verdict[] = []
    for (const run of runs) {
      const normal = run.phases[0] as PhaseFigures
      for (const p of run.phases) {
        const all = Object.values(p.load.statuses).reduce((sum, n) => sum + n, 0)
        table.rows.push([
          run.mode,
          p.phase,
          String(p.maxInFlight),
          String(p.firstSecondMax),
          fmtInt(p.okPerS),
          fmtFixed(p.okPerS / normal.okPerS, 2),
          `${fmtInt(ok(p.load))} / ${fmtInt(all - ok(p.load) + p.load.errors)}`,
          fmtFixed(p.load.maxMs, 0),
          p.backWithinS === undefined ? 'never' : String(p.backWithinS),
        ])
      }
      if (run.mode !== 'share') continue
      for (const outage of ['hung', 'dead'] as const) {
        const p = run.phases.find((x) => x.phase === outage) as PhaseFigures
        const after = run.phases.find((x) => x.phase === `recovery (${outage})`) as PhaseFigures
        verdicts.push(
          {
            target: `share, Redis ${outage}: upstream max in flight <= ${LIMIT}`,
            pass: p.maxInFlight <= LIMIT,
            detail: `${p.maxInFlight}`,
          },
          {
            target: `share, Redis ${outage}: goodput >= 0.5 x before`,
            pass: p.okPerS >= 0.5 * normal.okPerS,
            detail: `${fmtFixed(p.okPerS / normal.okPerS, 2)} x (${fmtInt(p.okPerS)}/s of ${fmtInt(normal.okPerS)}/s)`,
          },
          {
            target: `share, Redis ${outage}: longest wait for an answer <= 1 s`,
            pass: p.load.maxMs <= 1000,
            detail: `${fmtFixed(p.load.maxMs, 0)} ms (slowest 2xx the clients saw)`,
          },
          {
            target: `share, after Redis ${outage} returns: upstream max in flight <= ${LIMIT}, also in the first second`,
            pass: after.maxInFlight <= LIMIT && after.firstSecondMax <= LIMIT,
            detail: `${after.maxInFlight} (first second ${after.firstSecondMax})`,
          },
          {
            target: `share, after Redis ${outage} returns: goodput back to >= 0.8 x within 5 s`,
            pass: after.backWithinS !== undefined && after.backWithinS <= 5,
            detail: after.backWithinS === undefined ? 'never' : `${after.backWithinS} s`,
          },
        )
      }
    }
    const svg = plot(runs)
    writeFileSync(new URL('outage.svg', RESULTS_DIR), svg)
    return {
      tables: [table],
      verdicts,
      notes: [
        `- Plot: [outage.svg](outage.svg).`,
        `- ${REPLICAS} replicas of the built bin (node ${GATEWAY_BIN}), \`--command-timeout-ms 500\`, one route \`per: route\`, permits ${LIMIT}, \`outage\` as the row says; a private redis-server per mode, SIGSTOPped (hung), SIGCONTed, SIGKILLed and started again on the same port (dead), by PID. bench/lib/upstream-sim.ts with a capacity of 1000 (it only counts its own requests in flight, sampled every 50 ms) and ~${SERVICE_MS} ms per request; ${CLIENTS} closed-loop clients (bench/lib/closed-loop.ts) spread over the replicas, started and stopped at each phase's edges (${PHASE_S} s each).`,
        '- Goodput: 2xx a second counted at the upstream. Slowest 2xx: the longest a client waited for a 2xx in the phase (rejections are answered at once, or at maxWaitMs, 1 s).',
      ],
      data: { runs },
    }
  },
}

export const outageScenarios: Scenario[] = [outageScenario]
