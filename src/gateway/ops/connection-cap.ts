// At most so many connections on a listener, and no newcomer refused while a connection serves
// nobody: past the cap, the least recently active connection that is not serving a request is
// closed to make room, as nginx closes reusable connections when it runs out
// (ngx_drain_connections). One client holding every connection it can get then holds them only
// until others come.
import type http from 'node:http'
import type { Socket } from 'node:net'
import { serving } from '../http/pipelining.js'

/** How long a newcomer whose first request has not arrived is not closed to make room. */
const NEW_MS = 250

/**
 * Keep `server`'s open connections to `max` (in place of `server.maxConnections`, which refuses the
 * newcomer). Its requests must go through oneAtATime() (pipelining.ts), which says which
 * connections serve one.
 *
 * A newcomer is let in, and room made: the least recently active connection that serves no request
 * is closed (idle between requests, a head or a body still arriving however slowly, or an answer
 * given in full to a client that does not read it). Activity is being accepted, a request arriving,
 * or a response ending (a byte trickling in is not). A newcomer whose first request has not
 * arrived is spared for NEW_MS, so that a burst of newcomers does not push out, unread, one that
 * came just before; beyond twice `max` it is not (the oldest goes first). When every connection
 * serves a request (each answer is bounded, the costly ones shared: they end within seconds), the
 * listener stays above `max` until they end, and a newcomer beyond twice `max` is closed.
 */
export function capConnections(server: http.Server, max: number): void {
  /** Open connections, least recently active first (a Set keeps insertion order). */
  const open = new Set<Socket>()
  const acceptedAt = new WeakMap<Socket, number>()
  /** Connections a request has arrived on. */
  const asked = new WeakSet<Socket>()
  const touch = (socket: Socket) => {
    if (open.delete(socket)) open.add(socket)
  }
  server.on('connection', (socket: Socket) => {
    open.add(socket)
    acceptedAt.set(socket, performance.now())
    socket.once('close', () => open.delete(socket))
    trim()
  })
  const onRequest = (req: http.IncomingMessage, res: http.ServerResponse) => {
    asked.add(req.socket)
    touch(req.socket)
    res.once('close', () => {
      touch(req.socket)
      trim()
    })
  }
  server.on('request', onRequest)
  server.on('checkExpectation', onRequest)

  /** An answer the socket still holds waits on its client to read it: not served by us. */
  const busy = (socket: Socket) => serving(socket) && socket.writableLength === 0
  const spared = (socket: Socket, now: number) =>
    !asked.has(socket) && now - (acceptedAt.get(socket) ?? 0) < NEW_MS

  /** Close connections serving nobody, least recently active first, down to `max` (newcomers not
   * asked anything yet: down to twice `max`). */
  function trim(): void {
    if (open.size <= max) return
    const now = performance.now()
    for (const [limit, spare] of [
      [max, true],
      [2 * max, false],
    ] as const) {
      for (const socket of open) {
        if (open.size <= limit) break
        if (busy(socket) || (spare && spared(socket, now))) continue
        open.delete(socket)
        socket.destroy()
      }
    }
  }
}
