// The response the lean front end writes on the raw socket: the bytes ServerResponse writes for the
// same calls (its head rules are in lib/_http_outgoing.js, _storeHeader), with the head built as one
// string and sent with the first body bytes or the end; and its 'close' (as ../close-contract.ts has it).
import { EventEmitter } from 'node:events'
import { STATUS_CODES, validateHeaderName, validateHeaderValue } from 'node:http'
import type { Socket } from 'node:net'
import type { ClientResponse, HeaderList, HeaderObject } from '../client.js'

/** A first body chunk up to this size leaves in one write with the head (latin1 keeps every byte). */
const SMALL_BODY = 2048

/** The connection a response is written on (connection.ts's LeanConnection). */
export interface ResponseConnection {
  readonly socket: Socket
  /** The Keep-Alive timeout the connection advertises, in whole seconds (0: none). */
  keepAliveSeconds(): number
  /** The response is over: later ones may go. False if it was not the connection's current one. */
  detach(res: LeanResponse): boolean
  /** After the response's 'close': the next request, or the end of the connection. */
  responseClosed(res: LeanResponse): void
}

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
    private readonly connection: ResponseConnection,
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
        const timeout = this.connection.keepAliveSeconds()
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

  /** The response is over (written, or its connection closed): its 'close', which the close contract
   * (../close-contract.ts) takes once; called again (the connection closing after the response was
   * written), it does nothing. */
  close(): void {
    if (this.closed) return
    this.closed = true
    const mine = this.connection.detach(this)
    this.emit('close')
    if (mine) this.connection.responseClosed(this)
  }
}
