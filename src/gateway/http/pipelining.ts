// One request at a time per connection on http.Server, as nginx and Envoy serve HTTP/1.1: once a
// request is parsed behind one whose response is pending, a connection is not read until their
// responses are done. Node's http.Server parses every pipelined request it reads while the first is
// in flight, and keeps each one's request, response and gateway state: 8 MB of pipelined requests
// grew a gateway by 666 MB. Here, the connection is read while its oldest request's body is
// arriving, or while nothing is parsed behind it (so a client that leaves is seen at once), so at
// most one read (up to 64 KB) of the requests behind it is parsed ahead, and a connection with
// more than MAX_WAITING requests waiting for their responses is cut (a flood, not a client: no
// pipelining client waits for 256 answers at once). Once it is not read, a client's reset is seen
// within a second, its FIN not (reset-probe.ts).
// One case differs from nginx: a request whose head arrived in part behind a response still in
// flight has its head timeout (server.headersTimeout, 60 s) running while it waits, so a response
// that takes longer than that, with such a head behind it, gets that connection cut (Node's 408).
// (The lean front end keeps the same rule its own way: one request in flight, a bounded read-ahead;
// a listener fed by parse-turns.ts parses a slice ahead, not a read.)
import type http from 'node:http'
import type { Socket } from 'node:net'
import { probeWhilePaused } from './reset-probe.js'

/** Requests waiting on one connection (in flight, or parsed behind one) beyond which it is cut. */
export const MAX_WAITING = 256

interface Held {
  /** Requests started on the connection whose responses have not closed. */
  readonly waiting: Set<http.IncomingMessage>
  /** Called once if the connection closes first (a response waiting behind others never emits
   * 'close' then): one socket listener for all of them. */
  readonly onClose: Map<http.IncomingMessage, () => void>
  /** The socket's own resume(). */
  readonly resume: () => Socket
}

const held = new WeakMap<Socket, Held>()

/** Whether the connection may read: nothing waits, the oldest request (the one whose response goes
 * out first) still has body bytes to come, or nothing is parsed behind it. A request parsed behind it
 * is not read on for: its body waits in the socket until it is the oldest (one request at a time; a
 * client that ended each body in the write that began the next head kept the connection read for
 * ever, and 20 MB of one-byte chunks held 1.3 GB). */
function mayRead(h: Held): boolean {
  let behind = false
  for (const request of h.waiting) {
    if (behind) return false
    if (!request.complete) return true
    behind = true
  }
  return true
}

/** Stop reading the connection: what comes is left in the kernel until its responses are done. */
function stopReading(socket: Socket): void {
  socket.pause()
  probeWhilePaused(socket)
}

/**
 * Count a request of an http.Server connection until its response closes, and stop reading the
 * connection while nothing it started is still arriving. Returns false when the connection was cut
 * for having too many requests waiting.
 */
export function oneAtATime(
  req: http.IncomingMessage,
  res: { once(event: 'close', fn: () => void): unknown },
): boolean {
  const socket = req.socket
  let h = held.get(socket)
  if (!h) {
    const resume = socket.resume
    const state: Held = { waiting: new Set(), onClose: new Map(), resume }
    h = state
    held.set(socket, state)
    socket.once('close', () => {
      for (const ended of [...state.onClose.values()]) ended()
      state.onClose.clear()
    })
    // Node resumes the socket after each message and on each drain; while the requests it started
    // are whole and their responses pending, those resumes wait for the last response's close.
    socket.resume = function (this: Socket) {
      return mayRead(state) ? resume.call(this) : this
    }
  }
  const state = h
  state.waiting.add(req)
  if (state.waiting.size > MAX_WAITING) {
    socket.destroy()
    return false
  }
  // After the parser's current read: Node resumes the socket when a message completes.
  process.nextTick(() => {
    if (!mayRead(state) && !socket.destroyed) stopReading(socket)
  })
  // A body still arriving: once it has, nothing more is read until the responses are done.
  if (!req.complete)
    req.once('end', () => {
      if (!mayRead(state) && !socket.destroyed) stopReading(socket)
    })
  res.once('close', () => {
    state.waiting.delete(req)
    state.onClose.delete(req)
    if (mayRead(state) && !socket.destroyed) socket.resume()
  })
  return true
}

/**
 * Serve a request of an http.Server connection in turn: counted by oneAtATime(), and `serve` called
 * once its response owns the connection (at once for the first; one waiting behind others takes
 * nothing until then, and nothing at all if the connection is cut first).
 */
export function inTurn(req: http.IncomingMessage, res: http.ServerResponse, serve: () => void): void {
  if (!oneAtATime(req, res)) return
  if (res.socket) return serve()
  res.once('socket', serve)
}

/** Whether a connection counted by oneAtATime() is serving a request: its oldest request has
 * arrived whole and its response has not closed (a head or a body still arriving is not served yet). */
export function serving(socket: Socket): boolean {
  const state = held.get(socket)
  if (!state) return false
  for (const oldest of state.waiting) return oldest.complete
  return false
}

/** Run `ended` if the connection of `req` (counted by oneAtATime()) closes before its response does;
 * returns the function that forgets it. */
export function whenConnectionCloses(req: { readonly socket: Socket }, ended: () => void): () => void {
  const state = held.get(req.socket)
  if (!state) {
    req.socket.once('close', ended)
    return () => req.socket.off('close', ended)
  }
  const key = req as http.IncomingMessage
  state.onClose.set(key, ended)
  return () => state.onClose.delete(key)
}
