// An upstream with a true capacity, for the adaptive bench: C requests are served at once, each for
// S ms x (1 +- jitter); the rest wait in a FIFO queue inside the upstream, as a thread pool's backlog
// does. Optionally it answers 503 at once while more than Q wait (off by default).
//   node --import tsx bench/lib/upstream-sim.ts --capacity 32 --service-ms 10 [--jitter 0.1] [--queue-limit 0]
//   -> "upstream listening on http://127.0.0.1:<port>"
// Control (same port, never through the gateway):
//   POST /_control?capacity=16  changes C now (queued requests start as slots free up)
//   GET  /_stats                counters, a sample every 50 ms (in flight = serving + queued, its most
//                               in the 50 ms, C, and the ms of the 50 ms spent above 1.25 C), and per
//                               completed request its end time and latency (arrival to response)
// Times are epoch ms (performance.timeOrigin + performance.now()), so the bench can line them up with
// its own. Memory is bounded: at most MAX_COMPLETIONS requests and MAX_SAMPLES samples are kept.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { parseArgs } from 'node:util'

const SAMPLE_MS = 50
const MAX_COMPLETIONS = 4_000_000
const MAX_SAMPLES = 100_000
/** The in-flight threshold the bench judges: 1.25 C. */
const OVER_FACTOR = 1.25

const { values } = parseArgs({
  options: {
    capacity: { type: 'string', default: '32' },
    'service-ms': { type: 'string', default: '10' },
    jitter: { type: 'string', default: '0.1' },
    'queue-limit': { type: 'string', default: '0' },
  },
})
let capacity = positive(values.capacity, 'capacity')
const serviceMs = positive(values['service-ms'], 'service-ms')
const jitter = Number(values.jitter)
const queueLimit = Number(values['queue-limit'])
if (!(jitter >= 0 && jitter < 1) || !(queueLimit >= 0)) {
  process.stderr.write('upstream-sim: --jitter must be in [0, 1), --queue-limit >= 0 (0: off)\n')
  process.exit(2)
}

function positive(text: string | undefined, name: string): number {
  const n = Number(text)
  if (!Number.isInteger(n) || n < 1) {
    process.stderr.write(`upstream-sim: --${name} must be a positive integer\n`)
    process.exit(2)
  }
  return n
}

const now = () => performance.timeOrigin + performance.now()

interface Job {
  res: http.ServerResponse
  arrived: number
}

// The FIFO queue: an array with a head index (shift() is O(n)), compacted now and then.
let queue: Job[] = []
let head = 0
let serving = 0
const queued = () => queue.length - head
const inFlight = () => serving + queued()

// Time above 1.25 C, accounted exactly: before every change of the in-flight count or of C.
let lastAccount = performance.now()
let overMs = 0
let maxInFlight = 0
function account(): void {
  const at = performance.now()
  if (inFlight() > OVER_FACTOR * capacity) overMs += at - lastAccount
  lastAccount = at
}
function noteInFlight(): void {
  const n = inFlight()
  if (n > maxInFlight) maxInFlight = n
}

// Completed requests: end time (epoch ms) and latency (ms), in growable typed arrays.
let endTimes = new Float64Array(1 << 16)
let latencies = new Float32Array(1 << 16)
let completions = 0
let notKept = 0
let ok = 0
let shed = 0
let abandoned = 0

function record(end: number, latency: number): void {
  if (completions === MAX_COMPLETIONS) {
    notKept++
    return
  }
  if (completions === endTimes.length) {
    const times = new Float64Array(endTimes.length * 2)
    times.set(endTimes)
    endTimes = times
    const lat = new Float32Array(latencies.length * 2)
    lat.set(latencies)
    latencies = lat
  }
  endTimes[completions] = end
  latencies[completions] = latency
  completions++
}

const samples = { t: [] as number[], inFlight: [] as number[], max: [] as number[], capacity: [] as number[] }
const samplesOver: number[] = []
const sampler = setInterval(() => {
  account()
  if (samples.t.length < MAX_SAMPLES) {
    samples.t.push(Math.round(now()))
    samples.inFlight.push(inFlight())
    samples.max.push(maxInFlight)
    samples.capacity.push(capacity)
    samplesOver.push(Math.round(overMs * 10) / 10)
  }
  overMs = 0
  maxInFlight = inFlight()
}, SAMPLE_MS)

function serviceTime(): number {
  return serviceMs * (1 + jitter * (2 * Math.random() - 1))
}

function start(job: Job): void {
  serving++
  setTimeout(finish, serviceTime(), job)
}

function finish(job: Job): void {
  account()
  serving--
  if (job.res.destroyed) {
    abandoned++
  } else {
    job.res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '3' })
    job.res.end('ok\n')
    const end = now()
    record(end, end - job.arrived)
    ok++
  }
  pump()
}

/** Start queued requests while slots are free (a request whose client left is skipped). */
function pump(): void {
  while (serving < capacity && queued() > 0) {
    const job = queue[head] as Job
    queue[head++] = undefined as unknown as Job
    if (job.res.destroyed) {
      abandoned++
      continue
    }
    start(job)
  }
  if (head > 4096 && head * 2 > queue.length) {
    queue = queue.slice(head)
    head = 0
  }
}

function onRequest(req: http.IncomingMessage, res: http.ServerResponse): void {
  if (req.url?.startsWith('/_')) return control(req, res)
  const job: Job = { res, arrived: now() }
  req.resume()
  account()
  if (serving < capacity) {
    start(job)
  } else if (queueLimit > 0 && queued() >= queueLimit) {
    shed++
    res.writeHead(503, { 'content-type': 'text/plain', 'content-length': '9' })
    res.end('too busy\n')
    return
  } else {
    queue.push(job)
  }
  noteInFlight()
}

function control(req: http.IncomingMessage, res: http.ServerResponse): void {
  req.resume()
  const url = new URL(req.url ?? '/', 'http://upstream')
  if (url.pathname === '/_control' && req.method === 'POST') {
    const next = Number(url.searchParams.get('capacity'))
    if (!Number.isInteger(next) || next < 1) return json(res, 400, { error: 'capacity: a positive integer' })
    account()
    capacity = next
    pump()
    return json(res, 200, { capacity })
  }
  if (url.pathname === '/_stats' && req.method === 'GET') {
    account()
    return json(res, 200, {
      capacity,
      serviceMs,
      jitter,
      queueLimit,
      inFlight: inFlight(),
      ok,
      shed,
      abandoned,
      notKept,
      samples: { ...samples, overMs: samplesOver },
      completions: {
        t: Array.from(endTimes.subarray(0, completions), (t) => Math.round(t * 10) / 10),
        latency: Array.from(latencies.subarray(0, completions), (ms) => Math.round(ms * 100) / 100),
      },
    })
  }
  json(res, 404, { error: 'POST /_control?capacity=<n> or GET /_stats' })
}

function json(res: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body)
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) })
  res.end(text)
}

// Keep-alive: the gateway's pool reuses its connections; idle ones are not cut during a run.
const server = http.createServer({ keepAliveTimeout: 65_000, headersTimeout: 66_000 }, onRequest)
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`upstream listening on http://127.0.0.1:${(server.address() as AddressInfo).port}\n`)
})
process.on('SIGTERM', () => {
  clearInterval(sampler)
  process.exit(0)
})
