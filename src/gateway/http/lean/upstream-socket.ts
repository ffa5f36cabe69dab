// A keep-alive socket to a lean upstream and its response reader: Node's llhttp binding in response
// mode, fed the socket's bytes, reporting one response at a time to the request sent on it with
// undici's rules (deadlines, lengths, 1xx, a byte nobody asked for) and undici's error codes.
import net from 'node:net'
import type { Binding, Parser } from './llhttp.js'
import { UpstreamFailure, type UpstreamRequest } from './upstream-request.js'

type Headers = Record<string, string | string[]>

const KEEP_ALIVE_TIMEOUT = /timeout=(\d+)/i
/** undici's keepAliveMaxTimeout. */
const MAX_IDLE_MS = 600_000

/** The pool a socket belongs to (upstream-pool.ts's LeanPool). */
export interface SocketPool {
  readonly host: string
  readonly port: number
  readonly options: { keepAliveTimeoutMs: number; connectTimeoutMs: number }
  readonly binding: Binding
  /** A socket whose response is complete, to be reused. */
  release(socket: UpstreamSocket): void
  /** A socket closed. */
  closed(socket: UpstreamSocket): void
}

/** A keep-alive socket to the upstream and its response parser. */
export class UpstreamSocket {
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

  constructor(private readonly pool: SocketPool) {
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
