// The HTTP/1.1 front end. Node's http.Server stays the server (it listens, and it serves everything
// unusual), but its connections go first to a lean path that serves the common request on the raw
// socket: no IncomingMessage, no ServerResponse, one string per response head (docs/gateway/internals.md,
// "Lean paths").
//
// The lean path takes a request only when all of this holds, and hands the connection to Node's own
// connection listener otherwise, with every byte it has read put back, at a message boundary (no
// response of ours outstanding), for the rest of the connection:
//   - the whole head is in what has arrived, within http.maxHeaderSize, and Node's own parser (the
//     llhttp binding http.Server uses, with the same strict settings) accepts it, with at most 32
//     header lines (one batch from the parser);
//   - HTTP/1.1, a Host header, no body (no Transfer-Encoding, Content-Length absent or 0), no
//     Expect, no Upgrade, not CONNECT.
// So a partial head (a slow client), a malformed one, a body, 100-continue, WebSocket upgrades and
// HTTP/1.0 all meet Node's http.Server exactly as before: its parser, its timeouts (headersTimeout,
// requestTimeout), its 400/431 answers. What the lean path owes is only this: parse what Node would
// parse the same way, answer with the bytes ServerResponse would write (status line, Date,
// Connection/Keep-Alive, Content-Length or chunked), keep responses in order, keep http.Server's
// connection timing (busy until the first response; 408 at headersTimeout for a silent connection;
// idle ones closed at keepAliveTimeout + 1 s), and tell the gateway a response closed exactly once.
// While something watches http.Server's requests (diagnostics_channel, another 'request' listener),
// every connection is http.Server's.
import { channel } from 'node:diagnostics_channel'
import { EventEmitter } from 'node:events'
import http, { STATUS_CODES, validateHeaderName, validateHeaderValue } from 'node:http'
import type { Socket } from 'node:net'
import type { ClientRequest, ClientResponse, HeaderList, HeaderObject, RequestHandler } from '../client.js'
import { probeWhilePaused } from '../reset-probe.js'

/** Node's llhttp binding as http.Server and http.ClientRequest drive it (lib/_http_common.js,
 * lib/_http_server.js, lib/_http_client.js); upstream-pool.ts uses it in response mode. */
export interface Parser {
  initialize(type: number, resource: object, maxHeaderSize: number, lenient: number): void
  execute(data: Buffer): number | Error
  /** The end of the input: a response without a length ends here. */
  finish(): number | Error | undefined
  close(): void
  [callback: number]: unknown
}
interface ParserClass {
  new (): Parser
  REQUEST: number
  RESPONSE: number
  kOnMessageBegin: number
  kOnHeaders: number
  kOnHeadersComplete: number
  kOnBody: number
  kOnMessageComplete: number
}
interface HttpCommon {
  HTTPParser: ParserClass
}

/** Node's header rules (duplicates joined, dropped or listed as IncomingMessage does). */
type AddHeaderLine = (this: object, field: string, value: string, dest: Record<string, unknown>) => void

const CRLFCRLF = Buffer.from('\r\n\r\n')
/** Channels http.Server publishes each request on (diagnostics_channel). */
const REQUEST_START = channel('http.server.request.start')
const RESPONSE_FINISH = channel('http.server.response.finish')
/** Bytes of later (pipelined) requests read ahead while a response is in flight (or the socket's
 * highWaterMark, if larger): beyond this the socket is given them back and paused, and reads nothing
 * more until the response is done (the kernel keeps what comes), as http.Server stops reading. */
const MAX_READ_AHEAD = 64 * 1024
/** Reads behind the first one in flight are copied into blocks, each as large as what is held (so
 * at most twice that), from 256 bytes up to 4 KB: a Buffer costs ~350 bytes besides its own (V8 heap
 * and backing store), so a read-ahead trickled in a byte per packet and kept as read cost ~350 bytes
 * per byte. */
const MIN_BLOCK = 256
const BLOCK = 4096

/** A first body chunk up to this size leaves in one write with the head (latin1 keeps every byte). */
const SMALL_BODY = 2048

