// Gateway latency scenario: what the strict Redis path (an acquire and a release in Redis per request,
// a fence each) costs a client in time, against the same gateway on the in-memory store, with an
// upstream that answers in 1 ms (so requests overlap as in production), at 1, 50 and 200 connections
// (wrk, closed loop) and at fixed arrival rates (open loop, Poisson: 50 % and 90 % of the in-memory
// path's capacity). Peers in the same rounds: the upstream alone and nginx (the floor), and the same
// gateway with permit keep-alive. Inside each gateway, its own histograms split a request's time
// into the wait for its permit, the upstream leg and the rest (means over each round, from /metrics).
import { freePort } from '../../test/helpers/redis-server.js'
import { GATEWAY_BIN, KEEPALIVE_MS, requireBuiltGateway, UNLIMITED_PERMITS } from '../lib/gateway-bin.js'
import { post } from '../lib/control.js'
import { machineBusySeconds, schedSeconds, treeCpuSeconds } from '../lib/cpu.js'
import { type Nginx, nginxBinary, startNginx } from '../lib/nginx.js'
import { type BenchProcess, startProcess } from '../lib/processes.js'
import { diffSnapshots, type ServerDelta, sumDeltas } from '../lib/redis.js'
import { fmtFixed, fmtInt, fmtMs } from '../lib/report.js'
import type { Scenario, Table, Verdict } from '../lib/scenario.js'
import { median, percentile } from '../lib/stats.js'
import { type LoadRound, loadRound, wrkAvailable } from '../lib/wrk.js'

const UPSTREAM_PATH = '/slow?ms=1'
const CONCURRENCY = [1, 50, 200] as const
const WARMUP_S = 1
const ROUNDS = 3
const ROUND_S = 3
/** Open loop: arrival rates as fractions of the in-memory path's closed-loop req/s at 50 connections. */
const OPEN_LOAD = [0.5, 0.9] as const
const OPEN_ROUNDS = 2
const OPEN_ROUND_MS = 5000
/** Open-loop latencies of the first part of a round are left out: the generator opens its connections
 * then (each round starts with none), and a burst of new connections costs every proxy hundreds of ms
 * for about a second. Before the measured rounds, one warm-up round per variant. */
const OPEN_SKIP_MS = 1500

interface Target {
  name: string
  url: string
  pid: number
  redis: boolean
  /** The gateway's admin listener (its /metrics), for the split of a request's time. */
  admin?: string
}

/** Sums and counts of the gateway's duration histograms (all routes). */
interface Split {
  wait: [number, number]
  upstream: [number, number]
  request: [number, number]
}

/** Mean milliseconds of each part of a request's time in the gateway, over one round. */
interface Means {
  wait: number
  upstream: number
  request: number
}

interface Round extends LoadRound {
  cpuUs: number
  server: ServerDelta
  means?: Means
  /** µs per request that the proxy, the upstream and Redis spent on a CPU, and runnable waiting for one. */
  allRunUs: number
  allWaitUs: number
  /** Cores of the machine busy during the round (everything: the load generator too). */
  busyCores: number
}

async function split(admin: string): Promise<Split> {
  const text = await (await fetch(`${admin}/metrics`)).text()
  const total = (name: string): [number, number] => {
    let sum = 0
    let count = 0
    for (const line of text.split('\n')) {
      if (line.startsWith(`${name}_sum`)) sum += Number(line.slice(line.lastIndexOf(' ') + 1))
      if (line.startsWith(`${name}_count`)) count += Number(line.slice(line.lastIndexOf(' ') + 1))
    }
    return [sum, count]
  }
  return {
    wait: total('tollgate_wait_seconds'),
    upstream: total('tollgate_upstream_duration_seconds'),
    request: total('tollgate_request_duration_seconds'),
  }
}

/** Mean milliseconds of one histogram between two reads. */
function meanMs(before: [number, number], after: [number, number]): number {
  const count = after[1] - before[1]
  return count > 0 ? ((after[0] - before[0]) * 1000) / count : Number.NaN
}

interface OpenRound {
  sent: number
  ok: number
  failed: number
  p50: number
  p99: number
}

