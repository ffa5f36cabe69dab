// Adaptive limits against what one client can make the upstream answer (issue 37): two gateway
// replicas on the run's Redis with a fleet-wide adaptive limit (max 16, every other option its
// default), an upstream that answers in 20 ms far below its capacity (its own process), and 8
// well-behaved closed-loop clients (bench/lib/closed-loop.ts, its own process), each from an address
// of its own (the drop decision is per client), as is each attacker. Five attacks: one request per
// window (1 s) to a path the upstream answers 503 or 429, on one replica; three clients reading a
// 16 MB response at 4 MB/s; one client with six 64 KB uploads at a time, each body sent in 3 s; one
// client sending 30 requests a second to a path answered 503 (~8 % of the traffic); one user running
// four 2 s queries at a time. Every round runs on a fleet of its own (fresh replicas,
// a fresh key prefix: no round inherits a limit another one moved), and rounds with and without the
// attack alternate (the order flips every pair), so that drift in what else runs on the machine falls
// on both. Targets: with the attack, the good clients keep >= 0.9 x the 200s per second they have
// without it, and the limit stays within +-25 % of its median without it (its lowest and highest
// with the attack).
import http from 'node:http'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { onProcessExit } from '../../test/helpers/process-cleanup.js'
import { freePort } from '../../test/helpers/redis-server.js'
import { GATEWAY_BIN, requireBuiltGateway } from '../lib/gateway-bin.js'
import { type BenchProcess, startProcess } from '../lib/processes.js'
import { fmtFixed, fmtInt } from '../lib/report.js'
import type { BenchContext, Scenario, Table, Verdict } from '../lib/scenario.js'
import { median } from '../lib/stats.js'

const ADAPTIVE = { max: 16, initial: 16 }
const GOOD_CLIENTS = 8
const REPLICAS = 2
/** Pairs of rounds (one with the attack, one without) per attack. */
const PAIRS = 3
/** Measured seconds of a round... */
const ROUND_S = 12
/** ...after this many of the good clients alone on its fresh fleet (connections, JIT, the first
 * windows; not measured). */
const WARMUP_S = 3
const POLL_MS = 200
const WINDOW_MS = 1000
const BIG_BYTES = 16 * 1024 * 1024
/** The slow readers take 64 KB every 16 ms: 4 MB/s, 4 s per 16 MB response. */
const READ_CHUNK = 64 * 1024
const READ_TICK_MS = 16
const UPLOAD_BYTES = 64 * 1024
const UPLOAD_MS = 3000
const DROP_CLIENT_RATE = 30
const SLOW_QUERY_MS = 2000
const RATIO_TARGET = 0.9
const BAND = 0.25

type AttackKey = 'drops' | 'slow-readers' | 'slow-uploads' | 'drop-client' | 'slow-endpoint'

interface Attack {
  key: AttackKey
  title: string
  /** Start it against the replicas; the returned function stops it. */
  start(urls: readonly string[]): () => Promise<void>
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** An attacker's address: one of its own (the good clients' are 127.0.0.10-17). */
const attacker = (n: number) => `127.0.0.${200 + n}`

/** One request per window to /503 then /429 (alternately), all on the first replica. */
function dropsAttack(urls: readonly string[]): () => Promise<void> {
  let running = true
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1, localAddress: attacker(0) })
  const loop = (async () => {
    for (let i = 0; running; i++) {
      const started = performance.now()
      await new Promise<void>((resolve) => {
        http
          .get(`${urls[0]}/${i % 2 === 0 ? 503 : 429}`, { agent }, (res) => res.resume().on('end', resolve))
          .on('error', () => resolve())
      })
      await sleep(Math.max(0, WINDOW_MS - (performance.now() - started)))
    }
  })()
  return async () => {
    running = false
    await loop
    agent.destroy()
  }
}

/** Three clients asking for /big over and over (spread over the replicas, started 1.3 s apart so that
 * their responses end in different windows), reading it slowly. */