/** One parsed head, as the parser's callbacks gave it. */
interface Head {
  major: number
  minor: number
  headers: string[] | undefined
  method: string
  url: string
  upgrade: boolean
  keepAlive: boolean
  complete: boolean
  /** The parser sent headers in batches (more than 32 lines): left to Node. */
  batched: boolean
}

interface Binding {
  Parser: ParserClass
  /** Method names by llhttp's method number (Node's allMethods, which _http_common does not export:
   * its `methods` is another list, not indexed by that number). Unknown numbers: not lean. */
  methods: string[]
  addHeaderLine: AddHeaderLine
}

let binding: Binding | null | undefined

/** Node's parser and header rules, or null when this Node does not have them as expected (then every
 * connection goes to http.Server, as before the lean path existed). */
export function nodeBinding(): Binding | null {
  if (binding !== undefined) return binding
  binding = null
  try {
    const common = process.getBuiltinModule('_http_common') as HttpCommon | undefined
    const addHeaderLine = (http.IncomingMessage.prototype as unknown as { _addHeaderLine?: AddHeaderLine })
      ._addHeaderLine
    if (!common?.HTTPParser || typeof addHeaderLine !== 'function') return null
    const candidate = { Parser: common.HTTPParser, methods: methodNumbers(common.HTTPParser), addHeaderLine }
    // The binding's callback arguments are not a public API: check them on a known head.
    const probe = new LeanParser(candidate)
    const head = probe.parse(Buffer.from('GET /a?b HTTP/1.1\r\nHost: x\r\nX-Y: 1\r\n\r\n'))
    probe.close()
    const ok =
      head !== undefined &&
      head.complete &&
      head.method === 'GET' &&
      head.url === '/a?b' &&
      head.major === 1 &&
      head.minor === 1 &&
      head.keepAlive &&
      !head.upgrade &&
      head.headers?.join('|') === 'Host|x|X-Y|1'
    if (ok) binding = candidate
  } catch {
    binding = null
  }
  return binding
}

/** llhttp's number of every method http.Server accepts (http.METHODS), read off the parser itself. */
function methodNumbers(Parser: ParserClass): string[] {
  const names: string[] = []
  const parser = new Parser()
  let number = -1
  parser.initialize(Parser.REQUEST, {}, 0, 0)
  parser[Parser.kOnHeadersComplete] = (_major: number, _minor: number, _headers: unknown, method: number) => {
    number = method
    return 0
  }
  try {
    for (const name of http.METHODS) {
      if (name === 'CONNECT') continue // an authority target, and never lean
      number = -1
      parser.initialize(Parser.REQUEST, {}, 0, 0)
      const used = parser.execute(Buffer.from(`${name} / HTTP/1.1\r\nHost: x\r\n\r\n`))
      if (typeof used === 'number' && number >= 0) names[number] = name
    }
  } finally {
    parser.close()
  }
  return names
}

let live = 0

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

/** Request parsers not closed yet (tests: none is left behind by a closed connection). */
export function liveParsers(): number {
  return live
}

/** A request parser of one connection: the exact bytes of one head in, what it says out. */
class LeanParser {
  private readonly parser: Parser
  private head: Head | undefined
  private batched = false

  constructor(private readonly b: Binding) {
    const parser = (this.parser = new b.Parser())
    live++
    // As http.Server: a request parser, its default header size limit (0), no leniency flags.
    parser.initialize(b.Parser.REQUEST, {}, 0, 0)
    parser[b.Parser.kOnHeaders] = () => {
      if (this.head) this.head.batched = true
      else this.batched = true
    }
    parser[b.Parser.kOnHeadersComplete] = (
      major: number,
      minor: number,
      headers: string[] | undefined,
      method: number,
      url: string,
      _status: unknown,
      _message: unknown,
      upgrade: boolean,
      keepAlive: boolean,
    ) => {
      this.head = {
        major,
        minor,
        headers,
        method: b.methods[method] ?? '',
        url,
        upgrade,
        keepAlive,
        complete: false,
        batched: this.batched || headers === undefined,
      }
      return 0
    }
    parser[b.Parser.kOnBody] = () => {
      if (this.head) this.head.complete = false
    }
    parser[b.Parser.kOnMessageComplete] = () => {
      if (this.head) this.head.complete = true
    }
  }

