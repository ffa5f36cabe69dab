// Bodiless requests to an http:// upstream on keep-alive sockets of our own, parsed by Node's llhttp
// binding (the one http.ClientRequest uses): the upstream half of the lean path (front-end.ts is the
// client half). Requests with a body, upgrades and https:// upstreams stay undici's (proxy.ts).
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
import { validateHeaderName, validateHeaderValue } from 'node:http'
import net from 'node:net'
import type { Dispatcher } from 'undici'
import type { Outgoing } from '../upstream.js'
import { nodeBinding, type Parser } from './front-end.js'

type Handler = Dispatcher.DispatchHandler
type Headers = Record<string, string | string[]>

const BAD_PATH = /[^\u0021-\u00ff]/
/** undici's list (lib/dispatcher/client-h1.js): these get `content-length: 0` when sent bodiless. */
const EXPECTS_PAYLOAD = new Set(['PUT', 'POST', 'PATCH', 'QUERY', 'PROPFIND', 'PROPPATCH'])
const KEEP_ALIVE_TIMEOUT = /timeout=(\d+)/i
/** undici's keepAliveMaxTimeout. */
const MAX_IDLE_MS = 600_000

/** An error with undici's code, so classify() maps it as it maps undici's. */
class UpstreamFailure extends Error {
  constructor(
    message: string,
    readonly code: string,
  ) {
    super(message)
  }
}

export interface LeanPoolOptions {
  connections: number
  keepAliveTimeoutMs: number
  connectTimeoutMs: number
}

/** One request on its way: the controller its handler sees. */
class UpstreamRequest implements Dispatcher.DispatchController {
  aborted = false
  paused = false
  reason: Error | null = null
  socket: UpstreamSocket | undefined
  /** The final response's headers came (a timeout then is a body timeout). */
  started = false
  done = false

