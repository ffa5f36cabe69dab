// An open-loop load generator in a process of its own: each stream sends requests at a fixed rate
// (Poisson arrivals), whether or not earlier ones were answered, so that overload is real (a closed
// loop slows down with the server and never overloads it). A stream is one class or one tenant: its
// own headers, a rate that may change at set times, and one target (a replica) it sticks to, as
// affinity does. Only 127.0.0.1 targets are accepted.
//   node --import tsx bench/lib/open-loop.ts -> "load generator listening on http://127.0.0.1:<port>"
// Control (JSON bodies):
//   POST /start { streams: [{ name, target, path, headers, rates: [{ atMs, perS }] }], durationMs }
//   POST /stop  stops sending, waits for the answers out (15 s at most), returns the results
// Results per stream: per 250 ms bucket, sent / 2xx / rejected by the body's reason / errors / sends
// refused (more than MAX_OUTSTANDING in flight); and every 2xx's send time and latency (ms), for the
// bench to take percentiles over any phase. Memory is bounded: MAX_SAMPLES latencies in all.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { Pool } from 'undici'

const BUCKET_MS = 250
const MAX_OUTSTANDING = 4096
const MAX_SAMPLES = 1_000_000
const MAX_STREAMS = 64
const STOP_WAIT_MS = 15_000
const LOCAL = /^http:\/\/127\.0\.0\.1:\d+$/

interface Rate {
  atMs: number
  perS: number
}

interface StreamSpec {
  name: string
  target: string
  path: string
  headers: Record<string, string>
  rates: Rate[]
}

interface Bucket {
  sent: number
  ok: number
  rejected: Record<string, number>
  errors: number
  refused: number
}

interface Stream {
  spec: StreamSpec
  buckets: Bucket[]
  /** Pairs: send time (ms from the start), latency (ms), of each 2xx. */
  samples: number[]
}

const pools = new Map<string, Pool>()
let outstanding = 0
let samples = 0
let running: { streams: Stream[]; pending: Set<Promise<void>>; timer: NodeJS.Timeout } | undefined

function poolFor(origin: string): Pool {
  let pool = pools.get(origin)
  if (!pool) {
    pool = new Pool(origin, {
      connections: 512,
      pipelining: 1,
      keepAliveTimeout: 30_000,
      headersTimeout: 60_000,
      bodyTimeout: 60_000,
    })
    pools.set(origin, pool)
  }
  return pool
}

function bucketOf(stream: Stream, atMs: number): Bucket {
  const index = Math.floor(atMs / BUCKET_MS)
  while (stream.buckets.length <= index)
    stream.buckets.push({ sent: 0, ok: 0, rejected: {}, errors: 0, refused: 0 })
  return stream.buckets[index] as Bucket
}

/** The stream's rate at `atMs`: the last change at or before it. */
function rateAt(spec: StreamSpec, atMs: number): number {
  let perS = 0
  for (const rate of spec.rates) if (rate.atMs <= atMs) perS = rate.perS
  return perS
}

async function send(stream: Stream, started: number): Promise<void> {
  const sentAt = performance.now() - started
  const bucket = bucketOf(stream, sentAt)
  if (outstanding >= MAX_OUTSTANDING) {
    bucket.refused++
    return
  }
  outstanding++
  bucket.sent++
  try {
    const { statusCode, body } = await poolFor(stream.spec.target).request({
      path: stream.spec.path,
      method: 'GET',
      headers: stream.spec.headers,
    })
    const text = statusCode >= 200 && statusCode < 300 ? (await body.dump(), '') : await body.text()
    const latency = performance.now() - started - sentAt
    if (statusCode >= 200 && statusCode < 300) {
      bucket.ok++
      if (samples < MAX_SAMPLES) {
        samples++
        stream.samples.push(Math.round(sentAt * 10) / 10, Math.round(latency * 100) / 100)
      }
    } else {
      const reason = reasonOf(statusCode, text)
      bucket.rejected[reason] = (bucket.rejected[reason] ?? 0) + 1
    }
  } catch {
    bucket.errors++
  } finally {
    outstanding--
  }
}