  /** Free the binding's parser (as http.Server does, a turn later: never from inside its own
   * callbacks). Without this every connection would keep its native parser alive. */
  close(): void {
    const parser = this.parser
    setImmediate(() => {
      parser.close()
      live--
    })
  }

  /** The head in `bytes` (exactly one head), or undefined when the parser refused it or wants more. */
  parse(bytes: Buffer): Head | undefined {
    this.head = undefined
    this.batched = false
    const used = this.parser.execute(bytes)
    const head = this.head
    this.head = undefined
    if (typeof used !== 'number' || used !== bytes.length) return undefined
    return head
  }
}

/** A request the lean path serves: its head only (it has no body by construction). */
export class LeanRequest implements ClientRequest {
  readonly httpVersion = '1.1'
  readonly httpVersionMajor = 1
  readonly httpVersionMinor = 1
  readonly headers: http.IncomingHttpHeaders = {}

  constructor(
    readonly method: string,
    readonly url: string,
    readonly rawHeaders: string[],
    readonly socket: Socket,
    addHeaderLine: AddHeaderLine,
  ) {
    const headers = this.headers as Record<string, unknown>
    for (let i = 0; i < rawHeaders.length; i += 2)
      addHeaderLine.call(NODE_DEFAULTS, rawHeaders[i] as string, rawHeaders[i + 1] as string, headers)
  }

  get destroyed(): boolean {
    return this.socket.destroyed
  }
}

/** `this` for IncomingMessage's _addHeaderLine: http.Server's default (joinDuplicateHeaders off). */
const NODE_DEFAULTS = Object.freeze({ joinDuplicateHeaders: false })

let dateSecond = 0
let dateLine = ''

/** The Date line, built once a second (ServerResponse caches it too). */
function date(): string {
  const now = Date.now()
  const second = now - (now % 1000)
  if (second !== dateSecond) {
    dateSecond = second
    dateLine = `Date: ${new Date(now).toUTCString()}\r\n`
  }
  return dateLine
}

/**
 * A response the lean path writes: what ServerResponse writes for the same calls (its head rules
 * are in lib/_http_outgoing.js, _storeHeader). The head is sent with the first body bytes or the end.
 */
export class LeanResponse extends EventEmitter implements ClientResponse {
  statusCode = 200
  headersSent = false
  writableEnded = false
  writableFinished = false
  private closed = false
  private destroyedByUs = false
  private pendingHead: string | undefined
  private chunked = false
  private hasBody: boolean
  /** Close the connection after this response. */
  last: boolean
  private connectionHeader: string | undefined

  constructor(
    private readonly connection: LeanConnection,
    keepAlive: boolean,
    head: boolean,
  ) {
    super()
    this.last = !keepAlive
    this.hasBody = !head
  }

  get socket(): Socket | null {
    return this.closed ? null : this.connection.socket
  }

  get destroyed(): boolean {
    return this.destroyedByUs || (!this.writableFinished && this.connection.socket.destroyed)
  }

  get writableLength(): number {
    return this.closed ? 0 : this.connection.socket.writableLength
  }

  get writableNeedDrain(): boolean {
    return !this.closed && this.connection.socket.writableNeedDrain
  }

  setHeader(name: string, value: string): this {
    if (this.headersSent) throw new Error('Cannot set headers after they are sent to the client')
    // The gateway sets only Connection before writeHead (to close while draining).
    if (name.toLowerCase() !== 'connection') throw new Error(`LeanResponse.setHeader: ${name} not supported`)
    validateHeaderValue(name, value)
    this.connectionHeader = value
    return this
  }

  writeHead(statusCode: number, headers?: HeaderObject | HeaderList): this {
    return this.head(statusCode, headers, undefined)
  }

