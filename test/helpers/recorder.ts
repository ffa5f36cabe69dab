// The judge of the gateway edge tests: an upstream that records every request it receives (method,
// target, raw headers, body) and how many it has in flight per path prefix, and misbehaves on demand.
//   /hold..., ?hold   waits until the test calls release() (or its connection closes)
//   /big?bytes=N      streams N bytes
//   /slow?ms=N        answers after N ms (any other path: after ?ms=, default 0)
//   /headers          answers with hop-by-hop headers of its own (Connection: x-up-secret, ...)
//   /switch           answers a plain request with 101 Switching Protocols
//   /bad204           answers 204 with a body (which no 204 may have)
//   /drip?chunks=N    streams N chunks, one every 200 ms
//   /never            never answers (headers never come)
// Upgrade requests: /ws/echo echoes, /ws/silent never answers the handshake, /ws/close answers 101
// and closes its side at once, /ws/refuse-big refuses with a 200 and a 64 MB body.
import { once } from 'node:events'
import http from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import { afterEach } from 'vitest'

export interface Recorded {
  method: string
  url: string
  /** Raw header pairs [name, value, ...] as received. */
  rawHeaders: string[]
  headers: http.IncomingHttpHeaders
  body: string
}

export interface Recorder {
  url: string
  port: number
  requests: Recorded[]
  /** Highest number in flight at once, per first path segment ('/export/a' -> '/export'). */
  max: Map<string, number>
  inFlight: Map<string, number>
  /** Open upgraded sockets on the upstream side. */
  tunnels: Set<Socket>
  /** Let every held request answer. */
  release(): void
  close(): Promise<void>
}

const open = new Set<Recorder>()
afterEach(async () => {
  await Promise.all([...open].map((r) => r.close()))
})

const segmentOf = (url: string) => `/${(url.split('?')[0] ?? '').split('/')[1] ?? ''}`

export async function startRecorder(): Promise<Recorder> {
  const requests: Recorded[] = []
  const max = new Map<string, number>()
  const inFlight = new Map<string, number>()
  const held: (() => void)[] = []
  const tunnels = new Set<Socket>()
  const sockets = new Set<Socket>()
  const enter = (key: string) => {
    const n = (inFlight.get(key) ?? 0) + 1
    inFlight.set(key, n)
    max.set(key, Math.max(max.get(key) ?? 0, n))
  }
  const leave = (key: string) => inFlight.set(key, (inFlight.get(key) ?? 1) - 1)

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    const key = segmentOf(req.url ?? '/')
    enter(key)
    let left = false
    const done = () => {
      if (!left) leave(key)
      left = true
    }
    res.once('close', done)
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      requests.push({
        method: req.method ?? '',
        url: req.url ?? '',
        rawHeaders: req.rawHeaders,
        headers: req.headers,
        body: Buffer.concat(chunks).toString('latin1'),
      })
      const url = new URL(req.url ?? '/', 'http://upstream')
      const path = url.pathname
      if (path.includes('/hold') || url.searchParams.has('hold')) {
        held.push(() => {
          if (!res.destroyed) res.end(`held ${req.method} ${req.url}`)
        })
        return
      }
      if (path.endsWith('/never')) return
      if (path.endsWith('/big')) {
        const bytes = Number(url.searchParams.get('bytes') ?? 4_000_000)
        res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': bytes })
        res.end(Buffer.alloc(bytes, 97))
        return
      }
      if (path.endsWith('/headers')) {
        res.writeHead(200, {
          connection: 'x-up-secret',
          'x-up-secret': 'leak',
          'keep-alive': 'timeout=77',
          'proxy-authenticate': 'Basic',
          'x-up-public': 'ok',
        })
        res.end('headers')
        return
      }
      if (path.endsWith('/bad204')) {
        res.socket?.write('HTTP/1.1 204 No Content\r\ncontent-length: 5\r\n\r\nhello')
        res.socket?.end()
        return
      }
      if (path.endsWith('/drip')) {
        let left = Number(url.searchParams.get('chunks') ?? 10)
        res.writeHead(200, { 'content-type': 'text/plain' })
        const timer = setInterval(() => {
          if (res.destroyed) return clearInterval(timer)
          res.write('drip\n')
          if (--left <= 0) {
            clearInterval(timer)
            res.end()
          }
        }, 200)
        return
      }
      if (path.endsWith('/switch')) {
        res.socket?.write(
          'HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\nconnection: upgrade\r\n\r\nsurprise',
        )
        return
      }
      const ms = Number(url.searchParams.get('ms') ?? 0)
      const answer = () => {
        if (!res.destroyed)
          res.end(`ok ${req.method} ${req.url} ${chunks.length > 0 ? Buffer.concat(chunks).length : 0}`)
      }
      if (ms > 0) setTimeout(answer, ms)
      else answer()
    })
  })
  server.on('connection', (socket: Socket) => {
    sockets.add(socket)
    socket.once('close', () => sockets.delete(socket))
  })
  server.on('upgrade', (req: http.IncomingMessage, socket: Socket) => {
    requests.push({
      method: req.method ?? '',
      url: req.url ?? '',
      rawHeaders: req.rawHeaders,
      headers: req.headers,
      body: '',
    })
    socket.on('error', () => {})
    tunnels.add(socket)
    socket.once('close', () => tunnels.delete(socket))
    const path = req.url ?? ''
    if (path.endsWith('/silent')) return
    if (path.endsWith('/refuse-big')) {
      socket.write('HTTP/1.1 200 OK\r\ncontent-length: 64000000\r\n\r\n')
      socket.end(Buffer.alloc(64_000_000, 98))
      return
    }
    socket.write('HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\r\n')
    if (path.endsWith('/close')) {
      socket.end()
      return
    }
    socket.on('data', (data) => socket.write(data))
    socket.on('end', () => socket.end())
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as AddressInfo
  const recorder: Recorder = {
    url: `http://127.0.0.1:${port}`,
    port,
    requests,
    max,
    inFlight,
    tunnels,
    release: () => {
      for (const fn of held.splice(0)) fn()
    },
    async close() {
      if (!open.delete(recorder)) return
      for (const socket of [...sockets, ...tunnels]) socket.destroy()
      server.close()
      await once(server, 'close').catch(() => {})
    },
  }
  open.add(recorder)
  return recorder
}
