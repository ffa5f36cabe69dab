// An upstream for gateway tests that observes the gateway from the other side: it counts its own
// requests in flight (the independent check of the cap), the fencing tokens it receives, responses the
// gateway abandoned mid-way, and the TCP connections open to it. Servers are closed after each test.
import { once } from 'node:events'
import http from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import { afterEach } from 'vitest'

export interface UpstreamProbe {
  inside: number
  max: number
  entered: number
  /** Responses whose connection closed before they were finished (the gateway let go). */
  aborted: number
  /** TCP connections open right now. */
  sockets: number
  fences: number[]
  /** Request headers of the last request. */
  lastHeaders: http.IncomingHttpHeaders
  /** Handlers of /hold waiting for the test: call one to let its response finish. */
  holders: (() => void)[]
}

export interface Upstream {
  url: string
  port: number
  probe: UpstreamProbe
  server: http.Server
  close(): Promise<void>
}

const servers = new Set<http.Server>()
const upgradedOf = new WeakMap<http.Server, Set<Socket>>()
afterEach(async () => {
  await Promise.all([...servers].map(closeServer))
})

async function closeServer(server: http.Server): Promise<void> {
  if (!servers.delete(server)) return
  server.closeAllConnections()
  // closeAllConnections() does not reach sockets handed over to an 'upgrade' listener.
  for (const socket of upgradedOf.get(server) ?? []) socket.destroy()
  server.close()
  await once(server, 'close').catch(() => {})
}

/**
 * Routed by the last path segment: /work?ms=N (default 20) answers after N ms; /stream?chunks=N&every=M streams N chunks (default:
 * forever) every M ms; /hold waits for probe.holders.shift()(); /headers answers the request headers as
 * JSON. Upgrade requests get a 101 and an echo of what they send.
 */
export async function startUpstream(): Promise<Upstream> {
  const probe: UpstreamProbe = {
    inside: 0,
    max: 0,
    entered: 0,
    aborted: 0,
    sockets: 0,
    fences: [],
    lastHeaders: {},
    holders: [],
  }
  const upgraded = new Set<Socket>()
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://upstream')
    probe.entered++
    probe.inside++
    probe.max = Math.max(probe.max, probe.inside)
    probe.lastHeaders = req.headers
    const fence = req.headers['x-tollgate-fencing-token']
    if (typeof fence === 'string') probe.fences.push(Number(fence))
    let timer: NodeJS.Timeout | undefined
    res.once('close', () => {
      clearTimeout(timer)
      clearInterval(timer)
      probe.inside--
      if (!res.writableFinished) probe.aborted++
    })
    const ms = Number(url.searchParams.get('ms') ?? 20)
    // Routed by the last path segment, so /docs/7/hold holds as /hold does.
    switch (url.pathname.slice(url.pathname.lastIndexOf('/'))) {
      case '/stream': {
        const chunks = Number(url.searchParams.get('chunks') ?? Number.POSITIVE_INFINITY)
        let sent = 0
        res.writeHead(200, { 'content-type': 'text/plain' })
        timer = setInterval(
          () => {
            res.write(`chunk ${sent}\n`)
            if (++sent >= chunks) {
              clearInterval(timer)
              res.end()
            }
          },
          Number(url.searchParams.get('every') ?? 20),
        )
        return
      }
      case '/hold':
        probe.holders.push(() => res.end('held'))
        return
      case '/limited':
        // An upstream with a limiter of its own: its RateLimit header must reach the client alone.
        res.setHeader('ratelimit', '"upstream";r=3')
        res.end('limited')
        return
      case '/headers':
        res.setHeader('content-type', 'application/json')
        res.end(JSON.stringify(req.headers))
        return
      default:
        timer = setTimeout(() => res.end(`ok ${url.pathname}`), ms)
    }
  })
  server.on('connection', (socket: Socket) => {
    probe.sockets++
    socket.once('close', () => probe.sockets--)
  })
  server.on('upgrade', (req: http.IncomingMessage, socket: Socket) => {
    upgraded.add(socket)
    socket.once('close', () => upgraded.delete(socket))
    probe.entered++
    probe.inside++
    probe.max = Math.max(probe.max, probe.inside)
    probe.lastHeaders = req.headers
    socket.once('close', () => probe.inside--)
    socket.write('HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\r\n')
    socket.on('data', (data) => socket.write(data))
    socket.on('end', () => socket.end()) // like a WebSocket server: the client's close ends the socket
    socket.on('error', () => {})
  })
  upgradedOf.set(server, upgraded)
  servers.add(server)
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as AddressInfo
  return { url: `http://127.0.0.1:${port}`, port, probe, server, close: () => closeServer(server) }
}