  /** writeHead(), and for end(data) before it the length ServerResponse then sends. */
  private head(
    statusCode: number,
    headers: HeaderObject | HeaderList | undefined,
    implicitLength: number | undefined,
  ): this {
    if (this.headersSent) throw new Error('Cannot write headers after they are sent to the client')
    if (!Number.isInteger(statusCode) || statusCode < 100 || statusCode > 999)
      throw new RangeError(`Invalid status code: ${statusCode}`)
    const state = { connection: false, contentLength: false, te: false, date: false, keepAlive: false }
    let out = `HTTP/1.1 ${statusCode} ${STATUS_CODES[statusCode] ?? 'unknown'}\r\n`
    // A header set with setHeader() comes first, and writeHead()'s own of that name takes its place
    // (ServerResponse merges them into one map in that order).
    let set = this.connectionHeader
    if (Array.isArray(headers)) {
      if (set !== undefined)
        for (let i = 0; i < headers.length; i += 2)
          if ((headers[i] as string).toLowerCase() === 'connection') set = undefined
      if (set !== undefined) out += this.line('connection', set, state)
      for (let i = 0; i < headers.length; i += 2)
        out += this.line(headers[i] as string, headers[i + 1], state)
    } else {
      if (set !== undefined && headers)
        for (const name in headers) if (name.toLowerCase() === 'connection') set = undefined
      if (set !== undefined) out += this.line('connection', set, state)
      if (headers) for (const name in headers) out += this.line(name, headers[name], state)
    }
    if (statusCode === 204 || statusCode === 304 || statusCode < 200) this.hasBody = false
    if (!state.date) out += date()
    if (!state.connection) {
      if (this.last) out += 'Connection: close\r\n'
      else {
        out += 'Connection: keep-alive\r\n'
        const timeout = this.connection.front.keepAliveSeconds()
        if (timeout > 0 && !state.keepAlive) out += `Keep-Alive: timeout=${timeout}\r\n`
      }
    }
    if (!state.contentLength && !state.te && this.hasBody) {
      if (implicitLength !== undefined) out += `Content-Length: ${implicitLength}\r\n`
      else {
        out += 'Transfer-Encoding: chunked\r\n'
        this.chunked = true
      }
    }
    this.statusCode = statusCode
    this.pendingHead = `${out}\r\n`
    this.headersSent = true
    return this
  }

  /** One header line, validated as ServerResponse validates it; notes the names that change framing. */
  private line(
    name: string,
    value: string | number | string[] | undefined,
    state: { connection: boolean; contentLength: boolean; te: boolean; date: boolean; keepAlive: boolean },
  ): string {
    validateHeaderName(name)
    let lines = ''
    if (Array.isArray(value)) {
      for (const item of value) {
        validateHeaderValue(name, item)
        lines += `${name}: ${item}\r\n`
      }
    } else {
      validateHeaderValue(name, value as string) // throws for undefined, as ServerResponse does
      lines = `${name}: ${value}\r\n`
    }
    switch (name.length) {
      case 4:
        if (name.toLowerCase() === 'date') state.date = true
        break
      case 10: {
        const lower = name.toLowerCase()
        if (lower === 'connection') {
          state.connection = true
          if (/(?:^|\W)close(?:$|\W)/i.test(String(value))) this.last = true
        } else if (lower === 'keep-alive') state.keepAlive = true
        break
      }
      case 14:
        if (name.toLowerCase() === 'content-length') state.contentLength = true
        break
      case 17:
        if (name.toLowerCase() === 'transfer-encoding') {
          state.te = true
          if (/(?:^|\W)chunked(?:$|\W)/i.test(String(value))) this.chunked = true
        }
        break
    }
    return lines
  }

  write(chunk: Buffer | string): boolean {
    if (this.writableEnded || this.closed) return false
    if (!this.headersSent) this.writeHead(this.statusCode)
    const socket = this.connection.socket
    if (!this.hasBody) return true // as ServerResponse: a HEAD, 204 or 304 response has no body
    const length = typeof chunk === 'string' ? Buffer.byteLength(chunk) : chunk.length
    const head = this.pendingHead
    if (length === 0) return head === undefined ? true : this.flushHead(socket)
    this.pendingHead = undefined
    if (head !== undefined && !this.chunked && length <= SMALL_BODY && typeof chunk !== 'string') {
      // The head and a small first chunk as one string: one write, no writev of two.
      socket.write(head + chunk.toString('latin1'), 'latin1')
      return !socket.writableNeedDrain
    }
    socket.cork()
    if (this.chunked) {
      socket.write(`${head ?? ''}${length.toString(16)}\r\n`, 'latin1')
      socket.write(chunk)
      socket.write('\r\n', 'latin1')
    } else {
      if (head !== undefined) socket.write(head, 'latin1')
      socket.write(chunk)
    }
    socket.uncork()
    return !socket.writableNeedDrain
  }

