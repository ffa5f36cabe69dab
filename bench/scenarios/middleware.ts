// Middleware scenario: Express 5 bare, with express-rate-limit (memory store), and with tollgate's
// semaphore(1000) on the in-memory store and on Redis, each in its own process; wrk, 50 connections,
// alternating rounds, CPU per request from /proc. The middleware's own cost is its CPU per request
// minus bare Express's.
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

export const middlewareThroughput: Scenario = {
  name: 'middleware',
  title: `Express 5: semaphore(1000) vs express-rate-limit vs bare, wrk ${CONNECTIONS} connections`,
  seconds: 4 * (WARMUP_S + ROUNDS * ROUND_S) + 10,
  async run(ctx) {
    const processes: BenchProcess[] = []
    try {
      const redisUrl = `redis://${ctx.redis.host}:${ctx.redis.port}`
      const variants: { name: string; args: string[] }[] = [
        { name: 'bare Express 5', args: ['bare'] },
        { name: 'express-rate-limit 8 (memory store)', args: ['rate-limit'] },
        { name: 'tollgate semaphore(1000), in-memory', args: ['semaphore'] },
        { name: 'tollgate semaphore(1000), Redis', args: ['semaphore-redis', redisUrl] },
      ]
      const apps = []
      for (const variant of variants) {
        const app = await startProcess('bench/lib/express-app.ts', variant.args, /(http:\/\/\S+)/)
        processes.push(app)
        apps.push(app)
      }
      for (const app of apps) await load(`${app.ready}/`, WARMUP_S)
      const rounds: { rps: number; p50: number; p99: number; cpuUs: number; errors: number }[][] = apps.map(
        () => [],
      )
      for (let round = 0; round < ROUNDS; round++) {
        const order = apps.map((_, i) => i)
        if (round % 2 === 1) order.reverse()
        for (const i of order) {
          const app = apps[i]!
          const before = treeCpuSeconds(app.pid)
          const result = await load(`${app.ready}/`, ROUND_S)
          const cpuUs = ((treeCpuSeconds(app.pid) - before) * 1e6) / result.requests
          rounds[i]!.push({ ...result, cpuUs })
          ctx.log(
            `  round ${round + 1} ${variants[i]!.name}: ${fmtInt(result.rps)} req/s, ${fmtFixed(cpuUs, 1)} µs CPU/req`,
          )
        }
      }
      const cpu = (i: number) => median(rounds[i]!.map((r) => r.cpuUs))
      /** Median over the rounds of (this app's CPU per request - bare Express's in the same round). */
      const overhead = (i: number) => median(rounds[i]!.map((r, k) => r.cpuUs - rounds[0]![k]!.cpuUs))
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
          fmtFixed(median(rounds[i]!.map((r, k) => r.rps / rounds[0]![k]!.rps))),
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
      return {
        tables: [table],
        verdicts,
        notes: [
          `Each app in its own process (bench/lib/express-app.ts), ${wrkAvailable() ? 'wrk -t1' : 'autocannon'} with ${CONNECTIONS} connections, ${ROUNDS} alternating rounds of ${ROUND_S} s after a ${WARMUP_S} s warm-up; medians over the rounds. CPU from /proc/<pid>/stat; 'middleware µs/req' = the median over the rounds of the app's CPU per request minus bare Express's in the same round.`,
          `express-rate-limit: rateLimit({ windowMs: 60000, limit: 1e9, standardHeaders: 'draft-8', legacyHeaders: false }) on its default memory store. tollgate: semaphore({ permits: 1000 }) (never waits; the cost of a permit per request), on the process memory store or createRedisStore(url).`,
        ],
        data: { variants: variants.map((v) => v.name), rounds },
      }
    } finally {
      await Promise.all(processes.map((child) => child.stop()))
    }
  },
}

export const middlewareScenarios: Scenario[] = [middlewareThroughput]