function slowReadersAttack(urls: readonly string[]): () => Promise<void> {
  let running = true
  const sockets = new Set<net.Socket>()
  const reader = async (url: string, afterMs: number) => {
    const { hostname, port } = new URL(url)
    await sleep(afterMs)
    while (running) {
      await new Promise<void>((resolve) => {
        const socket = net.connect({ port: Number(port), host: hostname, localAddress: attacker(1) })
        sockets.add(socket)
        socket.write('GET /big HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n')
        let timer: NodeJS.Timeout | undefined
        socket.on('data', (chunk: Buffer) => {
          socket.pause()
          timer = setTimeout(() => socket.resume(), (READ_TICK_MS * chunk.length) / READ_CHUNK)
        })
        socket.on('error', () => undefined)
        socket.once('close', () => {
          clearTimeout(timer)
          sockets.delete(socket)
          resolve()
        })
      })
    }
  }
  const loops = [0, 1, 2].map((i) => reader(urls[i % urls.length] as string, i * 1300))
  return async () => {
    running = false
    for (const socket of sockets) socket.destroy()
    await Promise.all(loops)
  }
}

/** One client (one address) with six uploads of 64 KB at a time over the replicas, each body sent in
 * 16 pieces over UPLOAD_MS (the upstream answers 20 ms after its end), started 500 ms apart. */
function slowUploadsAttack(urls: readonly string[]): () => Promise<void> {
  let running = true
  const sockets = new Set<net.Socket>()
  const upload = async (url: string, afterMs: number) => {
    const { hostname, port } = new URL(url)
    await sleep(afterMs)
    while (running) {
      await new Promise<void>((resolve) => {
        const socket = net.connect({ port: Number(port), host: hostname, localAddress: attacker(2) })
        sockets.add(socket)
        const timers: NodeJS.Timeout[] = []
        socket.write(
          `POST /upload HTTP/1.1\r\nhost: x\r\ncontent-length: ${UPLOAD_BYTES}\r\nconnection: close\r\n\r\n`,
        )
        for (let i = 0; i < 16; i++) {
          const piece = () => socket.write(Buffer.alloc(UPLOAD_BYTES / 16, 0x62))
          timers.push(setTimeout(piece, ((i + 1) * UPLOAD_MS) / 16))
        }
        socket.resume()
        socket.on('error', () => undefined)
        socket.once('close', () => {
          for (const timer of timers) clearTimeout(timer)
          sockets.delete(socket)
          resolve()
        })
      })
    }
  }
  const loops = Array.from({ length: 6 }, (_, i) => upload(urls[i % urls.length] as string, i * 500))
  return async () => {
    running = false
    for (const socket of sockets) socket.destroy()
    await Promise.all(loops)
  }
}

/** One client sending DROP_CLIENT_RATE requests a second to /503 on the first replica (answered at
 * once: each holds a permit for ~1 ms). */
function dropClientAttack(urls: readonly string[]): () => Promise<void> {
  let running = true
  const agent = new http.Agent({ keepAlive: true, maxSockets: 4, localAddress: attacker(3) })
  const inFlight = new Set<Promise<void>>()
  const loop = (async () => {
    const started = performance.now()
    for (let i = 0; running; i++) {
      const sent = new Promise<void>((resolve) => {
        http
          .get(`${urls[0]}/503`, { agent }, (res) => res.resume().on('end', resolve))
          .on('error', () => resolve())
      })
      inFlight.add(sent)
      void sent.then(() => inFlight.delete(sent))
      await sleep(Math.max(0, started + ((i + 1) * 1000) / DROP_CLIENT_RATE - performance.now()))
    }
  })()
  return async () => {
    running = false
    await loop
    await Promise.all(inFlight)
    agent.destroy()
  }
}

/** One user running four queries of SLOW_QUERY_MS at a time on the first replica (the upstream is
 * idle meanwhile: a legitimately slow endpoint, far below its capacity). */
function slowEndpointAttack(urls: readonly string[]): () => Promise<void> {
  let running = true
  const agent = new http.Agent({ keepAlive: true, maxSockets: 4, localAddress: attacker(4) })
  const loops = Array.from({ length: 4 }, async () => {
    while (running) {
      await new Promise<void>((resolve) => {
        http
          .get(`${urls[0]}/slow?ms=${SLOW_QUERY_MS}`, { agent }, (res) => res.resume().on('end', resolve))
          .on('error', () => resolve())
      })
    }
  })
  return async () => {
    running = false
    await Promise.all(loops)
    agent.destroy()
  }
}