  private flushHead(socket: Socket): boolean {
    const head = this.pendingHead as string
    this.pendingHead = undefined
    return socket.write(head, 'latin1')
  }

  end(chunk?: Buffer | string): this {
    if (this.writableEnded || this.closed) return this
    if (!this.headersSent) {
      // As ServerResponse.end(data) before writeHead: the length is known.
      const length =
        chunk === undefined ? 0 : typeof chunk === 'string' ? Buffer.byteLength(chunk) : chunk.length
      this.head(this.statusCode, undefined, length)
    }
    if (chunk !== undefined) this.write(chunk)
    this.writableEnded = true
    const tail = (this.pendingHead ?? '') + (this.chunked && this.hasBody ? '0\r\n\r\n' : '')
    this.pendingHead = undefined
    const socket = this.connection.socket
    // Nothing left to write and nothing waiting in the socket: handed to the OS already (an empty
    // write would still cost a syscall).
    if (tail.length === 0 && socket.writableLength === 0) process.nextTick(this.onFlushed)
    else socket.write(tail, 'latin1', this.onFlushed)
    return this
  }

  private readonly onFlushed = (error?: Error | null): void => {
    if (error || this.closed) return
    this.writableFinished = true
    this.emit('finish')
    this.close()
  }

  writeContinue(): void {
    // Lean requests have no Expect (they are Node's); written as ServerResponse would all the same.
    if (!this.headersSent && !this.closed)
      this.connection.socket.write('HTTP/1.1 100 Continue\r\n\r\n', 'latin1')
  }

  destroy(): this {
    if (this.closed) return this
    this.destroyedByUs = true
    this.connection.socket.destroy()
    return this
  }

  /** The response is over (written, or its connection closed): 'close', once. */
  close(): void {
    if (this.closed) return
    this.closed = true
    const mine = this.connection.detach(this)
    this.emit('close')
    if (mine) this.connection.responseClosed(this)
  }
}

/** As http.Server's request timeout answer (lib/_http_server.js). */
const REQUEST_TIMEOUT = 'HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n'
/** http.Server closes an idle keep-alive connection this long after the Keep-Alive timeout it
 * advertises (HTTP_SERVER_KEEP_ALIVE_TIMEOUT_BUFFER), so a client reusing it just in time is not cut. */
const KEEP_ALIVE_BUFFER_MS = 1000

/** One client connection on the lean path, until it closes or is handed to http.Server. */
/** Whether http.Server's closeIdleConnections() (a drain) counts a connection that has not sent its
 * first request as idle and closes it: Node 26 does, Node 20 to 25 do not (found by
 * scripts/test-node-majors.mjs). The lean path does what http.Server does on the Node it runs on. */
const FRESH_IS_IDLE = Number(process.versions.node.split('.')[0]) >= 26

class LeanConnection {
  /** Bytes read and not parsed yet: joined only when a head is looked for (not per packet). */
  private chunks: Buffer[] = []
  /** Those bytes, with the block's. */
  private bufferedBytes = 0
  /** The block being filled with reads behind a request in flight, after `chunks`. */
  private block: Buffer | undefined
  private blockUsed = 0
  private current: LeanResponse | undefined
  private readonly parser: LeanParser
  private looping = false
  private handedOver = false
  /** A response was written on it: from then on, nothing in flight means idle (before that, a new
   * connection counts as busy, as in http.Server before Node 26 (FRESH_IS_IDLE), and its first head is
   * bounded by headersTimeout). */
  private served = false

  constructor(
    readonly front: LeanFront,
    readonly socket: Socket,
  ) {
    this.parser = new LeanParser(front.binding)
    this.listen('on')
    const headersMs = front.server.headersTimeout
    if (headersMs > 0) socket.setTimeout(headersMs)
  }