export const gatewayLatency: Scenario = {
  name: 'gateway-latency',
  title: `what the strict Redis path costs a client in time: 1 ms upstream, closed loop at ${CONCURRENCY.join(', ')} connections and open loop at ${OPEN_LOAD.map((f) => `${f * 100} %`).join(' and ')} of the in-memory capacity`,
  seconds:
    5 * CONCURRENCY.length * (WARMUP_S + ROUNDS * ROUND_S) +
    3 * 2 * (OPEN_ROUNDS + 1) * 6 +
    3 * (WARMUP_S + ROUNDS * ROUND_S) +
    20,
  async run(ctx) {
    const processes: BenchProcess[] = []
    let nginx: Nginx | undefined
    const start = async (script: string, args: string[], env?: Record<string, string>) => {
      const started = await startProcess(script, args, /(http:\/\/\S+)/, env)
      processes.push(started)
      return started
    }
    try {
      requireBuiltGateway()
      const upstreamPort = await freePort()
      const upstreamProcess = await start('examples/demo-upstream.ts', [], { PORT: String(upstreamPort) })
      const upstream = upstreamProcess.ready
      const binary = nginxBinary()
      if (binary) nginx = await startNginx(binary, upstreamPort)
      else
        ctx.log('  nginx not installed: its variant is left out (scripts/ensure-bench-tools.mjs installs it)')
      const redisUrl = `redis://${ctx.redis.host}:${ctx.redis.port}`
      const gateway = async (name: string, extra: string[], to = upstream): Promise<Target> => {
        const adminPort = await freePort()
        const flags = ['--upstream', to, '--port', '0', '--admin-port', String(adminPort)]
        const started = await start(GATEWAY_BIN, [...flags, '--permits', String(UNLIMITED_PERMITS), ...extra])
        return {
          name,
          url: started.ready,
          pid: started.pid,
          redis: extra.includes('--redis'),
          admin: `http://127.0.0.1:${adminPort}`,
        }
      }
      const targets: Target[] = [
        { name: 'upstream direct', url: upstream, pid: upstreamProcess.pid, redis: false },
        ...(nginx
          ? [{ name: 'nginx, 1 worker, upstream keepalive', url: nginx.url, pid: nginx.pid, redis: false }]
          : []),
        await gateway('tollgate in-memory', []),
        await gateway('tollgate + Redis (strict)', ['--redis', redisUrl, '--prefix', 'bench-lat']),
        await gateway(`tollgate + Redis, permit keep-alive ${KEEPALIVE_MS} ms`, [
          '--redis',
          redisUrl,
          '--prefix',
          'bench-lat-ka',
          '--permit-keepalive-ms',
          String(KEEPALIVE_MS),
        ]),
      ]
      const memoryIndex = targets.findIndex((t) => t.name === 'tollgate in-memory')
      const redisIndex = targets.findIndex((t) => t.name.startsWith('tollgate + Redis (strict)'))
      const directIndex = 0
      const generator = wrkAvailable() ? 'wrk -t1' : 'autocannon (wrk not installed)'

      /** ROUNDS alternating closed-loop rounds of `list` at `connections`, after a warm-up of each. */
      const closedRounds = async (list: Target[], connections: number, upstreamPid: number) => {
        for (const target of list) await loadRound(`${target.url}${UPSTREAM_PATH}`, WARMUP_S, connections)
        const rounds: Round[][] = list.map(() => [])
        for (let round = 0; round < ROUNDS; round++) {
          const order = list.map((_, i) => i)
          if (round % 2 === 1) order.reverse()
          for (const i of order) {
            const target = list[i]!
            const servers = [...new Set([target.pid, upstreamPid, ctx.redis.pid])]
            const sched = () =>
              servers.map(schedSeconds).reduce((t, s) => ({ run: t.run + s.run, wait: t.wait + s.wait }))
            const before = await ctx.redis.snapshot()
            const splitBefore = target.admin ? await split(target.admin) : undefined
            const cpuBefore = treeCpuSeconds(target.pid)
            const schedBefore = sched()
            const busyBefore = machineBusySeconds()
            const started = performance.now()
            const result = await loadRound(`${target.url}${UPSTREAM_PATH}`, ROUND_S, connections)
            const busyCores = (machineBusySeconds() - busyBefore) / ((performance.now() - started) / 1000)
            const schedAfter = sched()
            const perRequest = (seconds: number) => (seconds * 1e6) / result.requests
            const cpuUs = perRequest(treeCpuSeconds(target.pid) - cpuBefore)
            const splitAfter = target.admin ? await split(target.admin) : undefined
            const after = await ctx.redis.snapshot()
            const entry: Round = {
              ...result,
              cpuUs,
              server: diffSnapshots(before, after),
              allRunUs: perRequest(schedAfter.run - schedBefore.run),
              allWaitUs: perRequest(schedAfter.wait - schedBefore.wait),
              busyCores,
            }
            if (splitBefore && splitAfter)
              entry.means = {
                wait: meanMs(splitBefore.wait, splitAfter.wait),
                upstream: meanMs(splitBefore.upstream, splitAfter.upstream),
                request: meanMs(splitBefore.request, splitAfter.request),
              }
            rounds[i]!.push(entry)
            ctx.log(
              `    round ${round + 1} ${target.name}: ${fmtInt(result.rps)} req/s, p50 ${fmtMs(result.p50)}, ${fmtFixed(busyCores)} cores busy`,
            )
          }
        }
        return rounds
      }
      const closed = new Map<number, Round[][]>()
      for (const connections of CONCURRENCY) {
        ctx.log(`  closed loop, ${connections} connections (${generator})`)
        closed.set(connections, await closedRounds(targets, connections, upstreamProcess.pid))
      }
      // The same at 50 connections with an upstream that answers 1 ms after each request, not on the
      // event loop's millisecond ticks (bench/lib/precise-upstream.ts).
      ctx.log(`  closed loop, 50 connections, precise 1 ms upstream (${generator})`)
      const preciseProcess = await start('bench/lib/precise-upstream.ts', [])
      const precise: Target[] = [
        { name: 'upstream direct', url: preciseProcess.ready, pid: preciseProcess.pid, redis: false },
        await gateway('tollgate in-memory', [], preciseProcess.ready),
        await gateway(
          'tollgate + Redis (strict)',
          ['--redis', redisUrl, '--prefix', 'bench-lat-p'],
          preciseProcess.ready,
        ),
      ]
      const preciseRounds = await closedRounds(precise, 50, preciseProcess.pid)
      const med = (rounds: Round[], pick: (r: Round) => number) => median(rounds.map(pick))
      /** Median over the rounds of the ratio of two variants' req/s in the same round. */
      const ratio = (rounds: Round[][], i: number, j: number) =>
        median(rounds[i]!.map((r, k) => r.rps / rounds[j]![k]!.rps))
      /** Median over the rounds of the difference of two variants' p50 in the same round. */
      const p50Over = (rounds: Round[][], i: number, j: number) =>
        median(rounds[i]!.map((r, k) => r.p50 - rounds[j]![k]!.p50))
      const closedRows = (label: string, list: Target[], rounds: Round[][]) => {
        const memory = list.findIndex((t) => t.name === 'tollgate in-memory')
        return list.map((target, i) => {
          const server = sumDeltas(rounds[i]!.map((r) => r.server))
          const requests = rounds[i]!.reduce((total, r) => total + r.requests, 0)
          const meanOf = (pick: (m: Means) => number) =>
            target.admin ? fmtMs(med(rounds[i]!, (r) => pick(r.means!))) : '-'
          const over = p50Over(rounds, i, memory)
          return [
            label,
            target.name,
            fmtInt(med(rounds[i]!, (r) => r.rps)),
            fmtFixed(ratio(rounds, i, memory)),
            fmtMs(med(rounds[i]!, (r) => r.p50)),
            `${over >= 0 ? '+' : ''}${fmtMs(over)}`,
            fmtMs(med(rounds[i]!, (r) => r.p99)),
            meanOf((m) => m.wait),
            meanOf((m) => m.upstream),
            meanOf((m) => m.request),
            i === directIndex
              ? '-'
              : fmtFixed(
                  med(rounds[i]!, (r) => r.cpuUs),
                  1,
                ),
            target.redis ? fmtFixed(server.scriptCalls / requests, 2) : '-',
            target.redis ? fmtFixed((server.cpuSeconds * 1e6) / requests, 1) : '-',
            fmtFixed(
              med(rounds[i]!, (r) => r.allRunUs),
              1,
            ),
            fmtFixed(
              med(rounds[i]!, (r) => r.allWaitUs),
              1,
            ),
            fmtFixed(med(rounds[i]!, (r) => r.busyCores)),
            fmtInt(rounds[i]!.reduce((total, r) => total + r.errors, 0)),
          ]
        })
      }
      const closedTable: Table = {
        columns: [
          'connections',
          'variant',
          'req/s',
          'x in-memory',
          'p50',
          'p50 - in-memory',
          'p99',
          'wait for permit (mean)',
          'upstream leg (mean)',
          'in gateway (mean)',
          'proxy CPU µs/req',
          'redis scripts/req',
          'redis CPU µs/req',
          'servers on CPU µs/req',
          'servers waiting for a CPU µs/req',
          'machine busy (cores)',
          'errors',
        ],
        rows: [
          ...[...closed].flatMap(([connections, rounds]) => closedRows(String(connections), targets, rounds)),
          ...closedRows('50, precise 1 ms upstream', precise, preciseRounds),
        ],
      }

      // Open loop: the same arrivals whatever the answers, at fractions of the in-memory capacity.
      const capacity = med(closed.get(50)![memoryIndex]!, (r) => r.rps)
      const load = await startProcess('bench/lib/open-loop.ts', [], /(http:\/\/\S+)/)
      processes.push(load)
      const openTargets = [directIndex, memoryIndex, redisIndex]
      const open = new Map<number, OpenRound[][]>()
      for (const fraction of OPEN_LOAD) {
        const perS = Math.round(capacity * fraction)
        ctx.log(`  open loop at ${fmtInt(perS)} req/s (${fraction * 100} % of ${fmtInt(capacity)})`)
        const rounds: OpenRound[][] = targets.map(() => [])
        for (let round = -1; round < OPEN_ROUNDS; round++) {
          const order = round % 2 !== 0 ? [...openTargets].reverse() : openTargets
          for (const i of order) {
            await post(`${load.ready}/start`, {
              durationMs: OPEN_ROUND_MS,
              streams: [
                { name: 'all', target: targets[i]!.url, path: UPSTREAM_PATH, rates: [{ atMs: 0, perS }] },
              ],
            })
            await new Promise((resolve) => setTimeout(resolve, OPEN_ROUND_MS + 100))
            const result = await post<{
              streams: {
                buckets: { sent: number; ok: number; errors: number; refused: number; rejected: object }[]
                samples: number[]
              }[]
            }>(`${load.ready}/stop`)
            const stream = result.streams[0]!
            const latencies: number[] = []
            for (let k = 0; k + 1 < stream.samples.length; k += 2)
              if (stream.samples[k]! >= OPEN_SKIP_MS) latencies.push(stream.samples[k + 1]!)
            const sorted = Float64Array.from(latencies).sort()
            const sent = stream.buckets.reduce((total, b) => total + b.sent + b.refused, 0)
            const ok = stream.buckets.reduce((total, b) => total + b.ok, 0)
            if (round < 0) continue // the warm-up
            rounds[i]!.push({
              sent,
              ok,
              failed: sent - ok,
              p50: percentile(sorted, 50),
              p99: percentile(sorted, 99),
            })
            ctx.log(
              `    ${round < 0 ? 'warm-up' : `round ${round + 1}`} ${targets[i]!.name}: ${fmtInt(ok)} of ${fmtInt(sent)} answered 2xx, p50 ${fmtMs(percentile(sorted, 50))}, p99 ${fmtMs(percentile(sorted, 99))}`,
            )
          }
        }
        open.set(fraction, rounds)
      }
      const openMedian = (rounds: OpenRound[], pick: (r: OpenRound) => number) => median(rounds.map(pick))
      const openTable: Table = {
        columns: ['arrivals', 'variant', 'p50', 'p99', 'p50 - direct', 'p99 - direct', 'answered 2xx'],
        rows: [...open].flatMap(([fraction, rounds]) =>
          openTargets.map((i) => {
            const over = (pick: (r: OpenRound) => number) =>
              median(rounds[i]!.map((r, k) => pick(r) - pick(rounds[directIndex]![k]!)))
            const sent = rounds[i]!.reduce((total, r) => total + r.sent, 0)
            const ok = rounds[i]!.reduce((total, r) => total + r.ok, 0)
            return [
              `${fmtInt(capacity * fraction)}/s (${fraction * 100} %)`,
              targets[i]!.name,
              fmtMs(openMedian(rounds[i]!, (r) => r.p50)),
              fmtMs(openMedian(rounds[i]!, (r) => r.p99)),
              i === directIndex ? '-' : `+${fmtMs(over((r) => r.p50))}`,
              i === directIndex ? '-' : `+${fmtMs(over((r) => r.p99))}`,
              `${fmtFixed((ok / sent) * 100, 1)} %`,
            ]
          }),
        ),
      }

      const verdicts: Verdict[] = []
      for (const connections of [50, 200]) {
        const rounds = closed.get(connections)!
        const x = ratio(rounds, redisIndex, memoryIndex)
        const over = p50Over(rounds, redisIndex, memoryIndex)
        verdicts.push({
          target: `c=${connections}, 1 ms upstream: strict Redis path >= 0.95 x the in-memory path's req/s and p50 <= in-memory + 0.15 ms`,
          pass: x >= 0.95 && over <= 0.15,
          detail: `${fmtFixed(x)} x req/s; p50 +${fmtMs(over)} (${fmtMs(med(rounds[redisIndex]!, (r) => r.p50))} vs ${fmtMs(med(rounds[memoryIndex]!, (r) => r.p50))})`,
        })
      }
      for (const [fraction, rounds] of open) {
        const p99 = (i: number) => openMedian(rounds[i]!, (r) => r.p99)
        const answered = (i: number) =>
          rounds[i]!.reduce((t, r) => t + r.ok, 0) / rounds[i]!.reduce((t, r) => t + r.sent, 0)
        // Both paths must keep up with the arrivals for their p99s to compare latency, not backlog.
        const kept = answered(memoryIndex) >= 0.99 && answered(redisIndex) >= 0.99
        verdicts.push({
          target: `open loop at ${fraction * 100} % of the in-memory capacity: both paths answer >= 99 %, the strict Redis path's p99 <= 1.5 x the in-memory path's`,
          pass: kept && p99(redisIndex) <= 1.5 * p99(memoryIndex),
          detail: `${fmtMs(p99(redisIndex))} vs ${fmtMs(p99(memoryIndex))} (${fmtFixed(p99(redisIndex) / p99(memoryIndex))} x); answered ${fmtFixed(answered(redisIndex) * 100, 1)} % vs ${fmtFixed(answered(memoryIndex) * 100, 1)} %`,
        })
      }
      return {
        tables: [closedTable, openTable],
        verdicts,
        notes: [
          `GET ${UPSTREAM_PATH} of examples/demo-upstream.ts (answers after a 1 ms timer). Every server in its own process on this 2-core machine, the load generator too. Closed loop: ${generator}, ${WARMUP_S} s warm-up per variant and concurrency, then ${ROUNDS} rounds of ${ROUND_S} s, order flipped every round; req/s, p50, p99, CPU: medians over the rounds; 'x in-memory' and 'p50 - in-memory': medians over the rounds of the comparison within a round.`,
          `Variants: the built bin (node ${GATEWAY_BIN}) with --permits ${UNLIMITED_PERMITS} (never waits: the cost is measured, not queueing), access log at info to a discarded stderr, metrics on; 'strict': every request takes a permit and a fence in Redis and gives it back (the default); 'permit keep-alive' (opt-in, --permit-keepalive-ms ${KEEPALIVE_MS}): a finished request's lease serves the next request of its bucket on this replica, no fence sent. nginx: worker_processes 1, upstream keepalive 64.`,
          `In the gateway (means over the round, from its own histograms on /metrics): 'wait for permit' is tollgate_wait_seconds (request parsed to permit granted), 'upstream leg' tollgate_upstream_duration_seconds (forwarded to upstream response headers), 'in gateway' tollgate_request_duration_seconds (request arrived to response closed).`,
          `Open loop: bench/lib/open-loop.ts (Node, undici, Poisson arrivals looked at every 2 ms, up to 4096 in flight), ${OPEN_ROUNDS} rounds of ${OPEN_ROUND_MS / 1000} s per variant at each rate, order flipped every round; after one warm-up round each; the first ${OPEN_SKIP_MS} ms of a round left out (connections being opened). The generator is a Node process on the same 2 cores, so at high rates it takes CPU the proxies need. The rates are fractions of the in-memory path's closed-loop req/s at 50 connections in this run (${fmtInt(capacity)}). Latency includes the generator's own (the 'direct' row): the '- direct' columns are what the proxy adds, medians over rounds of the difference within a round.`,
        ],
        data: {
          targets: targets.map((t) => t.name),
          closed: Object.fromEntries(closed),
          open: Object.fromEntries(open),
          capacity,
        },
      }
    } finally {
      await Promise.all(processes.map((child) => child.stop()))
      await nginx?.stop()
    }
  },
}

export const gatewayLatencyScenarios: Scenario[] = [gatewayLatency]