  constructor(
    readonly pool: LeanPool,
    readonly head: string,
    readonly method: string,
    readonly timeoutMs: number,
    readonly handler: Handler,
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

/** A keep-alive socket to the upstream and its response parser. */
class UpstreamSocket {
  readonly socket: net.Socket
  private readonly parser: Parser
  current: UpstreamRequest | undefined
  private keepAlive = false
  private status = 0
  /** The response's Content-Length (-1: none) and the body bytes that came. */
  private declared = -1
  private bytesRead = 0
  /** Header lines the parser handed over in batches (more than 32) before the head ended. */
  private batches: string[] = []
  /** Local ms by which the final response's headers must be complete (undici's headersTimeout:
   * one deadline, not reset by each byte of a dripping head). */
  private headersDeadline = 0
  private error: Error | undefined
  private idleMs: number
  connected = false

  constructor(private readonly pool: LeanPool) {
    const b = pool.binding
    this.idleMs = pool.options.keepAliveTimeoutMs
    const socket = (this.socket = net.connect({ host: pool.host, port: pool.port, noDelay: true }))
    socket.setTimeout(pool.options.connectTimeoutMs)
    const parser = (this.parser = new b.Parser())
    parser.initialize(b.Parser.RESPONSE, {}, 0, 0)
    parser[b.Parser.kOnMessageBegin] = this.onBegin
    parser[b.Parser.kOnHeaders] = this.onBatch
    parser[b.Parser.kOnHeadersComplete] = this.onHeaders
    parser[b.Parser.kOnBody] = this.onBody
    parser[b.Parser.kOnMessageComplete] = this.onComplete
    socket.on('connect', this.onConnect)
    socket.on('data', this.onData)
    socket.on('end', this.onEnd)
    socket.on('error', this.onError)
    socket.on('close', this.onClose)
    socket.on('timeout', this.onTimeout)
  }

  /** Usable for a request: not closing, and not broken. */
  get usable(): boolean {
    return !this.socket.destroyed && this.error === undefined
  }

  send(call: UpstreamRequest): void {
    this.current = call
    call.socket = this
    this.status = 0
    if (!this.connected) return // written on connect
    this.write(call)
  }

  private write(call: UpstreamRequest): void {
    this.headersDeadline = Date.now() + call.timeoutMs
    this.socket.setTimeout(call.timeoutMs)
    this.socket.write(call.head, 'latin1')
  }

  private readonly onConnect = (): void => {
    this.connected = true
    if (this.current) this.write(this.current)
  }

  /** A response begins: there must be a request waiting for it (undici destroys the socket on any
   * byte nobody asked for: a stray response would answer the next request). */
  private readonly onBegin = (): void => {
    this.batches = []
    const call = this.current
    if (!call || call.done) this.broken(new UpstreamFailure('response nobody asked for', 'UND_ERR_SOCKET'))
  }

  private readonly onBatch = (raw: string[]): void => {
    // Trailers come this way too (after the body): only lines before the head's end are kept.
    if (this.current && !this.current.started) for (const item of raw) this.batches.push(item)
  }

  private readonly onHeaders = (
    _major: number,
    _minor: number,
    given: string[] | undefined,
    _method: unknown,
    _url: unknown,
    status: number,
    _message: unknown,
    upgrade: boolean,
    keepAlive: boolean,
  ): number => {
    const call = this.current
    if (!call || call.done) {
      this.broken(new UpstreamFailure('response nobody asked for', 'UND_ERR_SOCKET'))
      return 0
    }
    // An upgrade nobody asked for, a 100 nobody asked for (no request here has Expect), or a status
    // below 100: as broken as undici takes them.
    if (upgrade || status === 100) {
      this.broken(new UpstreamFailure(`bad response from the upstream (${status})`, 'UND_ERR_SOCKET'))
      return 0
    }
    if (status < 100) {
      this.broken(new UpstreamFailure(`invalid status from the upstream (${status})`, 'HPE_INVALID_STATUS'))
      return 0
    }
    this.status = status
    if (status < 200) {
      // Other 1xx: the final response follows, within a new headers deadline (as undici re-arms).
      this.headersDeadline = Date.now() + call.timeoutMs
      return 0
    }
    const raw = this.batches.length === 0 ? (given ?? []) : given ? this.batches.concat(given) : this.batches
    this.batches = []
    // No prototype: a header named constructor or __proto__ is a header like any other.
    const headers: Headers = Object.create(null) as Headers
    for (let i = 0; i < raw.length; i += 2) {
      const name = (raw[i] as string).toLowerCase()
      const value = raw[i + 1] as string
      const known = headers[name]
      if (known === undefined) headers[name] = value
      else if (typeof known === 'string') headers[name] = [known, value]
      else known.push(value)
    }
    // Never kept after a HEAD: a server that sends a body anyway would answer the next request with
    // it (undici does not reuse that socket either).
    this.keepAlive = keepAlive && call.method !== 'HEAD'
    // The upstream's own idle timeout, less undici's 2 s margin (keepAliveTimeoutThreshold), at most
    // undici's keepAliveMaxTimeout (600 s).
    const hint = headers['keep-alive']
    const seconds = typeof hint === 'string' ? KEEP_ALIVE_TIMEOUT.exec(hint)?.[1] : undefined
    this.idleMs =
      seconds === undefined
        ? this.pool.options.keepAliveTimeoutMs
        : Math.min(Number(seconds) * 1000 - 2000, MAX_IDLE_MS)
    const length = headers['content-length']
    this.declared = typeof length === 'string' ? Number.parseInt(length, 10) : -1
    this.bytesRead = 0
    call.started = true
    call.handler.onResponseStart?.(call, status, headers, '')
    // 1: no body (llhttp's skip-body), as for every response to a HEAD.
    return call.method === 'HEAD' ? 1 : 0
  }

  private readonly onBody = (chunk: Buffer): void => {
    const call = this.current
    if (!call || call.done || !call.started) return
    this.bytesRead += chunk.length
    call.handler.onResponseData?.(call, chunk)
  }

  private readonly onComplete = (): void => {
    const call = this.current
    if (!call || call.done) return
    if (this.status < 200) return
    // As undici: a body shorter or longer than its Content-Length (a 204 with a body: llhttp reads
    // none) is a broken response, not a complete one. Not for HEAD, nor for a 304, whose length is
    // the representation's (RFC 9110 §8.6; undici takes that one as broken too).
    if (
      this.declared >= 0 &&
      this.bytesRead !== this.declared &&
      call.method !== 'HEAD' &&
      this.status !== 304
    ) {
      this.broken(new UpstreamFailure('response body length mismatch', 'UND_ERR_RES_CONTENT_LENGTH_MISMATCH'))
      return
    }
    call.done = true
    this.current = undefined
    call.socket = undefined
    if (this.keepAlive && this.idleMs > 0) this.pool.release(this)
    else this.socket.destroy()
    call.handler.onResponseEnd?.(call, {})
  }

  private readonly onData = (chunk: Buffer): void => {
    let used: number | Error
    try {
      used = this.parser.execute(chunk)
    } catch (error) {
      // A handler that threw inside a callback: this response is over, the process is not.
      return this.broken(error as Error)
    }
    // The parser's own code (HPE_...), as undici's HTTPParserError has it.
    if (typeof used !== 'number')
      return this.broken(
        new UpstreamFailure(
          `invalid response from the upstream: ${used.message}`,
          (used as NodeJS.ErrnoException).code ?? 'HPE_ERROR',
        ),
      )
    const call = this.current
    if (call && !call.started && this.connected && Date.now() > this.headersDeadline)
      this.broken(
        new UpstreamFailure('the upstream sent no complete head in time', 'UND_ERR_HEADERS_TIMEOUT'),
      )
  }

  /** The upstream closed its side: a response without a length ends here. */
  private readonly onEnd = (): void => {
    try {
      this.parser.finish()
    } catch (error) {
      this.broken(error as Error)
    }
    this.socket.destroy()
  }

  private readonly onError = (error: Error): void => {
    this.error ??= error
  }

  private readonly onClose = (): void => {
    // Free the native parser a turn later (as Node does; never from inside its callbacks).
    const parser = this.parser
    setImmediate(() => parser.close())
    this.pool.closed(this)
    const call = this.current
    this.current = undefined
    if (call && !call.done)
      call.fail(this.error ?? new UpstreamFailure('the upstream closed the connection', 'UND_ERR_SOCKET'))
  }

  private readonly onTimeout = (): void => {
    const call = this.current
    if (!call) return void this.socket.destroy() // idle for its keep-alive time
    if (call.paused) return
    const code = !this.connected
      ? 'UND_ERR_CONNECT_TIMEOUT'
      : call.started
        ? 'UND_ERR_BODY_TIMEOUT'
        : 'UND_ERR_HEADERS_TIMEOUT'
    this.broken(new UpstreamFailure(`the upstream was silent too long (${code})`, code))
  }

  /** The response is broken: its call fails now (nothing more of this socket reaches it). */
  private broken(error: Error): void {
    this.error ??= error
    this.socket.destroy()
    const call = this.current
    this.current = undefined
    if (call) call.socket = undefined
    call?.fail(error)
  }

  /** Back in the pool: idle, reading (not paused), closed after its keep-alive time. */
  idle(): void {
    this.socket.setTimeout(this.idleMs)
    if (this.socket.isPaused()) this.socket.resume()
  }
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
    readonly binding: NonNullable<ReturnType<typeof nodeBinding>>,
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
 * ServerResponse and front-end.ts apply), which are undici's rules too. */
function valid(name: string, value: string): boolean {
  try {
    validateHeaderName(name)
    validateHeaderValue(name, value)
    return true
  } catch {
    return false
  }
}

let usable: boolean | undefined

/** Node's parser in response mode, checked once on a known response (the binding is not public). */
export function responseBinding(): NonNullable<ReturnType<typeof nodeBinding>> | null {
  const b = nodeBinding()
  if (!b) return null
  if (usable === undefined) {
    usable = false
    try {
      const parser = new b.Parser()
      parser.initialize(b.Parser.RESPONSE, {}, 0, 0)
      let seen = ''
      parser[b.Parser.kOnHeadersComplete] = (
        _major: number,
        _minor: number,
        raw: string[],
        _method: unknown,
        _url: unknown,
        status: number,
        _message: unknown,
        _upgrade: boolean,
        keepAlive: boolean,
      ) => {
        seen += `${status} ${raw.join('|')} ${keepAlive} `
        return 0
      }
      parser[b.Parser.kOnBody] = (chunk: Buffer) => (seen += chunk.toString('latin1'))
      parser[b.Parser.kOnMessageComplete] = () => (seen += ' end')
      parser.execute(Buffer.from('HTTP/1.1 201 Created\r\nContent-Length: 2\r\nX-A: b\r\n\r\nok'))
      usable = seen === '201 Content-Length|2|X-A|b true ok end'
      parser.close()
    } catch {
      usable = false
    }
  }
  return usable ? b : null
}