  /** The socket events of the lean path: attached on accept, all taken off at the hand-over. */
  private listen(method: 'on' | 'off'): void {
    const socket = this.socket
    socket[method]('data', this.onData)
    socket[method]('end', this.onEnd)
    socket[method]('error', this.onError)
    socket[method]('close', this.onClose)
    socket[method]('drain', this.onDrain)
    socket[method]('timeout', this.onTimeout)
  }

  /** The bytes read and not parsed yet, as one buffer (copied only when they came in pieces). */
  private joined(): Buffer {
    this.seal()
    return this.chunks.length === 1 ? (this.chunks[0] as Buffer) : Buffer.concat(this.chunks)
  }

  /** The block's bytes join `chunks`. */
  private seal(): void {
    const block = this.block
    if (block === undefined) return
    this.chunks.push(this.blockUsed === block.length ? block : block.subarray(0, this.blockUsed))
    this.block = undefined
    this.blockUsed = 0
  }

  /** Nothing in flight and nothing to serve: neither read ahead nor handed back to the socket. */
  get idle(): boolean {
    return (
      (this.served || FRESH_IS_IDLE) &&
      this.current === undefined &&
      this.bufferedBytes === 0 &&
      this.socket.readableLength === 0
    )
  }

  /** What it holds read ahead (readAheadHeld()). */
  get heldBytes(): number {
    return this.bufferedBytes
  }

  get heldBuffers(): number {
    return this.chunks.length + (this.block === undefined ? 0 : 1)
  }

  private readonly onData = (chunk: Buffer): void => {
    if (this.current === undefined) {
      this.chunks.push(chunk)
      this.bufferedBytes += chunk.length
      return this.next()
    }
    this.keep(chunk)
    // A paused socket reads on, a Buffer per read, until it holds its highWaterMark (16 KB on Node 20,
    // 64 KB from 22): given the read-ahead back, at least that much, it stops reading.
    if (this.bufferedBytes > MAX_READ_AHEAD && this.bufferedBytes >= this.socket.readableHighWaterMark) {
      const bytes = this.joined()
      this.drop()
      this.socket.pause()
      this.socket.unshift(bytes)
      probeWhilePaused(this.socket)
    }
  }

  /** Keep a read behind the request in flight: the first as it came (a pipelining client's requests
   * mostly come in one read), later ones copied into blocks, so what is held costs its bytes. */
  private keep(chunk: Buffer): void {
    const wasEmpty = this.bufferedBytes === 0
    this.bufferedBytes += chunk.length
    if (wasEmpty) {
      this.chunks.push(chunk)
      return
    }
    for (let at = 0; at < chunk.length;) {
      let block = this.block
      if (block === undefined || this.blockUsed === block.length) {
        this.seal()
        const size = Math.min(BLOCK, Math.max(MIN_BLOCK, this.bufferedBytes))
        block = this.block = Buffer.allocUnsafeSlow(Math.max(size, chunk.length - at))
      }
      const copied = chunk.copy(block, this.blockUsed, at)
      this.blockUsed += copied
      at += copied
    }
  }

  /** The client closed its side: as http.Server (no half-open HTTP), what is in flight is aborted;
   * a response already written whole is still flushed. */
  private readonly onEnd = (): void => {
    this.drop()
    if (this.current && !this.current.writableEnded) this.socket.destroy()
    else this.socket.end()
  }

  private readonly onError = (): void => {
    this.socket.destroy()
  }

  private readonly onClose = (): void => {
    this.front.connections.delete(this)
    this.drop()
    this.parser.close()
    this.current?.close()
  }

  private readonly onDrain = (): void => {
    this.current?.emit('drain')
  }

  /** No byte moved for the socket's timeout: an idle connection goes (after the Keep-Alive time),
   * one that never sent a head gets http.Server's 408 (after headersTimeout); a busy one is the
   * gateway's to bound (its upstream and send timeouts). */
  private readonly onTimeout = (): void => {
    if (this.current !== undefined) return
    if (this.served) {
      if (this.idle) this.socket.destroy()
    } else if (this.bufferedBytes === 0) {
      this.socket.end(REQUEST_TIMEOUT, 'latin1')
      this.socket.destroySoon()
    }
  }

  private drop(): void {
    this.chunks = []
    this.bufferedBytes = 0
    this.block = undefined
    this.blockUsed = 0
  }

