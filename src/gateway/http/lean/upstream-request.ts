// One request to a lean upstream: its head as undici writes it for a bodiless request (requestHead(),
// which refuses what undici refuses), the controller its handler sees (UpstreamRequest: abort, pause,
// resume), and the error it fails with (UpstreamFailure, with undici's codes).
import { validateHeaderName, validateHeaderValue } from 'node:http'
import type net from 'node:net'
import type { Dispatcher } from 'undici'
import type { Outgoing } from '../upstream.js'

const BAD_PATH = /[^\u0021-\u00ff]/
/** undici's list (lib/dispatcher/client-h1.js): these get `content-length: 0` when sent bodiless. */
const EXPECTS_PAYLOAD = new Set(['PUT', 'POST', 'PATCH', 'QUERY', 'PROPFIND', 'PROPPATCH'])

/** An error with undici's code, so classify() maps it as it maps undici's. */
export class UpstreamFailure extends Error {
  constructor(
    message: string,
    readonly code: string,
  ) {
    super(message)
  }
}

/** Where a request waits for a socket (upstream-pool.ts's LeanPool). */
export interface RequestQueue {
  /** The request leaves the queue (it was aborted while waiting). */
  unqueue(call: UpstreamRequest): void
}

/** One request on its way: the controller its handler sees. */
export class UpstreamRequest implements Dispatcher.DispatchController {
  aborted = false
  paused = false
  reason: Error | null = null
  /** The socket it is sent on (upstream-socket.ts's UpstreamSocket), once it has one. */
  socket: { readonly socket: net.Socket } | undefined
  /** The final response's headers came (a timeout then is a body timeout). */
  started = false
  done = false

  constructor(
    readonly pool: RequestQueue,
    readonly head: string,
    readonly method: string,
    readonly timeoutMs: number,
    readonly handler: Dispatcher.DispatchHandler,
  ) {}

  abort(reason: Error): void {
    if (this.done || this.aborted) return
    this.aborted = true
    this.reason = reason
    if (this.socket) this.socket.socket.destroy()
    else this.pool.unqueue(this)
    this.fail(reason)
  }

  /** As undici: no body timeout while the handler holds the response back (a slow client is the
   * gateway's send timeout's to bound). */
  pause(): void {
    this.paused = true
    const socket = this.socket?.socket
    if (!socket) return
    socket.pause()
    socket.setTimeout(0)
  }

  resume(): void {
    this.paused = false
    const socket = this.socket?.socket
    if (!socket) return
    socket.setTimeout(this.timeoutMs)
    socket.resume()
  }

  fail(error: Error): void {
    if (this.done) return
    this.done = true
    this.handler.onResponseError?.(this, error)
  }
}

/** The request's head as undici writes it for a bodiless request; throws for what undici refuses. */
export function requestHead(request: Outgoing): string {
  if (BAD_PATH.test(request.path) || !request.path.startsWith('/'))
    throw new UpstreamFailure('invalid request path', 'UND_ERR_INVALID_ARG')
  if (!valid(request.method, '')) throw new UpstreamFailure('invalid method', 'UND_ERR_INVALID_ARG')
  const headers = request.headers
  let host = ''
  let rest = ''
  for (let i = 0; i < headers.length; i += 2) {
    const name = headers[i] as string
    const value = headers[i + 1] as string
    if (!valid(name, value)) throw new UpstreamFailure(`invalid ${name} header`, 'UND_ERR_INVALID_ARG')
    if (name.length === 4 && name.toLowerCase() === 'host') host = `host: ${value}\r\n`
    else rest += `${name}: ${value}\r\n`
  }
  const empty = EXPECTS_PAYLOAD.has(request.method) ? 'content-length: 0\r\n' : ''
  // As undici: a HEAD closes its connection (a server that sends a body anyway would answer the next
  // request with it), and says so.
  const connection = request.method === 'HEAD' ? 'close' : 'keep-alive'
  return `${request.method} ${request.path} HTTP/1.1\r\n${host}connection: ${connection}\r\n${rest}${empty}\r\n`
}

/** A token name and a value without control characters: Node's own header checks (the ones
 * ServerResponse and response.ts apply), which are undici's rules too. */
function valid(name: string, value: string): boolean {
  try {
    validateHeaderName(name)
    validateHeaderValue(name, value)
    return true
  } catch {
    return false
  }
}