const ATTACKS: Attack[] = [
  {
    key: 'drops',
    title: 'one request per window (1 s) to a path answered 503 or 429, on one replica',
    start: dropsAttack,
  },
  {
    key: 'slow-readers',
    title: `three clients reading a ${BIG_BYTES >> 20} MB response at ${(READ_CHUNK / READ_TICK_MS / 1000).toFixed(1)} MB/s`,
    start: slowReadersAttack,
  },
  {
    key: 'slow-uploads',
    title: `one client with six ${UPLOAD_BYTES >> 10} KB uploads at a time, each body sent in ${UPLOAD_MS / 1000} s`,
    start: slowUploadsAttack,
  },
  {
    key: 'drop-client',
    title: `one client sending ${DROP_CLIENT_RATE} requests a second to a path answered 503`,
    start: dropClientAttack,
  },
  {
    key: 'slow-endpoint',
    title: `one user running four ${SLOW_QUERY_MS / 1000} s queries at a time`,
    start: slowEndpointAttack,
  },
]

/** JSON over node:http (fetch would send an Origin on a PUT, which the admin API refuses; here only
 * GETs and the load generator's POSTs). */
function call<T>(method: string, url: string, body?: unknown): Promise<T> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body)
    const headers = payload === undefined ? {} : { 'content-type': 'application/json' }
    const req = http.request(url, { method, headers, timeout: 30_000 }, (res) => {
      let text = ''
      res.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')))
      res.on('end', () => {
        if ((res.statusCode ?? 0) >= 400)
          return reject(new Error(`${method} ${url}: ${res.statusCode} ${text}`))
        resolve((text === '' ? undefined : JSON.parse(text)) as T)
      })
      res.on('error', reject)
    })
    req.on('timeout', () => req.destroy(new Error(`${method} ${url}: no answer`)))
    req.on('error', reject)
    req.end(payload)
  })
}

interface Replica {
  url: string
  admin: string
  process: BenchProcess
}

interface LimitsReply {
  buckets: { adaptive?: { limit: number; estimate: number; leader: boolean } }[]
}

interface Round {
  attacked: boolean
  okPerS: number
  /** The fleet's limit per poll (the leader's; probes of the baseline left out). */
  limits: number[]
  probes: number
  nonOk: number
  errors: number
}

/** The leader's limit every POLL_MS until stopped; polls in a probe of the baseline (the limit at
 * three quarters of the estimate, or a quarter, for one window) are counted apart. */
function watchLimit(replicas: readonly Replica[]) {
  let running = true
  const limits: number[] = []
  let probes = 0
  const loop = (async () => {
    while (running) {
      const answers = await Promise.all(
        replicas.map((r) =>
          call<LimitsReply>('GET', `${r.admin}/limits/api`).then(
            (reply) => reply.buckets[0]?.adaptive,
            () => undefined,
          ),
        ),
      )
      const leader = answers.find((a) => a?.leader) ?? answers.find((a) => a !== undefined)
      if (leader && leader.limit < 0.85 * leader.estimate) probes++
      else if (leader) limits.push(leader.limit)
      await sleep(POLL_MS)
    }
  })()
  return {
    async stop() {
      running = false
      await loop
      return { limits, probes }
    },
  }
}

async function startFleet(
  ctx: BenchContext,
  upstream: string,
  dir: string,
  prefix: string,
  started: BenchProcess[],
): Promise<Replica[]> {
  const config = path.join(dir, `${prefix}.json`)
  writeFileSync(
    config,
    JSON.stringify({
      routes: [
        {
          name: 'api',
          match: { pathPrefix: '/' },
          upstream,
          concurrency: { per: 'route', maxWaitMs: 10_000, maxQueue: 1000, adaptive: ADAPTIVE },
        },
      ],
    }),
  )
  return Promise.all(
    Array.from({ length: REPLICAS }, async (_, i) => {
      const adminPort = await freePort()
      const child = await startProcess(
        GATEWAY_BIN,
        [
          ...['--config', config, '--port', '0', '--admin-port', String(adminPort)],
          ...['--redis', `redis://${ctx.redis.host}:${ctx.redis.port}`, '--prefix', prefix],
          ...['--log-level', 'warn'],
          // The second replica without the lean paths: undici's upstream path is measured too.
          ...(i === 1 ? ['--lean', 'off'] : []),
        ],
        /(http:\/\/\S+)/,
      )
      started.push(child)
      return { url: child.ready, admin: `http://127.0.0.1:${adminPort}`, process: child }
    }),
  )
}

