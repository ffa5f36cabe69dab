// http.Server's parser fed a slice at a time, in turns. Node parses a whole read (up to 64 KB) before
// anything can pause the connection: 64 KB of small pipelined requests is ~1,700 IncomingMessages
// and ServerResponses, and 64 such connections grew a process by 200 MB in one go, however soon each
// was cut. Fed here, a connection's parser gets SLICE_BYTES at a time, and the listener's connections
// take turns: one slice per turn of the event loop across all of them, the oldest waiting first. So
// what is parsed ahead of a request in flight is a slice, not a read (oneAtATime() in pipelining.ts
// stops reading a connection once a request is parsed behind the one in flight), and a client that pipelines as fast
// as it can gets a slice per turn, while every other connection, and the data plane's I/O, get
// theirs.
// A connection serves so many requests at most (nginx's keepalive_requests): the last one's answer
// says Connection: close and ends the connection, and nothing the client sent beyond it is parsed
// (nor kept). Node's own maxRequestsPerSocket parses on, answering each request beyond 503, and
// leaves the connection open. The answers Node gives itself without a 'request' event (417 to an
// unknown Expect) count too: the server answers 'checkExpectation' itself, and it is counted here.
// A request with Upgrade is the last as well: a server that upgrades nothing still has Node's parser
// stop at its head and drop the rest of the input it was given (here, the rest of a slice), then
// resume on the next as if a request began there. (Node closes a CONNECT itself, answering none.)
// A client that closes its side gets the answers to what it sent, then the connection ends: its
// input is read here, so its end is seen at once, and Node would otherwise end the connection then,
// before an answer made over several turns is written.
//
// Node's internals it stands on: http.Server gives each connection one 'data' listener, its parser's
// input once the parser no longer reads the socket's handle itself (Node stops that as soon as anyone
// else listens for 'data'), and sets socket._paused while that parser must not be fed; with
// server.httpAllowHalfOpen, the end of a connection's input marks its last answer instead of ending
// it. A connection without exactly one 'data' listener is left as Node made it.
import type http from 'node:http'
import type { Socket } from 'node:net'

/** Bytes of a connection's input given to its parser at once (a request head is ~100-400 bytes). */
export const SLICE_BYTES = 128

/** Feed the parser of every connection of `server` in turns (see the top of this file), for
 * `requestsPerConnection` requests of each at most. */
export function parseInTurns(server: http.Server, requestsPerConnection: number): void {
  /** Connections with input waiting for a turn, in the order they asked. */
  const queue = new Set<Socket>()
  /** Connections given a turn they have not used yet (their next input is parsed at once). */
  const granted = new WeakSet<Socket>()
  /** Requests so far per connection, and its last one once it has had them all. */
  const requests = new WeakMap<Socket, number>()
  const last = new WeakMap<Socket, http.IncomingMessage>()
  /** Whether a slice was parsed in this turn of the event loop. */
  let spent = false
  let scheduled = false

  const schedule = () => {
    if (scheduled) return
    scheduled = true
    setImmediate(turn)
  }
  function turn(): void {
    scheduled = false
    spent = false
    for (const next of queue) {
      queue.delete(next)
      if (next.destroyed) continue
      granted.add(next)
      // (oneAtATime() keeps the socket paused while a request waits behind another: the turn is used
      // then.)
      next.resume()
      break
    }
    if (queue.size > 0) schedule()
  }

  /** Connections whose input ends with a request they sent (one with Upgrade). */
  const ended = new WeakSet<Socket>()
  /** Whether nothing more of the connection's input is parsed: its last request arrived whole. */
  const spentAll = (socket: Socket) => ended.has(socket) || last.get(socket)?.complete === true
  // Before the request listener: the last answer's Connection: close is set before it is written.
  const count = (req: http.IncomingMessage, res: http.ServerResponse) => {
    const n = (requests.get(req.socket) ?? 0) + 1
    requests.set(req.socket, n)
    const upgrade = req.headers.upgrade !== undefined
    if (n !== requestsPerConnection && !upgrade) return
    if (upgrade) ended.add(req.socket)
    last.set(req.socket, req)
    res.setHeader('connection', 'close')
  }
  server.prependListener('request', count)
  server.prependListener('checkExpectation', count)
  ;(server as { httpAllowHalfOpen?: boolean }).httpAllowHalfOpen = true

  server.on('connection', (socket: Socket) => {
    const own = socket.listeners('data')
    if (socket.destroyed || own.length !== 1) return
    const parse = own[0] as (chunk: Buffer) => void
    socket.removeListener('data', parse)
    socket.once('close', () => queue.delete(socket))
    socket.on('data', (chunk: Buffer) => {
      // Nothing more of it is parsed: its input is dropped, and no more is read.
      if (spentAll(socket)) return void socket.pause()
      // Node pauses the connection (and its parser) while its responses back up; it resumes it.
      if ((socket as { _paused?: boolean })._paused === true) return hold(chunk, false)
      const mine = granted.delete(socket) || (!spent && queue.size === 0)
      if (!mine) return hold(chunk, true)
      spent = true
      schedule()
      parse(chunk.length > SLICE_BYTES ? chunk.subarray(0, SLICE_BYTES) : chunk)
      if (ended.has(socket)) return void socket.pause()
      if (chunk.length > SLICE_BYTES && !socket.destroyed) hold(chunk.subarray(SLICE_BYTES), true)
    })

    /** Put the input back and wait: for a turn, or for Node to resume the connection. */
    function hold(rest: Buffer, wait: boolean): void {
      socket.pause()
      socket.unshift(rest)
      if (!wait) return
      queue.add(socket)
      schedule()
    }
  })
}
