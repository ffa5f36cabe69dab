// The one module that talks to upstreams: undici's Pool.dispatch() (Node's own HTTP client, by the
// Node.js core team), chosen by measurement (docs/gateway.md, "Proxy core"): no IncomingMessage or
// ClientRequest per request, keep-alive pools, and request bodies framed by undici itself (it sends
// Content-Length or chunked and refuses Transfer-Encoding, Upgrade or Expect given as headers), so
// no client framing can reach the upstream as a second request (G13). Which headers are sent is
// decided by the caller (headers.ts); this module moves bytes, enforces the upstream and send
// timeouts, and maps failures to 502/504 (or a cut connection once the response has started).
import http from 'node:http'
import type { Duplex, Readable } from 'node:stream'
import { Pool } from 'undici'
import type { Dispatcher } from 'undici'
import { clientResponseHeaders } from './headers.js'

export type UpstreamErrorKind = 'refused' | 'unresolved' | 'timeout' | 'reset' | 'other'

export interface UpstreamError {
  kind: UpstreamErrorKind
  /** 502 for refused/unresolved/reset/other, 504 for a timeout. */
  status: 502 | 504
  /** The errno-style or undici code, e.g. ECONNREFUSED, UND_ERR_HEADERS_TIMEOUT. */
  code: string | undefined
  /** False when the response had already started: the client connection was cut instead. */
  answered: boolean
}

/** What to send upstream: decided by the caller, sent as is. */
export interface Outgoing {
  method: string
  /** Path and query, e.g. /api/x?y=1 (the upstream's base path already prepended). */
  path: string
  /** Flat [name, value, ...] list, Host included, hop-by-hop headers already removed. */
  headers: string[]
  /** null: no body. A length-less stream or iterable is sent chunked. */
  body: Readable | AsyncIterable<Buffer> | Buffer | null
  /** Declared length of a streamed body (sent as Content-Length; undici checks it). */
  contentLength: number | undefined
}

export interface WebOptions {
  /** The upstream may stay silent this long: before the response headers, and between body chunks. */
  timeoutMs: number
  /** A client that accepts no response bytes for this long is cut (nginx send_timeout). */
  sendTimeoutMs: number
  /** Response headers to add (e.g. Connection: close while draining). */
  extraHeaders?: () => Record<string, string> | undefined
  /** Called at most once, after the error response was sent (or the client connection cut). */
  onError(error: UpstreamError): void
  /** A request body that failed on the client's side (e.g. its body timeout): answered with this status. */
  clientError?(error: Error): number | undefined
  /** Upstream status, when its response starts. */
  onResponse?(status: number): void
}

export interface WsOptions {
  /** The upstream must answer the upgrade within this long (504 otherwise). */
  handshakeTimeoutMs: number
  /** No byte in either direction for this long closes both sides. */
  idleTimeoutMs: number
  /** A refused upgrade's response: a client that takes none of it for this long is cut. */
  sendTimeoutMs: number
  onError(error: UpstreamError): void
  /** The tunnel is open (101 relayed). */
  onOpen?(): void
}

export interface Proxy {
  /** Forward a request; the response (or a short 502/504) goes to `res`. Never throws. */
  web(target: URL, res: http.ServerResponse, request: Outgoing, options: WebOptions): void
  /** Forward an Upgrade request over `socket` (the client's). Never throws. */
  ws(
    target: URL,
    socket: Duplex,
    head: Buffer,
    request: Outgoing & { upgrade: string },
    options: WsOptions,
  ): void
  /** Upstream sockets open right now (busy + idle keep-alive), for tests and metrics. */
  openSockets(): number
  /** Close every pool (idle sockets at once, busy ones when their request ends). */
  close(): Promise<void>
}

/** Errors the caller made on purpose (the client left): nothing to report. */
class ClientGone extends Error {}

/** Per-origin keep-alive pools; requests beyond `connections` queue in the pool (holding their permit). */
export function createProxy(options: { connections?: number } = {}): Proxy {
  const pools = new Map<string, Pool>()
  const poolFor = (target: URL): Pool => {
    let pool = pools.get(target.origin)
    if (!pool) {
      pool = new Pool(target.origin, {
        connections: options.connections ?? 1024,
        pipelining: 1,
        keepAliveTimeout: 4000,
        connect: { timeout: 10_000 },
      })
      pools.set(target.origin, pool)
    }
    return pool
  }

  return {
    web(target, res, request, opts) {
      forwardWeb(poolFor(target), res, request, opts)
    },
    ws(target, socket, head, request, opts) {
      forwardWs(poolFor(target), socket, head, request, opts)
    },
    openSockets() {
      let count = 0
      for (const pool of pools.values()) count += pool.stats.connected
      return count
    },
    async close() {
      await Promise.allSettled([...pools.values()].map((pool) => pool.close()))
      pools.clear()
    },
  }
}

