// The HTTP/1.1 lean front end: Node's http.Server stays the server (it listens, and serves everything
// unusual), but its connections go first to a lean path that serves the common request on the raw
// socket (docs/gateway/internals.md, "Lean paths"). This file puts that path in front of a server.
//
// No IncomingMessage, no ServerResponse, one string per response head. Its parts are beside it:
//   - llhttp.ts: Node's own parser (the llhttp binding http.Server uses, with the same strict
//     settings), checked once at start;
//   - request.ts: which requests are lean (a whole bodiless HTTP/1.1 head with a Host, no Expect,
//     no Upgrade), and the request object the gateway sees;
//   - response.ts: the bytes ServerResponse would write (status line, Date, Connection/Keep-Alive,
//     Content-Length or chunked), and the response's 'close' (the close contract: ../close-contract.ts);
//   - connection.ts: one connection: responses in order, a bounded read-ahead (read-ahead.ts),
//     http.Server's connection timing, and the hand-over to Node's own connection listener, with
//     every byte read put back, at a message boundary, at the first request that is not lean.
// So a partial head (a slow client), a malformed one, a body, 100-continue, WebSocket upgrades and
// HTTP/1.0 all meet Node's http.Server exactly as before: its parser, its timeouts (headersTimeout,
// requestTimeout), its 400/431 answers. While something watches http.Server's requests
// (diagnostics_channel, another 'request' listener), every connection is http.Server's.
import { channel } from 'node:diagnostics_channel'
import type http from 'node:http'
import type { Socket } from 'node:net'
import type { RequestHandler } from '../client.js'
import { LeanConnection } from './connection.js'
import { type Binding, nodeBinding } from './llhttp.js'

/** Channels http.Server publishes each request on (diagnostics_channel). */
const REQUEST_START = channel('http.server.request.start')
const RESPONSE_FINISH = channel('http.server.response.finish')

/** Lean front ends alive (tests read their connections' read-ahead). */
const fronts = new Set<LeanFront>()

/** The most any lean connection holds read ahead right now, in bytes and in buffers (tests). */
export function readAheadHeld(): { bytes: number; buffers: number } {
  let bytes = 0
  let buffers = 0
  for (const front of fronts)
    for (const connection of front.connections) {
      bytes = Math.max(bytes, connection.heldBytes)
      buffers = Math.max(buffers, connection.heldBuffers)
    }
  return { bytes, buffers }
}

/** The lean path of one http.Server. */
export class LeanFront {
  readonly connections = new Set<LeanConnection>()

  constructor(
    readonly server: http.Server,
    readonly nodeListener: (this: http.Server, socket: Socket) => void,
    readonly handler: RequestHandler,
    readonly binding: Binding,
  ) {}

  accept(socket: Socket): void {
    // Someone watches requests the way http.Server reports them (APM instrumentation on its
    // diagnostics channels, or another 'request' listener): every request of the connection is then
    // http.Server's, so that none goes unseen.
    if (
      REQUEST_START.hasSubscribers ||
      RESPONSE_FINISH.hasSubscribers ||
      this.server.listenerCount('request') > 1
    )
      return this.nodeListener.call(this.server, socket)
    this.connections.add(new LeanConnection(this, socket))
  }

  closeIdle(): void {
    for (const connection of this.connections) connection.closeIfIdle()
  }

  closeAll(): void {
    for (const connection of this.connections) connection.socket.destroy()
  }
}

/**
 * Put the lean path in front of `server` (whose request listener is `handler` too). Returns undefined,
 * leaving the server as it was, when this Node's parser binding is not what the lean path expects.
 */
export function leanFrontEnd(server: http.Server, handler: RequestHandler): LeanFront | undefined {
  const b = nodeBinding()
  const listeners = server.listeners('connection')
  if (!b || listeners.length !== 1) return undefined
  const nodeListener = listeners[0] as (this: http.Server, socket: Socket) => void
  server.removeListener('connection', nodeListener)
  const front = new LeanFront(server, nodeListener, handler, b)
  fronts.add(front)
  server.once('close', () => fronts.delete(front))
  server.on('connection', (socket: Socket) => front.accept(socket))
  // server.close() and the gateway's drain call these: lean connections count too.
  const closeIdle = server.closeIdleConnections.bind(server)
  const closeAll = server.closeAllConnections.bind(server)
  server.closeIdleConnections = () => {
    front.closeIdle()
    closeIdle()
  }
  server.closeAllConnections = () => {
    front.closeAll()
    closeAll()
  }
  return front
}