  /** The response being written is over: later ones may go (called before its 'close' is emitted,
   * so that the gateway sees the connection idle in that event, while draining). */
  detach(res: LeanResponse): boolean {
    if (this.current !== res) return false
    this.current = undefined
    this.served = true
    return true
  }

  /** After a response's 'close': the next request, or the end of the connection. */
  responseClosed(res: LeanResponse): void {
    if (this.socket.destroyed) return
    if (res.last) {
      this.drop()
      this.socket.destroySoon()
      return
    }
    if (this.bufferedBytes === 0 && this.socket.readableLength === 0) {
      const idleMs = this.front.server.keepAliveTimeout
      if (idleMs > 0 && this.socket.timeout !== idleMs + KEEP_ALIVE_BUFFER_MS)
        this.socket.setTimeout(idleMs + KEEP_ALIVE_BUFFER_MS)
    }
    if (this.socket.isPaused()) this.socket.resume()
    this.next()
  }

  /** Serve the buffered requests one at a time while each is a lean one; hand over at the first that
   * is not. */
  private next(): void {
    if (this.looping || this.handedOver) return
    this.looping = true
    try {
      while (this.current === undefined && this.bufferedBytes > 0 && !this.socket.destroyed) {
        const bytes = this.joined()
        const end = bytes.indexOf(CRLFCRLF)
        if (end < 0 || end + 4 > http.maxHeaderSize) {
          this.chunks = [bytes]
          return this.handOver()
        }
        const head = this.parser.parse(bytes.subarray(0, end + 4))
        if (!head || !lean(head)) {
          this.chunks = [bytes]
          return this.handOver()
        }
        if (end + 4 === bytes.length) this.drop()
        else {
          this.chunks = [bytes.subarray(end + 4)]
          this.bufferedBytes = bytes.length - end - 4
        }
        this.serve(head)
      }
    } finally {
      this.looping = false
    }
  }

  private serve(head: Head): void {
    const front = this.front
    const req = new LeanRequest(
      head.method,
      head.url,
      head.headers as string[],
      this.socket,
      front.binding.addHeaderLine,
    )
    const res = new LeanResponse(this, head.keepAlive, head.method === 'HEAD')
    this.current = res
    front.handler(req, res)
  }

  /** From here on the connection is http.Server's, with the bytes read so far put back in front. */
  handOver(): void {
    this.handedOver = true
    const socket = this.socket
    socket.pause()
    this.listen('off')
    socket.setTimeout(0)
    this.front.connections.delete(this)
    this.parser.close()
    const bytes = this.bufferedBytes > 0 ? this.joined() : undefined
    this.drop()
    if (bytes) socket.unshift(bytes)
    this.front.nodeListener.call(this.front.server, socket)
    socket.resume()
  }

  /** Close it now if nothing is in flight on it and it has served a request, or (Node 26 on, as
   * http.Server there) has not sent one yet (draining). */
  closeIfIdle(): void {
    if (this.idle) this.socket.destroy()
  }
}

/** A head the lean path serves (see the top of this file); anything else is Node's. */
function lean(head: Head): boolean {
  if (!head.complete || head.batched || head.upgrade) return false
  // '' is a method number not in http.METHODS (not one http.Server serves either): Node's to answer.
  if (head.major !== 1 || head.minor !== 1 || head.method === 'CONNECT' || head.method === '') return false
  const headers = head.headers as string[]
  let host = false
  for (let i = 0; i < headers.length; i += 2) {
    const name = headers[i] as string
    switch (name.length) {
      case 4:
        if (name.toLowerCase() === 'host') host = true
        break
      case 6:
        if (name.toLowerCase() === 'expect') return false
        break
      case 7:
        if (name.toLowerCase() === 'upgrade') return false
        break
      case 14:
        if (name.toLowerCase() === 'content-length' && (headers[i + 1] as string).trim() !== '0') return false
        break
      case 17:
        if (name.toLowerCase() === 'transfer-encoding') return false
        break
    }
  }
  return host
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

  keepAliveSeconds(): number {
    return Math.floor(this.server.keepAliveTimeout / 1000)
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
