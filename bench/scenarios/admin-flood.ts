// Admin flood scenario (docs/gateway/operate.md, "Admin listener"): the proxied path's latency while clients
// flood the admin listener of the same process. At the start of a flooded round, 64 connections each
// write 1 MB of pipelined GET /metrics, /readyz or /dashboard/data.json (small heads, or ~5 KB ones)
// and never read an answer, until the round ends. Rounds with and without the flood alternate; wrk
// measures the data plane throughout, the gateway's RSS is sampled every 100 ms, INFO commandstats
// counts what the store was asked, and a probe asks /healthz on a new connection every 200 ms of a
// flooded round. A third kind of round, the control, aims the same flood at a listener of this process
// that never reads (and probes the gateway's /healthz as often): what the flood costs the machine
// (the kernel's copies, the flooding clients, the probes) with no gateway work, the physical floor.
import { writeFile } from 'node:fs/promises'
import { readFileSync, mkdtempSync, rmSync } from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { freePort } from '../../test/helpers/redis-server.js'
import { GATEWAY_BIN, requireBuiltGateway } from '../lib/gateway-bin.js'
import { type BenchProcess, startProcess } from '../lib/processes.js'
import { diffSnapshots, type ServerDelta, sumDeltas } from '../lib/redis.js'
import { fmtFixed, fmtInt, fmtMs } from '../lib/report.js'
import type { Scenario, Table, Verdict } from '../lib/scenario.js'
import { median } from '../lib/stats.js'
import { type LoadRound, loadRound, wrkAvailable } from '../lib/wrk.js'

/** The data plane's clients (closed loop): a steady load, not saturation. */
const CONNECTIONS = 10
const WARMUP_S = 5
const ROUNDS = 6
const ROUND_S = 3
/** Limited routes: every /metrics and data.json reads each one's limit from the store. */
const ROUTES = 20
const FLOODERS = 64
const FLOOD_BYTES = 1024 * 1024
const PROBE_EVERY_MS = 200
const TARGETS = { p99Ratio: 2, rssMb: 64, probeMs: 1000 }
/** Store commands of the admin listener per second of answers at most: a PING and a read per route
 * for /metrics, a PING for /readyz, a read per route for data.json, each made once a second. */
const COMMANDS_PER_S = 1 + ROUTES + 1 + ROUTES

const PATHS = ['/metrics', '/readyz', '/dashboard/data.json']
const PAD = `X-Pad: ${'p'.repeat(5000)}\r\n`
/** The six floods (three paths, small and padded heads), one Buffer each, shared by every wave. */
const FLOODS = PATHS.flatMap((asked) =>
  ['', PAD].map((pad) => {
    const head = `GET ${asked} HTTP/1.1\r\nHost: 127.0.0.1\r\n${pad}\r\n`
    return Buffer.alloc(FLOOD_BYTES - (FLOOD_BYTES % head.length), head, 'latin1')
  }),
)

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

function rssMb(pid: number): number {
  const kb = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]
  return Number(kb) / 1024
}

/** FLOODERS connections that each write a flood and read nothing, until stop(). */
function flood(port: number): { stop(): void } {
  const sockets = Array.from({ length: FLOODERS }, (_, i) => {
    const socket = net.connect(port, '127.0.0.1')
    socket.pause()
    socket.on('error', () => undefined)
    socket.write(FLOODS[i % FLOODS.length] as Buffer)
    return socket
  })
  return {
    stop() {
      for (const socket of sockets) socket.destroy()
    },
  }
}

/** How long a /healthz on a new connection took (Infinity: no answer within 3 s). */
function probe(port: number): Promise<number> {
  return new Promise((resolve) => {
    const started = performance.now()
    const socket = net.connect(port, '127.0.0.1')
    let data = ''
    const done = (ms: number) => {
      clearTimeout(timer)
      socket.destroy()
      resolve(ms)
    }
    const timer = setTimeout(() => done(Number.POSITIVE_INFINITY), 3000)
    socket.on('error', () => done(Number.POSITIVE_INFINITY))
    socket.on('data', (chunk: Buffer) => {
      data += chunk.toString('latin1')
      if (/^HTTP\/1\.1 200[\s\S]*\r\n\r\nok\n/.test(data)) done(performance.now() - started)
    })
    socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n')
  })
}

type Kind = 'quiet' | 'flood' | 'control'

