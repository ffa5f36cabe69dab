// The lean upstream pool: bodiless requests to an http:// upstream on keep-alive sockets of our own,
// at most `connections` of them, the rest waiting in order; the upstream half of the lean path
// (front-end.ts is the client half). Bodies, upgrades and https:// upstreams stay undici's (proxy.ts).
//
// Its parts are beside it: upstream-request.ts (the request's head and the controller its handler
// sees), upstream-socket.ts (a socket and its response reader, Node's llhttp binding in response mode).
//
// It speaks to the caller as undici's Pool.dispatch() does (the same handler, WebForward, and a
// controller with abort/pause/resume), and sends what undici sends for the same request: the request
// line, Host first, `connection: keep-alive` (`close` for a HEAD), the caller's headers in order,
// `content-length: 0` for the methods that expect a body. Where undici has a rule this keeps it:
//   - header names must be tokens, values and the path free of control characters (else the request
//     fails before a byte is sent, as undici's InvalidArgumentError: 502);
//   - the final response's headers within timeoutMs of the request (one deadline), then at most
//     timeoutMs of silence between body bytes unless the handler paused it (504, undici's codes);
//   - a socket is reused only after a complete response the upstream let us keep (keep-alive, the
//     body as long as its Content-Length, not a HEAD), one event-loop turn later; a byte nobody
//     asked for closes it (no response can answer the wrong request); an idle one is closed after
//     4 s, or 2 s before the upstream's own Keep-Alive timeout (at most 600 s);
//   - 1xx responses are skipped (a 100 or 101 nobody asked for is broken), a HEAD response has no
//     body, a response without a length ends with the connection;
//   - at most `connections` sockets per upstream; requests beyond them wait in order.
// docs/gateway/internals.md, "Lean paths", has the whole list and the one deliberate difference (a 304).
import type { Dispatcher } from 'undici'
import type { Outgoing } from '../upstream.js'
import type { Binding } from './llhttp.js'
import { requestHead, UpstreamFailure, UpstreamRequest } from './upstream-request.js'
import { UpstreamSocket } from './upstream-socket.js'

type Handler = Dispatcher.DispatchHandler

export interface LeanPoolOptions {
  connections: number
  keepAliveTimeoutMs: number
  connectTimeoutMs: number
}

/** The sockets to one http:// upstream. */
export class LeanPool {
  private readonly free: UpstreamSocket[] = []
  private resting: UpstreamSocket[] = []
  private readonly waiting: UpstreamRequest[] = []
  private open = 0
  private closing: (() => void) | undefined
  private shut = false

  constructor(
    readonly host: string,
    readonly port: number,
    readonly options: LeanPoolOptions,
    readonly binding: Binding,
  ) {}

  /** Sockets open right now (busy and idle). */
  get connected(): number {
    return this.open
  }

  dispatch(request: Outgoing, timeoutMs: number, handler: Handler): void {
    let head: string
    try {
      head = requestHead(request)
    } catch (error) {
      // Reported to the handler, as undici reports its InvalidArgumentError.
      return handler.onResponseError?.(
        new UpstreamRequest(this, '', request.method, timeoutMs, handler),
        error as Error,
      )
    }
    const call = new UpstreamRequest(this, head, request.method, timeoutMs, handler)
    handler.onRequestStart?.(call, {})
    if (call.aborted) return
    if (this.shut) return call.fail(new UpstreamFailure('the proxy is closed', 'UND_ERR_DESTROYED'))
    // The most recently used socket that is still open (one closing waits for its 'close' in the list).
    let socket = this.free.pop()
    while (socket && !socket.usable) socket = this.free.pop()
    if (socket) return socket.send(call)
    if (this.open >= this.options.connections) {
      this.waiting.push(call)
      return
    }
    this.open++
    new UpstreamSocket(this).send(call)
  }

  /** A socket whose response is complete: reused after one turn of the event loop (as undici), so
   * an upstream that closes it despite keep-alive is seen doing so before a request is sent on it. */
  release(socket: UpstreamSocket): void {
    socket.idle()
    this.resting.push(socket)
    if (this.resting.length === 1) setImmediate(this.rested)
  }

  private readonly rested = (): void => {
    const sockets = this.resting
    this.resting = []
    for (const socket of sockets) {
      if (!socket.usable) continue
      const next = this.waiting.shift()
      if (next) socket.send(next)
      else if (this.shut) socket.socket.destroy()
      else this.free.push(socket)
    }
  }

  closed(socket: UpstreamSocket): void {
    this.open--
    const at = this.free.indexOf(socket)
    if (at >= 0) this.free.splice(at, 1)
    const resting = this.resting.indexOf(socket)
    if (resting >= 0) this.resting.splice(resting, 1)
    // A request waiting for a socket gets a new one in its place (also while closing: queued
    // requests are served, as undici's close() lets them finish).
    const next = this.waiting.shift()
    if (next) {
      this.open++
      new UpstreamSocket(this).send(next)
    }
    if (this.open === 0) this.closing?.()
  }

  unqueue(call: UpstreamRequest): void {
    const at = this.waiting.indexOf(call)
    if (at >= 0) this.waiting.splice(at, 1)
  }

  /** No new request; idle sockets close now, busy ones (and the queue) when their responses are done. */
  close(): Promise<void> {
    this.shut = true
    for (const socket of this.free.splice(0)) socket.socket.destroy()
    if (this.open === 0) return Promise.resolve()
    return new Promise((resolve) => (this.closing = resolve))
  }
}
