// Middleware scenario: Express 5 bare, with express-rate-limit (memory store), and with tollgate's
// semaphore(1000) on the in-memory store and on Redis, and in memory with @opentelemetry/api absent
// and with the SDK's providers registered, each in its own process; wrk, 50 connections, alternating
// rounds, CPU per request from /proc. The middleware's own cost is its CPU per request minus bare
// Express's. The OpenTelemetry hook's cost per decision is also measured directly.
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { treeCpuSeconds } from '../lib/cpu.js'
import { type BenchProcess, startProcess } from '../lib/processes.js'
import { fmtFixed, fmtInt, fmtMs } from '../lib/report.js'
import type { Scenario, Table, Verdict } from '../lib/scenario.js'
import { median } from '../lib/stats.js'
import { loadRound, wrkAvailable } from '../lib/wrk.js'

const CONNECTIONS = 50
const WARMUP_S = 2
const ROUNDS = 6
const ROUND_S = 3

const load = (url: string, seconds: number) => loadRound(url, seconds, CONNECTIONS)
const run = promisify(execFile)

export const middlewareThroughput: Scenario = {
  name: 'middleware',
  title: `Express 5: semaphore(1000) vs express-rate-limit vs bare, wrk ${CONNECTIONS} connections; with and without OpenTelemetry`,
  seconds: 6 * WARMUP_S + 10 * ROUNDS * ROUND_S + 60,
  async run(ctx) {
    const processes: BenchProcess[] = []
    try {
      const redisUrl = `redis://${ctx.redis.host}:${ctx.redis.port}`
      const variants: { name: string; args: string[] }[] = [
        { name: 'bare Express 5', args: ['bare'] },
        { name: 'express-rate-limit 8 (memory store)', args: ['rate-limit'] },
        { name: 'tollgate semaphore(1000), in-memory', args: ['semaphore'] },
        { name: 'tollgate semaphore(1000), Redis', args: ['semaphore-redis', redisUrl] },
        { name: 'tollgate in-memory, @opentelemetry/api absent', args: ['semaphore-otel-absent'] },
        { name: 'tollgate in-memory, OpenTelemetry providers registered', args: ['semaphore-otel'] },
      ]
      const apps: BenchProcess[] = []
      for (const variant of variants) {
        const app = await startProcess('bench/lib/express-app.ts', variant.args, /(http:\/\/\S+)/)
        processes.push(app)
        apps.push(app)
      }
      for (const app of apps) await load(`${app.ready}/`, WARMUP_S)
      type Round = { rps: number; p50: number; p99: number; cpuUs: number; errors: number }
      const rounds: Round[][] = apps.map(() => [])
      /** For each variant's round, bare Express's round just before it: its pair. */
      const pairs: Round[][] = apps.map(() => [])
      const measure = async (i: number, round: number): Promise<Round> => {
        const app = apps[i]!
        const before = treeCpuSeconds(app.pid)
        const result = await load(`${app.ready}/`, ROUND_S)
        const cpuUs = ((treeCpuSeconds(app.pid) - before) * 1e6) / result.requests
        ctx.log(
          `  round ${round + 1} ${variants[i]!.name}: ${fmtInt(result.rps)} req/s, ${fmtFixed(cpuUs, 1)} µs CPU/req`,
        )
        return { ...result, cpuUs }
      }
      // Each variant right after a round of bare Express: the machine drifts over a whole round of
      // six variants by more than the differences measured, not over two rounds of 3 s.
      for (let round = 0; round < ROUNDS; round++) {
        const order = apps.map((_, i) => i).slice(1)
        if (round % 2 === 1) order.reverse()
        for (const i of order) {
          const bare = await measure(0, round)
          rounds[0]!.push(bare)
          pairs[i]!.push(bare)
          rounds[i]!.push(await measure(i, round))
        }
      }
      const cpu = (i: number) => median(rounds[i]!.map((r) => r.cpuUs))
      /** Median over the rounds of (this app's CPU per request - bare Express's in the round before). */
      const overhead = (i: number) => median(rounds[i]!.map((r, k) => r.cpuUs - pairs[i]![k]!.cpuUs))
      const table: Table = {
        columns: [
          'variant',
          'req/s',
          'x bare',
          'p50',
          'p99',
          'app CPU µs/req',
          'middleware µs/req (minus bare)',
          'errors',
        ],
        rows: variants.map((variant, i) => [
          variant.name,
          fmtInt(median(rounds[i]!.map((r) => r.rps))),
          i === 0 ? '1.00' : fmtFixed(median(rounds[i]!.map((r, k) => r.rps / pairs[i]![k]!.rps))),
          fmtMs(median(rounds[i]!.map((r) => r.p50))),
          fmtMs(median(rounds[i]!.map((r) => r.p99))),
          fmtFixed(cpu(i), 1),
          i === 0 ? '-' : fmtFixed(overhead(i), 1),
          fmtInt(rounds[i]!.reduce((sum, r) => sum + r.errors, 0)),
        ]),
      }
      const verdicts: Verdict[] = [
        {
          target: "tollgate semaphore's overhead per request <= express-rate-limit's (in-memory)",
          pass: overhead(2) <= overhead(1),
          detail: `${fmtFixed(overhead(2), 1)} µs vs ${fmtFixed(overhead(1), 1)} µs (Redis store: ${fmtFixed(overhead(3), 1)} µs)`,
        },
        {
          target:
            "aim: tollgate semaphore's overhead per request <= half of express-rate-limit's (in-memory)",
          pass: overhead(2) <= overhead(1) / 2,
          detail: `${fmtFixed(overhead(2) / overhead(1))} x express-rate-limit's`,
        },
      ]
      // The OpenTelemetry hook per decision, measured directly (bench/lib/telemetry-cost.ts), rounds
      // alternated: what no provider costs is well under what the rows above can resolve.
      const kinds = ['absent', 'no-provider', 'providers'] as const
      const hook: Record<(typeof kinds)[number], number[]> = { absent: [], 'no-provider': [], providers: [] }
      const gateway: Record<(typeof kinds)[number], number[]> = {
        absent: [],
        'no-provider': [],
        providers: [],
      }
      for (let round = 0; round < 3; round++) {
        for (const kind of round % 2 === 0 ? kinds : [...kinds].reverse()) {
          const { stdout } = await run(process.execPath, [
            '--import',
            'tsx',
            'bench/lib/telemetry-cost.ts',
            kind,
          ])
          const measured = JSON.parse(stdout) as { ns: number; gatewayNs: number }
          hook[kind].push(measured.ns)
          gateway[kind].push(measured.gatewayNs)
        }
      }
      const ns = (kind: (typeof kinds)[number]) => median(hook[kind])
      const gatewayNs = (kind: (typeof kinds)[number]) => median(gateway[kind])
      const added = ns('no-provider') - ns('absent')
      verdicts.push({
        target:
          'OpenTelemetry costs nothing measurable while no provider is registered: its check adds <= 1 % of the in-memory middleware overhead per request',
        pass: added / 1000 <= overhead(2) / 100,
        detail: `${fmtFixed(added, 0)} ns per request (${fmtFixed(ns('no-provider'), 0)} ns with @opentelemetry/api installed, ${fmtFixed(ns('absent'), 0)} ns absent, for an admission's decided() + released()); the middleware's overhead ${fmtFixed(overhead(2), 1)} µs. End to end above: ${fmtFixed(overhead(4), 1)} µs absent, ${fmtFixed(overhead(5), 1)} µs with the SDK's providers registered (${fmtFixed(ns('providers') / 1000, 1)} µs of it in the hook: a span and the metrics per request)`,
      })
      verdicts.push({
        target:
          "the gateway's span costs nothing measurable while no provider is registered: its check per request <= 1 % of the middleware's overhead",
        pass: gatewayNs('no-provider') / 1000 <= overhead(2) / 100,
        detail: `${fmtFixed(gatewayNs('no-provider'), 0)} ns per request with @opentelemetry/api installed and no provider (${fmtFixed(gatewayNs('absent'), 0)} ns absent); with the SDK's provider, a server span started and ended: ${fmtFixed(gatewayNs('providers') / 1000, 1)} µs`,
      })
      return {
        tables: [table],
        verdicts,
        notes: [
          `Each app in its own process (bench/lib/express-app.ts), ${wrkAvailable() ? 'wrk -t1' : 'autocannon'} with ${CONNECTIONS} connections, ${ROUNDS} rounds (the variants' order alternating) of ${ROUND_S} s after a ${WARMUP_S} s warm-up, each variant right after a round of bare Express; medians over the rounds. CPU from /proc/<pid>/stat; 'middleware µs/req' = the median over the rounds of the app's CPU per request minus bare Express's in the round just before; 'x bare' likewise.`,
          `express-rate-limit: rateLimit({ windowMs: 60000, limit: 1e9, standardHeaders: 'draft-8', legacyHeaders: false }) on its default memory store. tollgate: semaphore({ permits: 1000 }) (never waits; the cost of a permit per request), on the process memory store or createRedisStore(url). OpenTelemetry: @opentelemetry/api is installed (a dev dependency) and no provider is registered, except in the two last rows: there resolving @opentelemetry/api fails (a resolve hook, as where it is not installed), or the SDK's TracerProvider (BatchSpanProcessor, to an exporter that drops the spans) and MeterProvider (no reader) are registered.`,
          `One round's middleware overhead moves by several µs from round to round (bare Express's own CPU per request does), so rows a µs or two apart are not told apart here; the OpenTelemetry hook's ns per decision come from bench/lib/telemetry-cost.ts (200,000 decided() + released() of an admitted request, median of 7 runs, 3 alternated rounds per kind).`,
        ],
        data: { variants: variants.map((v) => v.name), rounds, telemetryHookNs: hook },
      }
    } finally {
      await Promise.all(processes.map((child) => child.stop()))
    }
  },
}

export const middlewareScenarios: Scenario[] = [middlewareThroughput]
