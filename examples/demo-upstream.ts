// A tiny upstream to put the gateway in front of: GET /slow?ms=500 answers after 500 ms, and every
// response says how many requests this server had in flight, so you can watch the cap hold.
//   node --import tsx examples/demo-upstream.ts            (PORT=3000 by default)
import http from 'node:http'
import { pathToFileURL } from 'node:url'

/** How long a request waits before its answer: /slow?ms=N (500 by default, at most 60 s), else 0. */
export function delayMsOf(url: URL): number {
  return url.pathname.endsWith('/slow') ? Math.min(Number(url.searchParams.get('ms') ?? 500) || 0, 60_000) : 0
}

export function startDemoUpstream(port = 3000, host = '127.0.0.1'): Promise<http.Server> {
  let inFlight = 0
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://upstream')
    const ms = delayMsOf(url)
    inFlight++
    const timer = setTimeout(() => {
      res.end(
        `${req.method} ${url.pathname}: ${inFlight} in flight, fencing token ${req.headers['x-tollgate-fencing-token'] ?? '-'}\n`,
      )
    }, ms)
    res.once('close', () => (clearTimeout(timer), inFlight--))
  })
  return new Promise((resolve) => server.listen(port, host, () => resolve(server)))
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  await startDemoUpstream(Number(process.env.PORT ?? 3000))
  console.log(`demo upstream on http://127.0.0.1:${process.env.PORT ?? 3000} (try /slow?ms=500)`)
}
