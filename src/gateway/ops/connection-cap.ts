// At most so many connections on a listener, and no newcomer refused while a connection serves
// nobody: past the cap, the least recently active connection that is not serving a request is
// closed to make room, as nginx closes reusable connections when it runs out
// (ngx_drain_connections). One client holding every connection it can get then holds them only
// until others come. A client can also keep every connection serving (pipelined requests whose
// answers wait on a slow store): past twice the cap, those go too, so that an answer that needs
// nothing (a probe) is never refused whatever one client does.
import type http from 'node:http'
import type { Socket } from 'node:net'
import { serving } from '../http/pipelining.js'

/** How long a newcomer whose first request has not arrived is not closed to make room. */
const NEW_MS = 250
/** How long a newcomer has to send its first bytes before it can be closed to make room past twice
 * the cap (a client on the same host sends its request within a millisecond or so of connecting). */
const FIRST_BYTES_MS = 50

/**
 * Keep `server`'s open connections to `max` (in place of `server.maxConnections`, which refuses the
 * newcomer). Its requests must go through oneAtATime() (pipelining.ts), which says which
 * connections serve one.
 *
 * A newcomer is let in, and room made, least recently active first:
 * 1. down to `max`, connections that serve no request (idle between requests, a head or a body still
 *    arriving however slowly, or an answer given in full to a client that does not read it);
 * 2. down to twice `max`, newcomers that sent nothing in the FIRST_BYTES_MS they have had;
 * 3. down to twice `max`, connections serving a request too: its answer waits on the store (a shared
 *    answer, /limits, /readyz's PING) for as long as the store takes, and one client can keep as many
 *    waiting as it has connections. Closing one costs its client that answer, and the store nothing
 *    more;
 * 4. down to twice `max`, newcomers whose first request has not arrived (whatever they sent) in the
 *    FIRST_BYTES_MS they have had: otherwise spared for NEW_MS, so that a burst of newcomers does
 *    not push out, unread, one that came just before;
 * 5. down to four times `max`, newcomers younger than that, newest first: they have not had the time
 *    to send anything, and a burst bigger than that is refused at its tail, as a full listen backlog
 *    refuses, never at its head (a probe accepted first in it, whose request is on its way).
 * A newcomer's time runs from its accept, and is judged only after the event loop has read what
 * came meanwhile (a stalled process otherwise finds every newcomer old and unread).
 * Activity is being accepted, a request arriving, or a response ending (a byte trickling in is not).
 * So a newcomer that asks at once (a probe) is answered, unless one client makes more than twice `max`
 * connections within FIRST_BYTES_MS of it; the listener holds at most twice `max` connections, and
 * for FIRST_BYTES_MS at most four times `max`.
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
    if (open.size > 2 * max) trimLater()
  })
  /** Past twice `max`, newcomers stay for FIRST_BYTES_MS: trim again once the oldest of them has had
   * that, after the poll phase (setImmediate) so that what they sent meanwhile has been read. */
  let later: NodeJS.Timeout | undefined
  function trimLater(): void {
    if (later) return
    let oldest = Number.POSITIVE_INFINITY
    for (const socket of open) if (!asked.has(socket)) oldest = Math.min(oldest, acceptedAt.get(socket) ?? 0)
    const wait = Number.isFinite(oldest) ? oldest + FIRST_BYTES_MS + 1 - performance.now() : FIRST_BYTES_MS
    later = setTimeout(
      () =>
        setImmediate(() => {
          later = undefined
          trim()
          if (open.size > 2 * max) trimLater()
        }),
      Math.max(1, wait),
    ).unref()
  }
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

  const young = (socket: Socket, now: number) =>
    !asked.has(socket) && now - (acceptedAt.get(socket) ?? 0) < FIRST_BYTES_MS
  const silent = (socket: Socket, now: number) =>
    !asked.has(socket) && socket.bytesRead === 0 && !young(socket, now)

  /** Make room, by the rules above. */
  function trim(): void {
    if (open.size <= max) return
    const now = performance.now()
    for (const [limit, closable] of [
      [max, (socket: Socket) => !busy(socket) && !spared(socket, now)],
      [2 * max, (socket: Socket) => silent(socket, now)],
      [2 * max, (socket: Socket) => !spared(socket, now)],
      [2 * max, (socket: Socket) => !young(socket, now)],
    ] as const) {
      for (const socket of open) {
        if (open.size <= limit) break
        if (closable(socket)) close(socket)
      }
    }
    if (open.size <= 4 * max) return
    for (const socket of [...open].reverse()) {
      if (open.size <= 4 * max) break
      close(socket)
    }
  }
  function close(socket: Socket): void {
    open.delete(socket)
    socket.destroy()
  }
}
