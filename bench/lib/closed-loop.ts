// A closed-loop load generator in a process of its own (the bench's event loop stays free for its
// polls): N clients, each sends its next request as soon as its last one is answered, to the targets
// round-robin (keep-alive, one undici pool per target). Targets change while it runs (replicas come
// and go). Only 127.0.0.1 targets are accepted.
//   node --import tsx bench/lib/closed-loop.ts -> "load generator listening on http://127.0.0.1:<port>"
// Control (JSON bodies):
//   POST /start   { clients, targets, path, measureAfterMs, addresses }  starts the clients
//                 (addresses: true: client i connects from 127.0.0.(10 + i), an address of its own, as
//                 distinct users would; default: all from 127.0.0.1)
//   POST /targets { targets }                                  where the next requests go
//   POST /stop                                                 stops the clients, waits for their last
//                                                              answers (15 s at most), returns the results
// Results: answers by status, errors, and the latency the clients saw (queueing in the gateway
// included) of the 200s that ended after measureAfterMs.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { Pool } from 'undici'
import { percentile, Samples } from './stats.js'

const MAX_CLIENTS = 1000
const STOP_WAIT_MS = 15_000
const LOCAL = /^http:\/\/127\.0\.0\.1:\d+$/

interface Run {
  running: boolean
  clients: Promise<void>[]
  targets: string[]
  next: number
  path: string
  started: number
  measureFrom: number
  statuses: Map<number, number>
  errors: number
  firstError: string | undefined
  perTarget: Map<string, number>
  latencies: Samples
  /** Each client connects from an address of its own. */
  addresses: boolean
}

const pools = new Map<string, Pool>()
let run: Run | undefined

function poolFor(origin: string, localAddress?: string): Pool {
  const key = localAddress ? `${origin} ${localAddress}` : origin
  let pool = pools.get(key)
  if (!pool) {
    pool = new Pool(origin, {
      connections: MAX_CLIENTS,
      pipelining: 1,
      keepAliveTimeout: 30_000,
      headersTimeout: 60_000,
      bodyTimeout: 60_000,
      ...(localAddress ? { localAddress } : {}),
    })
    pools.set(key, pool)
  }
  return pool
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

async function client(state: Run, index: number): Promise<void> {
  const localAddress = state.addresses ? `127.0.0.${10 + (index % 240)}` : undefined
  while (state.running) {
    if (state.targets.length === 0) {
      await sleep(5)
      continue
    }
    const target = state.targets[state.next++ % state.targets.length] as string
    const sent = performance.now()
    try {
      const { statusCode, body } = await poolFor(target, localAddress).request({
        path: state.path,
        method: 'GET',
      })
      await body.dump()
      const ended = performance.now()
      state.statuses.set(statusCode, (state.statuses.get(statusCode) ?? 0) + 1)
      state.perTarget.set(target, (state.perTarget.get(target) ?? 0) + 1)
      if (statusCode === 200 && ended >= state.measureFrom) state.latencies.push(ended - sent)
    } catch (error) {
      // A replica going away cuts its connections: count it, and do not spin on a dead target.
      state.errors++
      state.firstError ??= `${target}: ${(error as Error)?.message ?? String(error)}`
      await sleep(10)
    }
  }
}

function checkTargets(targets: unknown): string[] {
  if (!Array.isArray(targets) || !targets.every((t) => typeof t === 'string' && LOCAL.test(t)))
    throw new Error('targets: a list of http://127.0.0.1:<port>')
  return targets as string[]
}

async function stop(state: Run) {
  state.running = false
  const done = await Promise.race([
    Promise.all(state.clients).then(() => true),
    sleep(STOP_WAIT_MS).then(() => false),
  ])
  const seconds = (performance.now() - state.started) / 1000
  const sorted = state.latencies.sorted()
  const requests = [...state.statuses.values()].reduce((sum, n) => sum + n, 0)
  await Promise.all([...pools.values()].map((pool) => pool.destroy()))
  pools.clear()
  return {
    seconds,
    requests,
    statuses: Object.fromEntries(state.statuses),
    errors: state.errors,
    firstError: state.firstError ?? null,
    perTarget: Object.fromEntries(state.perTarget),
    clientsStopped: done,
    measured: sorted.length,
    p50Ms: percentile(sorted, 50),
    p99Ms: percentile(sorted, 99),
    maxMs: sorted.length > 0 ? (sorted[sorted.length - 1] as number) : Number.NaN,
  }
}

async function control(req: http.IncomingMessage): Promise<unknown> {
  let text = ''
  for await (const chunk of req as AsyncIterable<Buffer>) text += chunk.toString('utf8')
  const body = (text === '' ? {} : JSON.parse(text)) as Record<string, unknown>
  if (req.method !== 'POST') throw new Error('POST /start, /targets or /stop')
  if (req.url === '/start') {
    if (run?.running) throw new Error('already running')
    const clients = Number(body.clients)
    if (!Number.isInteger(clients) || clients < 1 || clients > MAX_CLIENTS)
      throw new Error(`clients: 1 to ${MAX_CLIENTS}`)
    const started = performance.now()
    const state: Run = {
      running: true,
      clients: [],
      targets: checkTargets(body.targets),
      next: 0,
      path: typeof body.path === 'string' && body.path.startsWith('/') ? body.path : '/',
      started,
      measureFrom: started + (Number(body.measureAfterMs) || 0),
      statuses: new Map(),
      errors: 0,
      firstError: undefined,
      perTarget: new Map(),
      latencies: new Samples(),
      addresses: body.addresses === true,
    }
    for (let i = 0; i < clients; i++) state.clients.push(client(state, i))
    run = state
    return { started: true }
  }
  if (req.url === '/targets') {
    if (!run?.running) throw new Error('not running')
    run.targets = checkTargets(body.targets)
    return { targets: run.targets }
  }
  if (req.url === '/stop') {
    if (!run) throw new Error('not started')
    const state = run
    run = undefined
    return await stop(state)
  }
  throw new Error('POST /start, /targets or /stop')
}

const server = http.createServer((req, res) => {
  control(req).then(
    (body) => reply(res, 200, body),
    (error: unknown) => reply(res, 400, { error: (error as Error)?.message ?? String(error) }),
  )
})

function reply(res: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body)
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) })
  res.end(text)
}

server.listen(0, '127.0.0.1', () => {
  process.stdout.write(
    `load generator listening on http://127.0.0.1:${(server.address() as AddressInfo).port}\n`,
  )
})
process.on('SIGTERM', () => process.exit(0))
