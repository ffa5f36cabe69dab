// Gateway scenario: wrk (50 connections, µs latencies) against the demo upstream directly, through
// nginx (one worker, upstream keep-alive), through http-proxy 1.18 with a keep-alive agent (what its
// docs recommend for production), and through the tollgate bin on the in-memory store and on Redis.
// Every server runs in its own process; the variants alternate round by round, so drift on this
// shared machine hits them alike; each server's CPU per request comes from /proc. Then one autocannon
// round per variant as a cross-check, and the client-abort leak check: clients abort requests the
// upstream is still working on; how many upstream requests are left running?
import autocannon from 'autocannon'
import { freePort } from '../../test/helpers/redis-server.js'
import { GATEWAY_BIN, KEEPALIVE_MS, requireBuiltGateway, UNLIMITED_PERMITS } from '../lib/gateway-bin.js'
import { treeCpuSeconds } from '../lib/cpu.js'
import { type Nginx, nginxBinary, startNginx } from '../lib/nginx.js'
import { type BenchProcess, startProcess } from '../lib/processes.js'
import { diffSnapshots, type ServerDelta, sumDeltas, topCommands } from '../lib/redis.js'
import { fmtFixed, fmtInt, fmtMs } from '../lib/report.js'
import type { BenchContext, Scenario, Table, Verdict } from '../lib/scenario.js'
import { median, percentile } from '../lib/stats.js'
import { type LoadRound, loadRound, wrkAvailable } from '../lib/wrk.js'

const CONNECTIONS = 50
const WARMUP_S = 2
// Many short rounds: a burst of foreign load on this shared machine spoils a few round pairs (which
// the median ratio ignores) rather than a large part of one variant's time.
const ROUNDS = 6
const ROUND_S = 3
/** Dashboard viewers polling /dashboard/data.json while the dashboard variant runs, and how often
 * each polls (the page polls every 2 s: these poll twice as often). */
const VIEWERS = 10
const VIEWER_POLL_MS = 1000
const LEAK_REQUESTS = 20
const LEAK_UPSTREAM_MS = 2000

interface Target {
  name: string
  url: string
  /** The process(es) doing the proxying (CPU per request); the upstream's for 'direct'. */
  pid: number
  redis: boolean
  /** The admin listener whose dashboard is polled while this variant runs. */
  dashboard?: string
}

interface Round extends LoadRound {
  cpuUs: number
  upstreamCpuUs: number
  server: ServerDelta
}

const load = (url: string, seconds: number) => loadRound(url, seconds, CONNECTIONS)

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

interface Viewers {
  polls: number
  failures: number
  /** Milliseconds each data.json took, as a viewer saw it. */
  took: number[]
}

/** Runs `fn` while VIEWERS dashboards poll `admin`'s data.json as the page does (the whole history
 * first, then ?since= the newest point held). */
async function withViewers<T>(admin: string | undefined, viewers: Viewers, fn: () => Promise<T>): Promise<T> {
  if (!admin) return fn()
  let running = true
  const viewer = async (offset: number) => {
    await sleep(offset)
    let newest: number | undefined
    while (running) {
      const started = performance.now()
      try {
        const since = newest === undefined ? '' : `?since=${newest}`
        const response = await fetch(`${admin}/dashboard/data.json${since}`, { cache: 'no-store' })
        const data = (await response.json()) as { routes: { history: { t: number }[] }[] }
        newest = Math.max(...data.routes.flatMap((route) => route.history.map((point) => point.t)))
        if (!Number.isFinite(newest)) newest = undefined
        if (!response.ok) viewers.failures++
      } catch {
        viewers.failures++
      }
      viewers.took.push(performance.now() - started)
      viewers.polls++
      await sleep(VIEWER_POLL_MS)
    }
  }
  const all = Array.from({ length: VIEWERS }, (_, i) => viewer((i * VIEWER_POLL_MS) / VIEWERS))
  try {
    return await fn()
  } finally {
    running = false
    await Promise.all(all)
  }
}