/** The reason of a rejection: the JSON body's `reason` (Tollgate's), else the status. */
function reasonOf(status: number, text: string): string {
  try {
    const reason = (JSON.parse(text) as { reason?: unknown }).reason
    if (typeof reason === 'string' && /^[a-z_]{1,32}$/.test(reason)) return reason
  } catch {
    // not JSON
  }
  return String(status)
}

/** Each stream's arrivals, looked at every TICK_MS: every arrival due is sent then (timers of less than
 * a millisecond would round up and cap the rate). Gaps are exponential at the rate in force. */
const TICK_MS = 2

function gap(perS: number): number {
  return perS > 0 ? (-Math.log(1 - Math.random()) * 1000) / perS : BUCKET_MS
}

function drive(
  streams: Stream[],
  started: number,
  pending: Set<Promise<void>>,
  stopAt: number,
): NodeJS.Timeout {
  const next = streams.map((stream) => gap(rateAt(stream.spec, 0)))
  const timer = setInterval(() => {
    const now = performance.now() - started
    if (now >= stopAt) {
      clearInterval(timer)
      return
    }
    for (const [i, stream] of streams.entries()) {
      while ((next[i] as number) <= now) {
        const at = next[i] as number
        const perS = rateAt(stream.spec, at)
        if (perS > 0) {
          const done = send(stream, started)
          pending.add(done)
          void done.finally(() => pending.delete(done))
        }
        next[i] = at + gap(perS > 0 ? perS : rateAt(stream.spec, at + BUCKET_MS))
      }
    }
  }, TICK_MS)
  return timer
}

function checkStreams(value: unknown): StreamSpec[] {
  if (!Array.isArray(value) || value.length === 0 || value.length > MAX_STREAMS)
    throw new Error(`streams: a list of 1 to ${MAX_STREAMS}`)
  return value.map((raw: Record<string, unknown>, i) => {
    const name = typeof raw.name === 'string' ? raw.name : `s${i}`
    if (typeof raw.target !== 'string' || !LOCAL.test(raw.target))
      throw new Error(`${name}: target must be http://127.0.0.1:<port>`)
    const rates = raw.rates as Rate[]
    if (!Array.isArray(rates) || !rates.every((r) => r.atMs >= 0 && r.perS >= 0 && r.perS <= 50_000))
      throw new Error(`${name}: rates: [{ atMs >= 0, perS from 0 to 50000 }]`)
    return {
      name,
      target: raw.target,
      path: typeof raw.path === 'string' && raw.path.startsWith('/') ? raw.path : '/',
      headers: (raw.headers ?? {}) as Record<string, string>,
      rates: [...rates].sort((a, b) => a.atMs - b.atMs),
    }
  })
}

async function stop(): Promise<unknown> {
  const state = running
  if (!state) throw new Error('not started')
  running = undefined
  clearInterval(state.timer)
  const drained = await Promise.race([
    Promise.all([...state.pending]).then(() => true),
    new Promise<boolean>((resolve) => setTimeout(() => resolve(false), STOP_WAIT_MS)),
  ])
  await Promise.all([...pools.values()].map((pool) => pool.destroy()))
  pools.clear()
  return {
    bucketMs: BUCKET_MS,
    drained,
    samplesCapped: samples >= MAX_SAMPLES,
    streams: state.streams.map((stream) => ({
      name: stream.spec.name,
      buckets: stream.buckets,
      samples: stream.samples,
    })),
  }
}

async function control(req: http.IncomingMessage): Promise<unknown> {
  let text = ''
  for await (const chunk of req as AsyncIterable<Buffer>) text += chunk.toString('utf8')
  const body = (text === '' ? {} : JSON.parse(text)) as Record<string, unknown>
  if (req.method !== 'POST') throw new Error('POST /start or /stop')
  if (req.url === '/start') {
    if (running) throw new Error('already running')
    const specs = checkStreams(body.streams)
    const durationMs = Number(body.durationMs)
    if (!(durationMs > 0 && durationMs <= 600_000)) throw new Error('durationMs: 1 to 600000')
    const started = performance.now()
    const pending = new Set<Promise<void>>()
    samples = 0
    const streams = specs.map((spec): Stream => ({ spec, buckets: [], samples: [] }))
    running = { streams, pending, timer: drive(streams, started, pending, durationMs) }
    return { started: true }
  }
  if (req.url === '/stop') return await stop()
  throw new Error('POST /start or /stop')
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