function dispatchOptions(request: Outgoing, timeoutMs: number): Dispatcher.DispatchOptions {
  const headers = request.headers
  if (request.contentLength !== undefined) headers.push('content-length', String(request.contentLength))
  return {
    method: request.method as Dispatcher.HttpMethod,
    path: request.path,
    headers,
    // undici also takes (async) iterables as bodies; its types list only streams and buffers.
    body: request.body as Readable | Buffer | null,
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
  }
}

function forwardWeb(pool: Pool, res: http.ServerResponse, request: Outgoing, opts: WebOptions): void {
  let controller: Dispatcher.DispatchController | undefined
  let reported = false
  let head: { statusCode: number; out: Record<string, string | string[]> } | undefined
  const flushHead = () => {
    if (!head) return
    res.writeHead(head.statusCode, head.out)
    head = undefined
  }
  let sendTimer: NodeJS.Timeout | undefined
  const stall = () => {
    // Nothing of the response was taken by the client for sendTimeoutMs: let it go.
    sendTimer ??= setTimeout(() => res.destroy(), opts.sendTimeoutMs)
  }
  const moving = () => {
    clearTimeout(sendTimer)
    sendTimer = undefined
  }
  res.on('drain', () => {
    moving()
    if (controller?.paused) controller.resume()
  })
  res.once('close', () => {
    moving()
    // The client left before the response was complete: the upstream request goes too.
    if (!res.writableFinished && controller && !controller.aborted)
      controller.abort(new ClientGone('client closed'))
  })
  res.once('finish', moving)

  const fail = (error: Error) => {
    if (reported || error instanceof ClientGone) return
    reported = true
    const clientStatus = opts.clientError?.(error)
    if (clientStatus !== undefined) {
      if (!res.headersSent && !res.destroyed) {
        res.writeHead(clientStatus, { 'content-type': 'text/plain; charset=utf-8', connection: 'close' })
        res.end(`${http.STATUS_CODES[clientStatus] ?? 'error'}\n`)
      } else res.destroy()
      return
    }
    const failure = classify(error)
    let answered = false
    if (!res.headersSent && !res.destroyed) {
      const body = failure.status === 504 ? 'upstream timed out\n' : 'upstream unavailable\n'
      res.writeHead(failure.status, {
        'content-type': 'text/plain; charset=utf-8',
        'content-length': Buffer.byteLength(body),
      })
      res.end(body)
      answered = true
    } else {
      res.destroy()
    }
    opts.onError({ ...failure, answered })
  }

  try {
    pool.dispatch(dispatchOptions(request, opts.timeoutMs), {
      onRequestStart(ctl) {
        controller = ctl
        if (res.destroyed) ctl.abort(new ClientGone('client closed'))
      },
      onResponseStart(_ctl, statusCode, headers) {
        if (statusCode < 200) return // 1xx informational: not relayed (103 would need writeEarlyHints)
        opts.onResponse?.(statusCode)
        const out = clientResponseHeaders(headers)
        const extra = opts.extraHeaders?.()
        if (extra) Object.assign(out, extra)
        // Written with the first body bytes or the end: an upstream that breaks before that (a 204
        // with a body, a reset) still gets the client a 502 instead of a cut connection.
        head = { statusCode, out }
      },
      onResponseData(ctl, chunk) {
        flushHead()
        if (!res.write(chunk)) {
          ctl.pause()
          stall()
        }
      },
      onResponseEnd() {
        flushHead()
        res.end()
        // Everything is written, but a client that does not read keeps it buffered: bounded too.
        if (res.writableLength > 0 || res.writableNeedDrain) stall()
      },
      onResponseError(_ctl, error) {
        fail(error)
      },
    })
  } catch (error) {
    fail(error as Error)
  }
}