export const gatewayThroughput: Scenario = {
  name: 'gateway',
  title: `tollgate gateway vs http-proxy (keep-alive) and nginx, wrk ${CONNECTIONS} connections; client-abort leak check`,
  seconds: 8 * (WARMUP_S + ROUNDS * ROUND_S + ROUND_S) + 25,
  async run(ctx) {
    const processes: BenchProcess[] = []
    let nginx: Nginx | undefined
    const start = async (script: string, args: string[], env?: Record<string, string>) => {
      const started = await startProcess(script, args, /(http:\/\/\S+)/, env)
      processes.push(started)
      return started
    }
    try {
      const upstreamPort = await freePort()
      const upstreamProcess = await start('examples/demo-upstream.ts', [], { PORT: String(upstreamPort) })
      const upstream = upstreamProcess.ready
      const gatewayFlags = [
        '--upstream',
        upstream,
        '--port',
        '0',
        '--admin-port',
        '0',
        '--permits',
        String(UNLIMITED_PERMITS),
      ]
      const redisUrl = `redis://${ctx.redis.host}:${ctx.redis.port}`
      const binary = nginxBinary()
      if (binary) nginx = await startNginx(binary, upstreamPort)
      else
        ctx.log('  nginx not installed: its variant is left out (scripts/ensure-bench-tools.mjs installs it)')
      requireBuiltGateway()
      const proxy = await start('bench/lib/bare-proxy.ts', ['http-proxy', upstream])
      const memory = await start(GATEWAY_BIN, gatewayFlags)
      const quiet = await start(GATEWAY_BIN, [...gatewayFlags, '--log-level', 'warn'])
      const withRedis = await start(GATEWAY_BIN, [
        ...gatewayFlags,
        '--redis',
        redisUrl,
        '--prefix',
        'bench-gw',
      ])
      const dashboardPort = await freePort()
      const dashboard = await start(GATEWAY_BIN, [
        ...gatewayFlags.slice(0, -4),
        '--admin-port',
        String(dashboardPort),
        '--permits',
        String(UNLIMITED_PERMITS),
        '--redis',
        redisUrl,
        '--prefix',
        'bench-gw-dash',
      ])
      const keepAlive = await start(GATEWAY_BIN, [
        ...gatewayFlags,
        '--redis',
        redisUrl,
        '--prefix',
        'bench-gw-ka',
        '--permit-keepalive-ms',
        String(KEEPALIVE_MS),
      ])
      const targets: Target[] = [
        { name: 'upstream direct', url: upstream, pid: upstreamProcess.pid, redis: false },
        ...(nginx
          ? [{ name: 'nginx, 1 worker, upstream keepalive', url: nginx.url, pid: nginx.pid, redis: false }]
          : []),
        { name: 'http-proxy 1.18 + keep-alive agent', url: proxy.ready, pid: proxy.pid, redis: false },
        { name: 'tollgate in-memory, no access log', url: quiet.ready, pid: quiet.pid, redis: false },
        { name: 'tollgate in-memory', url: memory.ready, pid: memory.pid, redis: false },
        { name: 'tollgate + Redis', url: withRedis.ready, pid: withRedis.pid, redis: true },
        {
          name: `tollgate + Redis, ${VIEWERS} dashboards polling`,
          url: dashboard.ready,
          pid: dashboard.pid,
          redis: true,
          dashboard: `http://127.0.0.1:${dashboardPort}`,
        },
        {
          name: `tollgate + Redis, permit keep-alive ${KEEPALIVE_MS} ms`,
          url: keepAlive.ready,
          pid: keepAlive.pid,
          redis: true,
        },
      ]
      const generator = wrkAvailable() ? 'wrk -t1' : 'autocannon (wrk not installed)'
      ctx.log(
        `  ${generator}, warm-up ${WARMUP_S} s each, then ${ROUNDS} alternating rounds of ${ROUND_S} s, ${CONNECTIONS} connections`,
      )
      const viewers: Viewers = { polls: 0, failures: 0, took: [] }
      for (const target of targets)
        await withViewers(target.dashboard, viewers, () => load(`${target.url}/`, WARMUP_S))
      viewers.took.length = 0
      const rounds: Round[][] = targets.map(() => [])
      for (let round = 0; round < ROUNDS; round++) {
        const order = targets.map((_, i) => i)
        if (round % 2 === 1) order.reverse()
        for (const i of order) {
          const target = targets[i]!
          const before = await ctx.redis.snapshot()
          const cpuBefore = treeCpuSeconds(target.pid)
          const upstreamBefore = treeCpuSeconds(upstreamProcess.pid)
          const result = await withViewers(target.dashboard, viewers, () => load(`${target.url}/`, ROUND_S))
          const cpuUs = ((treeCpuSeconds(target.pid) - cpuBefore) * 1e6) / result.requests
          const upstreamCpuUs =
            ((treeCpuSeconds(upstreamProcess.pid) - upstreamBefore) * 1e6) / result.requests
          const after = await ctx.redis.snapshot()
          rounds[i]!.push({ ...result, cpuUs, upstreamCpuUs, server: diffSnapshots(before, after) })
          ctx.log(
            `  round ${round + 1} ${target.name}: ${fmtInt(result.rps)} req/s, ${fmtFixed(cpuUs, 1)} µs CPU/req`,
          )
        }
      }
      // One autocannon round each: a second generator as a cross-check of the ranking.
      const cannon: number[] = []
      for (const target of targets) {
        const result = await autocannon({
          url: `${target.url}/`,
          connections: CONNECTIONS,
          duration: ROUND_S,
        })
        cannon.push(result.requests.total / result.duration)
      }

      const baseIndex = targets.findIndex((t) => t.name.startsWith('http-proxy'))
      const nginxIndex = targets.findIndex((t) => t.name.startsWith('nginx'))
      /** Median over the rounds of (this variant's req/s / the other's req/s in the same round). */
      const ratio = (i: number, j: number) =>
        j < 0 ? Number.NaN : median(rounds[i]!.map((r, k) => r.rps / rounds[j]![k]!.rps))
      const cpu = (i: number) => median(rounds[i]!.map((r) => r.cpuUs))
      const sum = (i: number, pick: (r: Round) => number) =>
        rounds[i]!.reduce((total, r) => total + pick(r), 0)
      const table: Table = {
        columns: [
          'variant',
          'req/s',
          'x http-proxy',
          'x nginx',
          'p50',
          'p99',
          'proxy CPU µs/req',
          'upstream CPU µs/req',
          'redis scripts/req',
          'redis cmds/req',
          'redis CPU µs/req',
          'errors',
          'autocannon req/s',
        ],
        rows: targets.map((target, i) => {
          const server = sumDeltas(rounds[i]!.map((r) => r.server))
          const requests = sum(i, (r) => r.requests)
          return [
            target.name,
            fmtInt(median(rounds[i]!.map((r) => r.rps))),
            fmtFixed(ratio(i, baseIndex)),
            fmtFixed(ratio(i, nginxIndex)),
            fmtMs(median(rounds[i]!.map((r) => r.p50))),
            fmtMs(median(rounds[i]!.map((r) => r.p99))),
            i === 0 ? '-' : fmtFixed(cpu(i), 1),
            fmtFixed(median(rounds[i]!.map((r) => r.upstreamCpuUs)), 1),
            target.redis ? fmtFixed(server.scriptCalls / requests, 2) : '-',
            target.redis ? fmtFixed(server.totalCalls / requests, 2) : '-',
            target.redis ? fmtFixed((server.cpuSeconds * 1e6) / requests, 1) : '-',
            fmtInt(sum(i, (r) => r.errors)),
            fmtInt(cannon[i]!),
          ]
        }),
      }

      const memoryIndex = targets.findIndex((t) => t.name === 'tollgate in-memory')
      const redisIndex = targets.findIndex((t) => t.name === 'tollgate + Redis')
      const keptIndex = targets.findIndex((t) => t.name.includes('permit keep-alive'))
      const dashboardIndex = targets.findIndex((t) => t.dashboard !== undefined)
      const leaks = []
      for (const i of [baseIndex, memoryIndex])
        leaks.push(await leakCheck(ctx, targets[i]!.name, targets[i]!.url, upstream))
      const leakTable: Table = {
        columns: ['proxy', 'upstream requests before the clients aborted', 'still running 500 ms after'],
        rows: leaks.map((leak) => [leak.name, String(leak.before), String(leak.after)]),
      }

      const errors = targets.reduce(
        (total, target, i) => (target.name.startsWith('tollgate') ? total + sum(i, (r) => r.errors) : total),
        0,
      )
      const tookSorted = Float64Array.from(viewers.took).sort()
      const cpuRatio = (i: number) => cpu(i) / cpu(baseIndex)
      const verdicts: Verdict[] = [
        {
          target: 'tollgate in-memory >= 1.5 x http-proxy req/s (median round)',
          pass: ratio(memoryIndex, baseIndex) >= 1.5,
          detail: `${fmtFixed(ratio(memoryIndex, baseIndex))} x; ${fmtFixed(ratio(memoryIndex, nginxIndex))} x nginx`,
        },
        {
          target: 'tollgate + Redis >= 1.3 x http-proxy req/s (median round)',
          pass: ratio(redisIndex, baseIndex) >= 1.3,
          detail: `${fmtFixed(ratio(redisIndex, baseIndex))} x; ${fmtFixed(ratio(redisIndex, nginxIndex))} x nginx`,
        },
        {
          target: `tollgate + Redis with permit keep-alive (opt-in, ${KEEPALIVE_MS} ms) >= 1.3 x http-proxy req/s (median round)`,
          pass: ratio(keptIndex, baseIndex) >= 1.3,
          detail: `${fmtFixed(ratio(keptIndex, baseIndex))} x; ${fmtFixed(ratio(keptIndex, nginxIndex))} x nginx; proxy CPU ${fmtFixed(cpu(keptIndex), 1)} µs (${fmtFixed(cpuRatio(keptIndex))} x http-proxy)`,
        },
        {
          target: 'tollgate proxy CPU per request <= 0.7 x http-proxy (in-memory and Redis)',
          pass: cpuRatio(memoryIndex) <= 0.7 && cpuRatio(redisIndex) <= 0.7,
          detail: `in-memory ${fmtFixed(cpu(memoryIndex), 1)} µs (${fmtFixed(cpuRatio(memoryIndex))} x), Redis ${fmtFixed(cpu(redisIndex), 1)} µs (${fmtFixed(cpuRatio(redisIndex))} x), http-proxy ${fmtFixed(cpu(baseIndex), 1)} µs`,
        },
        {
          target: `${VIEWERS} dashboards polling cost the data plane nothing measurable: req/s >= 0.95 x and p99 <= 1.2 x 'tollgate + Redis' (median round)`,
          pass:
            ratio(dashboardIndex, redisIndex) >= 0.95 &&
            median(rounds[dashboardIndex]!.map((r) => r.p99)) <=
              1.2 * median(rounds[redisIndex]!.map((r) => r.p99)) &&
            viewers.failures === 0,
          detail: `${fmtFixed(ratio(dashboardIndex, redisIndex))} x req/s; p99 ${fmtMs(median(rounds[dashboardIndex]!.map((r) => r.p99)))} vs ${fmtMs(median(rounds[redisIndex]!.map((r) => r.p99)))}; ${viewers.polls} polls of data.json, ${viewers.failures} failed, each p50 ${fmtMs(percentile(tookSorted, 50))} / p99 ${fmtMs(percentile(tookSorted, 99))}`,
        },
        {
          target: 'no request failed through tollgate',
          pass: errors === 0,
          detail: `${errors} errors or non-2xx`,
        },
        {
          target: 'tollgate leaves no upstream request running after a client abort',
          pass: leaks[1]!.after === 0,
          detail: leaks.map((leak) => `${leak.name} ${leak.after}/${leak.before}`).join(', '),
        },
      ]
      return {
        tables: [table, leakTable],
        verdicts,
        notes: [
          `GET / of examples/demo-upstream.ts (a few bytes, no delay). Every server in its own process on this 2-core machine, the load generator too (${generator}); ${ROUNDS} rounds of ${ROUND_S} s per variant after a ${WARMUP_S} s warm-up, order flipped every round. req/s, p50, p99 and CPU: medians over the rounds; 'x http-proxy' and 'x nginx': the median over the rounds of the ratio to that peer in the same round (robust against bursts of other load); the verdicts use them. 'autocannon req/s': one extra round each with autocannon (a Node process competing for the same 2 cores).`,
          `Peers, in the configuration a production user would run: nginx ${binary ? '' : '(not installed) '}with worker_processes 1, an upstream block with keepalive 64, proxy_http_version 1.1, access_log off; http-proxy 1.18.1 with new http.Agent({ keepAlive: true }) as its docs recommend. tollgate: the built bin (node ${GATEWAY_BIN}) with --permits ${UNLIMITED_PERMITS} (never waits), its pino access log at info to a discarded stderr (the 'no access log' variant: --log-level warn), metrics on.`,
          `CPU per request: utime + stime from /proc/<pid>/stat of the proxy process (nginx: master and worker) over each round, divided by the round's requests; 'upstream CPU' is the demo upstream's.`,
          `Permit keep-alive (opt-in: --permit-keepalive-ms ${KEEPALIVE_MS}, docs/gateway/behaviour.md "Permit keep-alive"): a finished request's lease serves the next request of its bucket on this replica for up to ${KEEPALIVE_MS} ms after Redis granted it, so Redis sees an acquire and a release per lease instead of per request; no fencing header is sent then, and a waiter of another replica can be passed over for up to about ${KEEPALIVE_MS} ms. The default 'tollgate + Redis' row takes and gives back a permit in Redis for every request.`,
          `Redis per tollgate + Redis request: scripts/req = EVALSHA calls (an acquire and a release per request, batched per event-loop turn while calls of the name are in flight), cmds/req = every command the server ran, those inside the scripts included; redis CPU = used_cpu_user + used_cpu_sys of INFO cpu over the rounds, divided by their requests (redis-server shares the 2 cores with everything else): ${topCommands(
            sumDeltas(rounds[redisIndex]!.map((r) => r.server)),
            sum(redisIndex, (r) => r.requests),
          )}.`,
          `Dashboard: the '${VIEWERS} dashboards polling' variant is 'tollgate + Redis' (its own process and prefix) while ${VIEWERS} clients poll its admin listener's /dashboard/data.json every ${VIEWER_POLL_MS} ms each (the page polls every 2 s); the listener builds one snapshot a second whoever asks (a store read per route), so its cost does not grow with viewers. Its Redis columns include those reads (one inspect a second: a few commands a second); the rest of their difference to 'tollgate + Redis' is how many calls the batcher merges per event-loop turn, which the admin listener's work moves a little. Its proxy CPU includes the admin listener's (the same process).`,
          `Leak check: ${LEAK_REQUESTS} requests to /slow?ms=${LEAK_UPSTREAM_MS}, aborted by the client after 300 ms; the upstream is asked how many of them it is still serving 500 ms later.`,
        ],
        data: { targets: targets.map((t) => t.name), rounds, cannon, leaks },
      }
    } finally {
      await Promise.all(processes.map((child) => child.stop()))
      await nginx?.stop()
    }
  },
}

export const gatewayScenarios: Scenario[] = [gatewayThroughput]