/** A listener that accepts connections and never reads them: the control's target. */
async function blackHole(): Promise<net.Server> {
  const server = net.createServer((socket) => {
    socket.pause()
    socket.on('error', () => undefined)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return server
}

interface Round extends LoadRound {
  kind: Kind
  flooded: boolean
  peakRssMb: number
  server: ServerDelta
  probes: number[]
}

export const adminFlood: Scenario = {
  name: 'admin-flood',
  title: `the proxied path's p50/p99 while ${FLOODERS} connections flood the admin listener with 1 MB of pipelined requests each, never read`,
  seconds: WARMUP_S + 3 * ROUNDS * ROUND_S + 15,
  async run(ctx) {
    const processes: BenchProcess[] = []
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tollgate-bench-admin-'))
    try {
      requireBuiltGateway()
      const upstreamPort = await freePort()
      const upstream = await startProcess('examples/demo-upstream.ts', [], /(http:\/\/\S+)/, {
        PORT: String(upstreamPort),
      })
      processes.push(upstream)
      // The proxied route has no limit: the store's commands are the admin listener's alone.
      const config = path.join(dir, 'gateway.json')
      await writeFile(
        config,
        JSON.stringify({
          defaults: { upstream: upstream.ready, concurrency: { per: 'route', permits: 1000 } },
          routes: [
            ...Array.from({ length: ROUTES }, (_, i) => ({ name: `r${i}`, match: { pathPrefix: `/r${i}` } })),
            { name: 'proxied', match: { pathPrefix: '/' }, concurrency: false },
          ],
        }),
      )
      const adminPort = await freePort()
      const gateway = await startProcess(
        GATEWAY_BIN,
        [
          ...['--config', config, '--port', '0', '--admin-port', String(adminPort)],
          ...['--redis', `redis://${ctx.redis.host}:${ctx.redis.port}`, '--prefix', 'bench-admin'],
          ...['--log-level', 'warn'],
        ],
        /(http:\/\/\S+)/,
      )
      processes.push(gateway)
      const url = `${gateway.ready}/`
      const generator = wrkAvailable() ? 'wrk -t1' : 'autocannon (wrk not installed)'
      ctx.log(`  ${generator}, ${CONNECTIONS} connections, ${ROUNDS} x 3 alternating rounds of ${ROUND_S} s`)
      const hole = await blackHole()
      const holePort = (hole.address() as net.AddressInfo).port

      let peak = 0
      const sampler = setInterval(() => (peak = Math.max(peak, rssMb(gateway.pid))), 100)
      try {
        await loadRound(url, WARMUP_S, CONNECTIONS)
        const baselineRssMb = Math.max(peak, rssMb(gateway.pid))
        const rounds: Round[] = []
        for (let round = 0; round < ROUNDS; round++) {
          // Every kind goes first, second and third in turn.
          const kinds: Kind[] = ['quiet', 'flood', 'control']
          const order = [...kinds.slice(round % 3), ...kinds.slice(0, round % 3)]
          for (const kind of order) {
            const flooded = kind === 'flood'
            peak = rssMb(gateway.pid)
            const before = await ctx.redis.snapshot()
            const flooding = kind === 'quiet' ? undefined : flood(flooded ? adminPort : holePort)
            const probes: number[] = []
            let probing = kind !== 'quiet'
            const prober = (async () => {
              while (probing) {
                probes.push(await probe(adminPort))
                await sleep(PROBE_EVERY_MS)
              }
            })()
            let result: LoadRound
            try {
              result = await loadRound(url, ROUND_S, CONNECTIONS)
            } finally {
              flooding?.stop()
              probing = false
              await prober
            }
            const after = await ctx.redis.snapshot()
            rounds.push({
              ...result,
              kind,
              flooded,
              peakRssMb: peak,
              server: diffSnapshots(before, after),
              probes,
            })
            ctx.log(
              `  round ${round + 1} ${kind}: p50 ${fmtMs(result.p50)}, p99 ${fmtMs(result.p99)}, ${fmtInt(result.rps)} req/s, RSS ${fmtFixed(peak, 0)} MB`,
            )
          }
        }

        const of = (flooded: boolean) => rounds.filter((r) => r.kind === (flooded ? 'flood' : 'quiet'))
        const controls = rounds.filter((r) => r.kind === 'control')
        const perS = (list: Round[], pick: (delta: ServerDelta) => number) => {
          const total = sumDeltas(list.map((r) => r.server))
          return pick(total) / (total.elapsedMs / 1000)
        }
        const triples = Array.from({ length: ROUNDS }, (_, i) => rounds.slice(3 * i, 3 * i + 3))
        const ratio = (over: Kind, under: Kind) =>
          median(
            triples.map(
              (triple) =>
                triple.find((r) => r.kind === over)!.p99 / triple.find((r) => r.kind === under)!.p99,
            ),
          )
        const p99Ratio = ratio('flood', 'quiet')
        const controlRatio = ratio('control', 'quiet')
        const overControl = ratio('flood', 'control')
        const probes = of(true).flatMap((r) => r.probes)
        const answered = probes.filter((ms) => ms <= TARGETS.probeMs).length
        const growth = Math.max(...of(true).map((r) => r.peakRssMb)) - baselineRssMb
        const quietGrowth = Math.max(...of(false).map((r) => r.peakRssMb)) - baselineRssMb
        const sent = (d: ServerDelta) => (d.calls.ping ?? 0) + d.scriptCalls
        const commandsPerS = perS(of(true), sent)
        // A round of s seconds holds at most ceil(s) + 1 intervals' answers.
        const overBound = of(true).filter(
          (r) => sent(r.server) > (Math.ceil(r.server.elapsedMs / 1000) + 1) * COMMANDS_PER_S,
        )
        const row = (name: string, list: Round[], growthMb: number): (string | number)[] => [
          name,
          fmtMs(median(list.map((r) => r.p50))),
          fmtMs(median(list.map((r) => r.p99))),
          fmtInt(median(list.map((r) => r.rps))),
          fmtFixed(growthMb, 1),
          fmtFixed(
            perS(list, (d) => d.totalCalls),
            1,
          ),
          fmtFixed(
            perS(list, (d) => d.calls.ping ?? 0),
            1,
          ),
          fmtFixed(
            perS(list, (d) => d.scriptCalls),
            1,
          ),
          fmtInt(list.reduce((sum, r) => sum + r.errors, 0)),
        ]
        const table: Table = {
          columns: [
            'rounds',
            'p50',
            'p99',
            'req/s',
            'RSS peak - warm-up peak (MB)',
            'store cmds/s (run inside scripts included)',
            'PING/s',
            'script calls/s',
            'errors',
          ],
          rows: [
            row('quiet', of(false), quietGrowth),
            row(
              'control: the flood aimed at a listener that never reads',
              controls,
              Math.max(...controls.map((r) => r.peakRssMb)) - baselineRssMb,
            ),
            row('admin listener flooded', of(true), growth),
          ],
        }
        const sorted = [...probes].sort((a, b) => a - b)
        const verdicts: Verdict[] = [
          {
            target: `the proxied path's p99 with the flood <= ${TARGETS.p99Ratio} x without (median of round triples)`,
            pass: p99Ratio <= TARGETS.p99Ratio,
            detail: `${fmtFixed(p99Ratio)} x; p99 ${fmtMs(median(of(true).map((r) => r.p99)))} vs ${fmtMs(median(of(false).map((r) => r.p99)))}; the control (the same flood, no gateway work) ${fmtFixed(controlRatio)} x, so the gateway's own part ${fmtFixed(overControl)} x the control`,
          },
          {
            target: `the gateway's RSS grows <= ${TARGETS.rssMb} MB under the flood`,
            pass: growth <= TARGETS.rssMb,
            detail: `+${fmtFixed(growth, 1)} MB over the warm-up's peak (quiet rounds: +${fmtFixed(quietGrowth, 1)} MB)`,
          },
          {
            target: `the flooded admin listener sends the store ${COMMANDS_PER_S} commands a second at most (PINGs and script calls; a round of s seconds: (ceil(s) + 1) x ${COMMANDS_PER_S})`,
            pass: overBound.length === 0,
            detail: `${fmtFixed(commandsPerS, 1)}/s; ${fmtFixed(
              perS(of(true), (d) => d.totalCalls),
              1,
            )} commands/s run in all, those the scripts run included`,
          },
          {
            target: `every /healthz probe during the flood answered within ${TARGETS.probeMs} ms`,
            pass: answered === probes.length && probes.length > 0,
            detail: `${answered} of ${probes.length}; slowest ${fmtMs(sorted.at(-1) ?? Number.NaN)}, median ${fmtMs(median(sorted))}`,
          },
          {
            target: 'every round served proxied requests, none failed',
            pass: rounds.every((r) => r.errors === 0 && r.requests > 0),
            detail: `${rounds.reduce((sum, r) => sum + r.errors, 0)} errors or non-2xx`,
          },
        ]
        return {
          tables: [table],
          verdicts,
          notes: [
            `The built bin (node ${GATEWAY_BIN}) on the run's redis-server, ${ROUTES} routes limited per: route (never hit) and a catch-all route without a limit that the load goes to (GET / of examples/demo-upstream.ts), so the store's commands are the admin listener's alone. Load: ${generator}, ${CONNECTIONS} connections (closed loop), ${ROUNDS} triples of ${ROUND_S} s rounds, quiet, flooded and control, each kind first, second and third in turn, after a ${WARMUP_S} s warm-up; p50, p99, req/s: medians over the rounds; a p99 ratio is the median over triples of one round's p99 over the other's.`,
            `The flood: at the start of each flooded round, ${FLOODERS} connections each write ${FLOOD_BYTES / 1024 / 1024} MB of pipelined GET /metrics, /readyz or /dashboard/data.json (a third each; half with ~40-byte heads, half with ~5 KB heads) and read nothing; they are closed when the round ends. Probes: /healthz on a new connection every ${PROBE_EVERY_MS} ms of each flooded and control round. The control: the same flood, at the same moment, aimed at a listener of this process that accepts and never reads; what it costs the data plane is the machine's part (the kernel's copies of 64 MB, the flooding clients, the probes), the floor under the flooded rounds.`,
            `RSS: VmRSS of the gateway every 100 ms; the growth is the highest RSS of the flooded (or quiet) rounds less the highest of the warm-up (load without the flood). Store: INFO commandstats over each round (INFO itself excluded; the commands scripts run included).`,
            `This machine (2 cores) is shared with other work; the load generator, the flooding clients (this process), the upstream, the gateway and Redis all run on it.`,
          ],
          data: { baselineRssMb, rounds },
        }
      } finally {
        clearInterval(sampler)
        hole.close()
      }
    } finally {
      await Promise.all(processes.map((child) => child.stop()))
      rmSync(dir, { recursive: true, force: true })
    }
  },
}

export const adminFloodScenarios: Scenario[] = [adminFlood]
