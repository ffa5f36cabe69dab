// Gateway scenario: autocannon with 50 connections against the demo upstream directly, through bare
// http-proxy and bare http-proxy-3 (as their READMEs use them), and through the tollgate bin on the
// in-memory store and on Redis. Every server runs in its own process; the variants alternate round by
// round so drift on this shared machine hits them alike. Then the client-abort leak check: clients
// abort requests the upstream is still working on; how many upstream requests are left running?
import autocannon from 'autocannon'
import { freePort } from '../../test/helpers/redis-server.js'
import { type BenchProcess, startProcess } from '../lib/processes.js'
import { diffSnapshots, type ServerDelta, sumDeltas, topCommands } from '../lib/redis.js'
import { fmtFixed, fmtInt, fmtMs } from '../lib/report.js'
import type { BenchContext, Scenario, Table, Verdict } from '../lib/scenario.js'

const CONNECTIONS = 50
const WARMUP_S = 2
// Many short rounds: a burst of foreign load on this shared machine spoils a few round pairs (which
// the median ratio ignores) rather than a large part of one variant's time.
const ROUNDS = 6
const ROUND_S = 2
/** Far above CONNECTIONS: the limiter's cost is measured, not its queueing. */
const PERMITS = 1000
const LEAK_REQUESTS = 20
const LEAK_UPSTREAM_MS = 2000

interface Target {
  name: string
  url: string
  redis: boolean
}

interface Totals {
  name: string
  requests: number
  seconds: number
  non2xx: number
  errors: number
  p50s: number[]
  p99s: number[]
  /** req/s of each round, in run order. */
  rounds: number[]
  server: ServerDelta
}

async function cannon(url: string, seconds: number): Promise<autocannon.Result> {
  return autocannon({ url, connections: CONNECTIONS, duration: seconds })
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN
}

/** Requests in flight at the demo upstream, not counting the asking request itself. */
async function upstreamInFlight(upstream: string): Promise<number> {
  const text = await (await fetch(`${upstream}/`)).text()
  const found = /: (\d+) in flight/.exec(text)
  if (!found) throw new Error(`unexpected answer from the demo upstream: ${text}`)
  return Number(found[1]) - 1
}

/** Abort LEAK_REQUESTS requests the upstream is still working on; count what keeps running upstream. */
async function leakCheck(ctx: BenchContext, name: string, proxyUrl: string, upstream: string) {
  await waitUntilIdle(upstream)
  const controllers = Array.from({ length: LEAK_REQUESTS }, () => new AbortController())
  const pending = controllers.map((controller) =>
    fetch(`${proxyUrl}/slow?ms=${LEAK_UPSTREAM_MS}`, { signal: controller.signal }).catch(() => undefined),
  )
  await sleep(300)
  const before = await upstreamInFlight(upstream)
  for (const controller of controllers) controller.abort()
  await Promise.all(pending)
  await sleep(500)
  const after = await upstreamInFlight(upstream)
  ctx.log(`  leak check ${name}: ${before} in flight upstream before the aborts, ${after} after`)
  return { name, before, after }
}