interface LoadResult {
  seconds: number
  statuses: Record<string, number>
  errors: number
}

/** One round on a fleet of its own: the good clients alone for WARMUP_S, then with `attack` (if any)
 * for ROUND_S, measured. */
async function round(
  ctx: BenchContext,
  setup: { load: string; upstream: string; dir: string; prefix: string },
  attack: Attack | undefined,
): Promise<Round> {
  const fleet: BenchProcess[] = []
  let loading = false
  let stopAttack: (() => Promise<void>) | undefined
  const stopLoad = () => {
    loading = false
    return call<LoadResult>('POST', `${setup.load}/stop`)
  }
  try {
    const replicas = await startFleet(ctx, setup.upstream, setup.dir, setup.prefix, fleet)
    const urls = replicas.map((r) => r.url)
    const start = async () => {
      await call('POST', `${setup.load}/start`, {
        clients: GOOD_CLIENTS,
        targets: urls,
        path: '/work',
        addresses: true,
      })
      loading = true
    }
    await start()
    await sleep(WARMUP_S * 1000)
    await stopLoad()
    await start()
    stopAttack = attack?.start(urls)
    const watch = watchLimit(replicas)
    await sleep(ROUND_S * 1000)
    const { limits, probes } = await watch.stop()
    const result = await stopLoad()
    return outcome(attack, result, limits, probes)
  } finally {
    if (loading) await stopLoad().catch(() => undefined)
    await stopAttack?.()
    await Promise.all(fleet.map((p) => p.stop()))
  }
}

function outcome(attack: Attack | undefined, result: LoadResult, limits: number[], probes: number): Round {
  const ok = result.statuses['200'] ?? 0
  const all = Object.values(result.statuses).reduce((sum, n) => sum + n, 0)
  return {
    attacked: attack !== undefined,
    okPerS: ok / result.seconds,
    limits,
    probes,
    nonOk: all - ok,
    errors: result.errors,
  }
}

interface AttackResult {
  key: AttackKey
  title: string
  rounds: Round[]
  okWithout: number
  okWith: number
  ratio: number
  limitWithout: number
  limitWith: number
  lowestWith: number
  highestWith: number
}

