// Talking to an upstream, as the proxy core sees it: what is sent, how failures map to 502/504, and
// the options of a forwarded request or upgrade. Shared by proxy.ts and tunnel.ts.
import type { Duplex, Readable } from 'node:stream'
import type { Dispatcher } from 'undici'
import type { ClientResponse } from './client.js'
import type { CloseContract } from './close-contract.js'

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
  /** Response headers to add (e.g. Connection: close while draining); they override the upstream's. */
  extraHeaders?: () => Record<string, string> | undefined
  /** Response headers to add where the upstream sent none of that name (lower-case names), also on
   * the gateway's own 502/504: e.g. the RateLimit headers of the admission. Given in the response's
   * head instead of by res.setHeader() (which validates and stores each one again). */
  defaultHeaders?: Record<string, string> | undefined
  /** The request's close contract: the upstream's end (finished, failed) or the gateway's abort is
   * reported there, once; everything below that is called at most once follows from it. */
  contract: CloseContract
  /** Called at most once, after the error response was sent (or the client connection cut). */
  onError(error: UpstreamError): void
  /** A request body that failed on the client's side (e.g. its body timeout): answered with this status. */
  clientError?(error: Error): number | undefined
  /** Upstream status, when its response starts. */
  onResponse?(status: number): void
  /** Called at most once, when the upstream's response ended: its last byte came, or it failed or
   * timed out (after onError); never when the client left first. `heldMs`: how long the client held
   * the upstream back meanwhile (from each pause for a client that took no more bytes to its drain). */
  onUpstreamEnd?(heldMs: number): void
}

/** A request being forwarded. */
export interface Forwarded {
  /** Call when the client response closes (its 'close' event): the upstream request is given up
   * unless it has ended (WebOptions.contract). */
  clientClosed(): void
  /** How long the client has held the upstream back so far, ms (as onUpstreamEnd's). */
  heldSoFar(): number
}

export interface WsOptions {
  /** The upstream must answer the upgrade within this long (504 otherwise). */
  handshakeTimeoutMs: number
  /** No byte in either direction for this long closes both sides. */
  idleTimeoutMs: number
  /** A refused upgrade's response: a client that takes none of it for this long is cut. */
  sendTimeoutMs: number
  onError(error: UpstreamError): void
  /** The handshake's answer, as the client was sent it: the upstream's status (101: the tunnel is
   * open; another: a refusal, relayed), or the gateway's own when the upstream failed first (502,
   * 504). Called at most once. */
  onAnswer?(status: number): void
}

export interface Proxy {
  /** Forward a request; the response (or a short 502/504) goes to `res`. Never throws. The caller
   * tells it when `res` closes (Forwarded.clientClosed()). */
  web(target: URL, res: ClientResponse, request: Outgoing, options: WebOptions): Forwarded
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
export class ClientGone extends Error {}

export function dispatchOptions(request: Outgoing, timeoutMs: number): Dispatcher.DispatchOptions {
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

export function classify(error: Error): Omit<UpstreamError, 'answered'> {
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