async function waitUntilIdle(upstream: string): Promise<void> {
  const deadline = Date.now() + LEAK_UPSTREAM_MS + 5000
  while ((await upstreamInFlight(upstream)) > 0) {
    if (Date.now() > deadline) throw new Error('the upstream did not become idle')
    await sleep(100)
  }
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

export const gatewayThroughput: Scenario = {
  name: 'gateway',
  title: `tollgate gateway vs bare http-proxy, autocannon ${CONNECTIONS} connections; client-abort leak check`,
  seconds: 5 * (WARMUP_S + ROUNDS * ROUND_S) + 25,
  async run(ctx) {
    const processes: BenchProcess[] = []
    const start = async (script: string, args: string[], env?: Record<string, string>) => {
      const started = await startProcess(script, args, /(http:\/\/\S+)/, env)
      processes.push(started)
      return started.ready
    }
    try {
      const upstream = await start('examples/demo-upstream.ts', [], { PORT: String(await freePort()) })
      const gatewayFlags = [
        '--upstream',
        upstream,
        '--port',
        '0',
        '--admin-port',
        '0',
        '--permits',
        String(PERMITS),
      ]
      const redisUrl = `redis://${ctx.redis.host}:${ctx.redis.port}`
      const targets: Target[] = [
        { name: 'upstream direct', url: upstream, redis: false },
        {
          name: 'bare http-proxy 1.18.1',
          url: await start('bench/lib/bare-proxy.ts', ['http-proxy', upstream]),
          redis: false,
        },
        {
          name: 'bare http-proxy-3',
          url: await start('bench/lib/bare-proxy.ts', ['http-proxy-3', upstream]),
          redis: false,
        },
        { name: 'tollgate in-memory', url: await start('src/gateway/main.ts', gatewayFlags), redis: false },
        {
          name: 'tollgate + Redis',
          url: await start('src/gateway/main.ts', [
            ...gatewayFlags,
            '--redis',
            redisUrl,
            '--prefix',
            'bench-gw',
          ]),
          redis: true,
        },
      ]
      ctx.log(
        `  warm-up ${WARMUP_S} s each, then ${ROUNDS} alternating rounds of ${ROUND_S} s, ${CONNECTIONS} connections`,
      )
      for (const target of targets) await cannon(`${target.url}/`, WARMUP_S)
      const totals: Totals[] = targets.map((target) => ({
        name: target.name,
        requests: 0,
        seconds: 0,
        non2xx: 0,
        errors: 0,
        p50s: [],
        p99s: [],
        rounds: [],
        server: sumDeltas([]),
      }))
      const deltas: ServerDelta[][] = targets.map(() => [])
      for (let round = 0; round < ROUNDS; round++) {
        const order = targets.map((_, i) => i)
        if (round % 2 === 1) order.reverse()
        for (const i of order) {
          const target = targets[i]!
          const total = totals[i]!
          const before = await ctx.redis.snapshot()
          const result = await cannon(`${target.url}/`, ROUND_S)
          const after = await ctx.redis.snapshot()
          deltas[i]!.push(diffSnapshots(before, after))
          total.requests += result.requests.total
          total.seconds += result.duration
          total.non2xx += result.non2xx
          total.errors += result.errors
          total.p50s.push(result.latency.p50)
          total.p99s.push(result.latency.p99)
          total.rounds.push(result.requests.total / result.duration)
          ctx.log(
            `  round ${round + 1} ${target.name}: ${fmtInt(result.requests.total / result.duration)} req/s`,
          )
        }
      }
      totals.forEach((total, i) => (total.server = sumDeltas(deltas[i]!)))

      const rate = (total: Totals) => total.requests / total.seconds
      const bare = totals[1]!
      /** Median over the rounds of (this variant's req/s / bare http-proxy's req/s in the same round). */
      const medianRatio = (total: Totals) => median(total.rounds.map((r, i) => r / bare.rounds[i]!))
      const table: Table = {
        columns: [
          'variant',
          'req/s',
          'p50',
          'p99',
          'x bare http-proxy',
          'x bare, median round',
          'redis scripts/req',
          'redis cmds/req',
          'non-2xx + errors',
        ],
        rows: totals.map((total) => [
          total.name,
          fmtInt(rate(total)),
          fmtMs(median(total.p50s)),
          fmtMs(median(total.p99s)),
          fmtFixed(rate(total) / rate(bare)),
          fmtFixed(medianRatio(total)),
          fmtFixed(total.server.scriptCalls / total.requests, 2),
          fmtFixed(total.server.totalCalls / total.requests, 2),
          fmtInt(total.non2xx + total.errors),
        ]),
      }

      const leaks = []
      for (const [name, url] of [
        ['bare http-proxy 1.18.1', targets[1]!.url],
        ['bare http-proxy-3', targets[2]!.url],
        ['tollgate in-memory', targets[3]!.url],
      ] as const) {
        leaks.push(await leakCheck(ctx, name, url, upstream))
      }
      const leakTable: Table = {
        columns: ['proxy', 'upstream requests before the clients aborted', 'still running 500 ms after'],
        rows: leaks.map((leak) => [leak.name, String(leak.before), String(leak.after)]),
      }

      const memory = totals[3]!
      const redis = totals[4]!
      const verdicts: Verdict[] = [
        {
          target: 'tollgate + Redis >= 1.0 x bare http-proxy req/s (median round)',
          pass: medianRatio(redis) >= 1.0,
          detail: `${fmtFixed(medianRatio(redis))} x (all rounds: ${fmtInt(rate(redis))} vs ${fmtInt(rate(bare))} req/s = ${fmtFixed(rate(redis) / rate(bare))} x)`,
        },
        {
          target: 'tollgate in-memory >= 1.2 x bare http-proxy req/s (median round)',
          pass: medianRatio(memory) >= 1.2,
          detail: `${fmtFixed(medianRatio(memory))} x (all rounds: ${fmtInt(rate(memory))} vs ${fmtInt(rate(bare))} req/s = ${fmtFixed(rate(memory) / rate(bare))} x)`,
        },
        {
          target: 'no request failed through tollgate',
          pass: memory.non2xx + memory.errors + redis.non2xx + redis.errors === 0,
          detail: `${memory.non2xx + memory.errors} in-memory, ${redis.non2xx + redis.errors} Redis`,
        },
        {
          target: 'tollgate leaves no upstream request running after a client abort',
          pass: leaks[2]!.after === 0,
          detail: leaks.map((leak) => `${leak.name} ${leak.after}/${leak.before}`).join(', '),
        },
      ]
      return {
        tables: [table, leakTable],
        verdicts,
        notes: [
          `GET / of examples/demo-upstream.ts (a few bytes, no delay). Every server in its own process on this machine, autocannon in the bench process; ${ROUNDS} rounds of ${ROUND_S} s per variant after a ${WARMUP_S} s warm-up, order flipped every round. p50/p99: median over the rounds of autocannon's per-round percentiles. 'x bare, median round': the median over the rounds of the ratio to bare http-proxy in the same round (robust against bursts of other load); the verdicts use it.`,
          `tollgate: the bin (src/gateway/main.ts via tsx) with --permits ${PERMITS} (never waits), pino access log at info to a discarded stderr, metrics on. Bare proxies: createProxyServer({ target }) + an error handler, no agent (http-proxy 1.x then sends Connection: close upstream).`,
          `Redis per tollgate + Redis request: scripts/req = EVALSHA calls (client round trips: an acquire and a release per request, but while calls of a name are in flight the store sends the acquires, and the releases, of one event-loop turn as one call after the first; renewals are batched per process), cmds/req = every command the server ran, the ones inside the scripts included (INFO commandstats): ${topCommands(redis.server, redis.requests)}.`,
          `Leak check: ${LEAK_REQUESTS} requests to /slow?ms=${LEAK_UPSTREAM_MS}, aborted by the client after 300 ms; the upstream is asked how many of them it is still serving 500 ms later.`,
        ],
        data: {
          totals: totals.map((total) => ({ ...total, requestsPerSecond: rate(total) })),
          leaks,
        },
      }
    } finally {
      await Promise.all(processes.map((child) => child.stop()))
    }
  },
}

export const gatewayScenarios: Scenario[] = [gatewayThroughput]
