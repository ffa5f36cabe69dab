// One client connection on the lean front end, until it closes or is handed to http.Server: its
// socket events, the serve loop, the hand-over at the first request that is not lean, and
// http.Server's connection timing.
//
// One request is in flight at a time; the ones behind it wait in a bounded read-ahead. The timing is
// http.Server's: busy until the first response; 408 at headersTimeout for a silent connection; idle
// ones closed at keepAliveTimeout + 1 s.
import http from 'node:http'
import type { Socket } from 'node:net'
import type { RequestHandler } from '../client.js'
import { probeWhilePaused } from '../reset-probe.js'
import { type Binding, type Head, LeanParser } from './llhttp.js'
import { ReadAhead } from './read-ahead.js'
import { isLean, LeanRequest } from './request.js'
import { LeanResponse, type ResponseConnection } from './response.js'

const CRLFCRLF = Buffer.from('\r\n\r\n')
/** Bytes of later (pipelined) requests read ahead while a response is in flight (or the socket's
 * highWaterMark, if larger): beyond this the socket is given them back and paused, and reads nothing
 * more until the response is done (the kernel keeps what comes), as http.Server stops reading. */
const MAX_READ_AHEAD = 64 * 1024

/** As http.Server's request timeout answer (lib/_http_server.js). */
const REQUEST_TIMEOUT = 'HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n'
/** http.Server closes an idle keep-alive connection this long after the Keep-Alive timeout it
 * advertises (HTTP_SERVER_KEEP_ALIVE_TIMEOUT_BUFFER), so a client reusing it just in time is not cut. */
const KEEP_ALIVE_BUFFER_MS = 1000

/** Whether http.Server's closeIdleConnections() (a drain) counts a connection that has not sent its
 * first request as idle and closes it: Node 26 does, Node 20 to 25 do not (found by
 * scripts/test-node-majors.mjs). The lean path does what http.Server does on the Node it runs on. */
const FRESH_IS_IDLE = Number(process.versions.node.split('.')[0]) >= 26

/** What a connection needs of its front end (front-end.ts's LeanFront). */
export interface ConnectionFront {
  readonly server: http.Server
  /** http.Server's own connection listener: a connection handed over goes there. */
  readonly nodeListener: (this: http.Server, socket: Socket) => void
  readonly handler: RequestHandler
  readonly binding: Binding
  /** The front end's lean connections: one leaves it when it closes or is handed over. */
  readonly connections: Set<LeanConnection>
}

export class LeanConnection implements ResponseConnection {
  /** Bytes read and not parsed yet. */
  private readonly held = new ReadAhead()
  private current: LeanResponse | undefined
  private readonly parser: LeanParser
  private looping = false
  private handedOver = false
  /** A response was written on it: from then on, nothing in flight means idle (before that, a new
   * connection counts as busy, as in http.Server before Node 26 (FRESH_IS_IDLE), and its first head is
   * bounded by headersTimeout). */
  private served = false

  constructor(
    readonly front: ConnectionFront,
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

  /** Nothing in flight and nothing to serve: neither read ahead nor handed back to the socket. */
  get idle(): boolean {
    return (
      (this.served || FRESH_IS_IDLE) &&
      this.current === undefined &&
      this.held.bytes === 0 &&
      this.socket.readableLength === 0
    )
  }

  /** What it holds read ahead (readAheadHeld()). */
  get heldBytes(): number {
    return this.held.bytes
  }

  get heldBuffers(): number {
    return this.held.buffers
  }

  /** The Keep-Alive timeout its responses advertise: http.Server's keepAliveTimeout, in seconds. */
  keepAliveSeconds(): number {
    return Math.floor(this.front.server.keepAliveTimeout / 1000)
  }

  private readonly onData = (chunk: Buffer): void => {
    if (this.current === undefined) {
      this.held.add(chunk)
      return this.next()
    }
    this.held.keep(chunk)
    // A paused socket reads on, a Buffer per read, until it holds its highWaterMark (16 KB on Node 20,
    // 64 KB from 22): given the read-ahead back, at least that much, it stops reading.
    if (this.held.bytes > MAX_READ_AHEAD && this.held.bytes >= this.socket.readableHighWaterMark) {
      const bytes = this.held.joined()
      this.held.drop()
      this.socket.pause()
      this.socket.unshift(bytes)
      probeWhilePaused(this.socket)
    }
  }

  /** The client closed its side: as http.Server (no half-open HTTP), what is in flight is aborted;
   * a response already written whole is still flushed. */
  private readonly onEnd = (): void => {
    this.held.drop()
    if (this.current && !this.current.writableEnded) this.socket.destroy()
    else this.socket.end()
  }

  private readonly onError = (): void => {
    this.socket.destroy()
  }

  private readonly onClose = (): void => {
    this.front.connections.delete(this)
    this.held.drop()
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
    } else if (this.held.bytes === 0) {
      this.socket.end(REQUEST_TIMEOUT, 'latin1')
      this.socket.destroySoon()
    }
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
      this.held.drop()
      this.socket.destroySoon()
      return
    }
    if (this.held.bytes === 0 && this.socket.readableLength === 0) {
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
      while (this.current === undefined && this.held.bytes > 0 && !this.socket.destroyed) {
        const bytes = this.held.joined()
        const end = bytes.indexOf(CRLFCRLF)
        if (end < 0 || end + 4 > http.maxHeaderSize) return this.handOver()
        const head = this.parser.parse(bytes.subarray(0, end + 4))
        if (!head || !isLean(head)) return this.handOver()
        this.held.from(bytes, end + 4)
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
    const bytes = this.held.bytes > 0 ? this.held.joined() : undefined
    this.held.drop()
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