function forwardWs(
  pool: Pool,
  socket: Duplex,
  head: Buffer,
  request: Outgoing & { upgrade: string },
  opts: WsOptions,
): void {
  let written = false
  let reported = false
  let controller: Dispatcher.DispatchController | undefined
  let sendTimer: NodeJS.Timeout | undefined
  const stall = () => {
    sendTimer ??= setTimeout(() => socket.destroy(), opts.sendTimeoutMs)
  }
  const moving = () => {
    clearTimeout(sendTimer)
    sendTimer = undefined
  }
  socket.once('close', () => {
    moving()
    if (controller && !controller.aborted) controller.abort(new ClientGone('client closed'))
  })
  const fail = (error: Error) => {
    if (reported || error instanceof ClientGone) return
    reported = true
    const failure = classify(error)
    if (!written && !socket.destroyed) {
      written = true
      socket.end(rawHead(failure.status, { 'content-length': '0' }), () => socket.destroy())
    } else socket.destroy()
    opts.onError({ ...failure, answered: !written })
  }
  try {
    pool.dispatch(
      { ...dispatchOptions(request, opts.handshakeTimeoutMs), upgrade: request.upgrade },
      {
        onRequestStart(ctl) {
          controller = ctl
          if (socket.destroyed) ctl.abort(new ClientGone('client closed'))
        },
        onRequestUpgrade(_ctl, statusCode, headers, upstream) {
          written = true
          if (socket.destroyed) {
            upstream.destroy()
            return
          }
          const out: Record<string, string | string[]> = {
            ...clientResponseHeaders(headers),
            connection: 'Upgrade',
            upgrade: request.upgrade,
          }
          socket.write(rawHead(statusCode, out))
          if (head.length > 0) upstream.write(head)
          tunnel(socket, upstream, opts.idleTimeoutMs)
          opts.onOpen?.()
        },
        // The upstream refused the upgrade with an ordinary response: relay it (with back-pressure and
        // the send bound, like any response), then close.
        onResponseStart(_ctl, statusCode, headers) {
          if (statusCode < 200) return
          written = true
          socket.write(rawHead(statusCode, { ...clientResponseHeaders(headers), connection: 'close' }))
        },
        onResponseData(ctl, chunk) {
          if (!socket.write(chunk)) {
            ctl.pause()
            stall()
            socket.once('drain', () => {
              moving()
              ctl.resume()
            })
          }
        },
        onResponseEnd() {
          socket.end(() => socket.destroy())
          stall()
        },
        onResponseError(_ctl, error) {
          fail(error)
        },
      },
    )
  } catch (error) {
    fail(error as Error)
  }
}

/** Pipe two sockets both ways. Either side ending ends the other, which gets a moment to follow before
 * both are destroyed (a silent half-open peer holds nothing); no byte for idleMs closes both. */
function tunnel(client: Duplex, upstream: Duplex, idleMs: number): void {
  const GRACE_MS = 1000
  upstream.on('error', () => {})
  const destroyBoth = () => {
    client.destroy()
    upstream.destroy()
  }
  const ended = (other: Duplex) => () => {
    other.end()
    setTimeout(destroyBoth, GRACE_MS).unref()
  }
  client.pipe(upstream, { end: false })
  upstream.pipe(client, { end: false })
  client.once('end', ended(upstream))
  upstream.once('end', ended(client))
  client.once('close', () => upstream.destroy())
  upstream.once('close', () => client.destroy())
  // A socket's idle timer runs while neither a read nor a write completes on it: the client socket
  // sees both directions.
  const socket = client as Duplex & { setTimeout?(ms: number, fn: () => void): void }
  socket.setTimeout?.(idleMs, destroyBoth)
}

function rawHead(status: number, headers: Record<string, string | string[]>): string {
  let head = `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? ''}\r\n`
  for (const [name, value] of Object.entries(headers)) {
    for (const one of Array.isArray(value) ? value : [value]) head += `${name}: ${one}\r\n`
  }
  return `${head}\r\n`
}

function classify(error: Error): Omit<UpstreamError, 'answered'> {
  const code = (error as NodeJS.ErrnoException).code
  const kind: UpstreamErrorKind =
    code === 'ECONNREFUSED'
      ? 'refused'
      : code === 'ENOTFOUND' || code === 'EAI_AGAIN'
        ? 'unresolved'
        : code === 'UND_ERR_HEADERS_TIMEOUT' ||
            code === 'UND_ERR_BODY_TIMEOUT' ||
            code === 'UND_ERR_CONNECT_TIMEOUT' ||
            code === 'ETIMEDOUT'
          ? 'timeout'
          : code === 'UND_ERR_SOCKET' || code === 'ECONNRESET' || code === 'EPIPE'
            ? 'reset'
            : 'other'
  return { kind, status: kind === 'timeout' ? 504 : 502, code }
}