export const adaptiveAttacksScenario: Scenario = {
  name: 'adaptive-attacks',
  title: `adaptive limits vs one client: 2 replicas on Redis, upstream 20 ms far below capacity, ${GOOD_CLIENTS} good clients; a 503/429 path once per window, 3 slow readers of 16 MB, slow uploads, one client's 503s, one user's slow queries; alternating rounds`,
  seconds: ATTACKS.length * 2 * PAIRS * (WARMUP_S + ROUND_S + 3) + 5,
  async run(ctx) {
    requireBuiltGateway()
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tollgate-bench-attacks-'))
    const forgetDir = onProcessExit(() => rmSync(dir, { recursive: true, force: true }))
    const processes: BenchProcess[] = []
    try {
      const upstream = await startProcess('test/fixtures/adaptive-upstream.ts', [], /(http:\/\/\S+)/)
      processes.push(upstream)
      const load = await startProcess('bench/lib/closed-loop.ts', [], /(http:\/\/\S+)/)
      processes.push(load)
      const results: AttackResult[] = []
      let n = 0
      for (const attack of ATTACKS) {
        const rounds: Round[] = []
        for (let pair = 0; pair < PAIRS; pair++) {
          // without, with; then with, without; ...
          const order = pair % 2 === 0 ? [undefined, attack] : [attack, undefined]
          for (const which of order) {
            const prefix = `bench-attacks-${n++}`
            const setup = { load: load.ready, upstream: upstream.ready, dir, prefix }
            const r = await round(ctx, setup, which)
            rounds.push(r)
            ctx.log(
              `  ${attack.key} ${r.attacked ? 'with   ' : 'without'}: ${fmtInt(r.okPerS)} ok/s, limit median ${median(r.limits)} (lowest ${Math.min(...r.limits)}), probes ${r.probes}, non-200 ${r.nonOk}, errors ${r.errors}`,
            )
          }
        }
        const okOf = (attacked: boolean) =>
          median(rounds.filter((r) => r.attacked === attacked).map((r) => r.okPerS))
        const limitsOf = (attacked: boolean) =>
          rounds.filter((r) => r.attacked === attacked).flatMap((r) => r.limits)
        const okWithout = okOf(false)
        const okWith = okOf(true)
        results.push({
          key: attack.key,
          title: attack.title,
          rounds,
          okWithout,
          okWith,
          ratio: okWith / okWithout,
          limitWithout: median(limitsOf(false)),
          limitWith: median(limitsOf(true)),
          lowestWith: Math.min(...limitsOf(true)),
          highestWith: Math.max(...limitsOf(true)),
        })
      }
      const table: Table = {
        columns: [
          'attack',
          'good ok/s without',
          'good ok/s with',
          'x without',
          'limit median without',
          'limit median with',
          'limit with: lowest-highest',
          'rounds (ok/s, without | with)',
        ],
        rows: results.map((r) => [
          r.title,
          fmtInt(r.okWithout),
          fmtInt(r.okWith),
          fmtFixed(r.ratio),
          String(r.limitWithout),
          String(r.limitWith),
          `${r.lowestWith}-${r.highestWith}`,
          `${r.rounds
            .filter((x) => !x.attacked)
            .map((x) => fmtInt(x.okPerS))
            .join(', ')} | ${r.rounds
            .filter((x) => x.attacked)
            .map((x) => fmtInt(x.okPerS))
            .join(', ')}`,
        ]),
      }
      const verdicts: Verdict[] = results.flatMap((r) => [
        {
          target: `${r.key}: the good clients keep >= ${RATIO_TARGET} x their 200s per second without the attack`,
          pass: r.ratio >= RATIO_TARGET,
          detail: `${fmtFixed(r.ratio)} x (${fmtInt(r.okWith)}/s vs ${fmtInt(r.okWithout)}/s, medians of ${PAIRS} rounds each)`,
        },
        {
          target: `${r.key}: the limit stays within +-${BAND * 100} % of its median without the attack`,
          pass: r.lowestWith >= (1 - BAND) * r.limitWithout && r.highestWith <= (1 + BAND) * r.limitWithout,
          detail: `with the attack ${r.lowestWith} to ${r.highestWith} (median ${r.limitWith}) vs a median of ${r.limitWithout} without`,
        },
      ])
      return {
        tables: [table],
        verdicts,
        notes: [
          `Upstream: test/fixtures/adaptive-upstream.ts (its own process): GET /work 200 after 20 ms, /503 and /429 at once, /big ${BIG_BYTES >> 20} MB after 20 ms, /slow?ms=N after N ms, POST /upload 20 ms after the body's end; nothing queues inside it. Good clients: ${GOOD_CLIENTS} closed loops of GET /work (bench/lib/closed-loop.ts, its own process, keep-alive undici pools, each from an address of its own, 127.0.0.10-17; each attacker from another) round-robin over ${REPLICAS} replicas of the built bin (node ${GATEWAY_BIN}; the second with --lean off, so both upstream paths carry the attack), one route with maxWaitMs 10000, adaptive ${JSON.stringify(ADAPTIVE)} (fleet scope, gradient, windows of ${WINDOW_MS} ms, every other option its default), on this run's Redis.`,
          `Every round on a fleet of its own (fresh replicas, fresh key prefix): ${WARMUP_S} s of the good clients alone (not measured), then ${ROUND_S} s measured, with the attack or without. ${PAIRS} pairs per attack; the order within a pair flips every pair (without-with, with-without, ...), so drift in the machine's load falls on both sides. ok/s: 200s per second over a round; 'x without': the median with / the median without. The limit: the leader's GET /limits every ${POLL_MS} ms; polls within a probe of the baseline (one window in 60 runs below the estimate, by design) are left out.`,
          'The machine is shared with other work (2 cores): a round that another process slowed shows in both columns only when it falls on both; read the per-round numbers beside the medians.',
        ],
        data: {
          adaptive: ADAPTIVE,
          goodClients: GOOD_CLIENTS,
          roundS: ROUND_S,
          pairs: PAIRS,
          results,
        },
      }
    } finally {
      await Promise.all(processes.map((p) => p.stop()))
      rmSync(dir, { recursive: true, force: true })
      forgetDir()
    }
  },
}

export const adaptiveAttacksScenarios: Scenario[] = [adaptiveAttacksScenario]
