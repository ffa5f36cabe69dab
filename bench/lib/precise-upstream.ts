// An upstream whose GET /slow?ms=N answers N ms after the request arrived, to a few tens of µs, not on
// the event loop's millisecond ticks. Node's timers (and nginx's) count in whole milliseconds of the
// loop's clock: every 1 ms timer set during one millisecond fires at the next one, so a 1 ms upstream
// answers between ~0 and 1 ms after a request and answers all the requests of one millisecond at once.
// That lines the whole benchmark up on millisecond ticks, and a proxy that adds 0.3 ms makes some
// requests miss a tick: they wait a whole extra millisecond. Real upstreams (a database, a
// computation) do not answer on a shared tick. Here one worker thread sleeps on a futex until the
// earliest deadline (Atomics.wait: a timeout in fractions of a millisecond) and wakes the server,
// which answers every request due.
//   node --import tsx bench/lib/precise-upstream.ts   -> "precise upstream on http://127.0.0.1:<port>"
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { Worker } from 'node:worker_threads'
import { delayMsOf } from '../../examples/demo-upstream.js'

/** The timer thread, plain JavaScript (a worker does not inherit tsx's loader): sleeps until the
 * earliest deadline, or until the server publishes another (shared[0] bumped), and wakes the server
 * once one is due. */
const TIMER = `
const { parentPort, workerData } = require('node:worker_threads')
const generation = new Int32Array(workerData, 0, 1)
const earliest = new Float64Array(workerData, 8, 1)
for (;;) {
  const seen = Atomics.load(generation, 0)
  const wait = earliest[0] - (performance.timeOrigin + performance.now())
  if (wait > 0 && Atomics.wait(generation, 0, seen, wait) !== 'timed-out') continue
  parentPort.postMessage(0)
  Atomics.wait(generation, 0, seen)
}
`

{
  const shared = new SharedArrayBuffer(16)
  const generation = new Int32Array(shared, 0, 1)
  /** The earliest deadline (performance.timeOrigin + performance.now() ms), Infinity if none. */
  const earliest = new Float64Array(shared, 8, 1)
  earliest[0] = Number.POSITIVE_INFINITY
  const worker = new Worker(TIMER, { eval: true, workerData: shared })
  worker.unref()
  /** Requests waiting, by deadline (a sorted array: the few hundred in flight at most). */
  const waiting: { due: number; answer: () => void }[] = []
  const now = () => performance.timeOrigin + performance.now()
  const publish = () => {
    earliest[0] = waiting.length > 0 ? waiting[0]!.due : Number.POSITIVE_INFINITY
    Atomics.add(generation, 0, 1)
    Atomics.notify(generation, 0)
  }
  worker.on('message', () => {
    const at = now()
    let due = 0
    while (due < waiting.length && waiting[due]!.due <= at) due++
    for (const entry of waiting.splice(0, due)) entry.answer()
    publish()
  })
  let inFlight = 0
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://upstream')
    const ms = delayMsOf(url) // the demo upstream's rule, only its timer differs
    inFlight++
    res.once('close', () => inFlight--)
    const answer = () => {
      if (!res.destroyed) res.end(`${req.method} ${url.pathname}: ${inFlight} in flight\n`)
    }
    if (ms === 0) return answer()
    const entry = { due: now() + ms, answer }
    let at = waiting.length
    while (at > 0 && waiting[at - 1]!.due > entry.due) at--
    waiting.splice(at, 0, entry)
    if (at === 0) publish()
  })
  server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
    const { port } = server.address() as AddressInfo
    process.stdout.write(`precise upstream on http://127.0.0.1:${port}\n`)
  })
  process.on('SIGTERM', () => process.exit(0))
}
