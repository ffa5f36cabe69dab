// The access log: one JSON line per request in pino's format, built by hand and written in batches.
import { hostname } from 'node:os'

/** One access-log record, in pino-http's shape (req, res, responseTime, "request completed") with
 * what the gateway adds: route, upstream status, bytes, wait/hold/upstream times, and why it answered
 * by itself (rejected by a limit, refused as malformed, an upstream error, or a client that left). */
export interface AccessLine {
  /** X-Request-Id: the client's (if printable and short), else generated; also sent upstream. */
  id: string
  method: string | undefined
  /** As the client sent it: before normalisation and stripPrefix. */
  url: string | undefined
  remoteAddress: string | undefined
  statusCode: number
  /** ms from the request's arrival to its response's close. */
  responseTime: number
  route: string
  upstreamStatus: number | undefined
  /** Request body bytes read from the client. */
  bytesIn: number
  /** Bytes written to the client connection for this response (status line and headers included). */
  bytesOut: number
  waitMs: number
  holdMs: number
  /** ms from forwarding to the upstream's response headers. */
  upstreamMs: number | undefined
  rejected?: string | undefined
  refused?: string | undefined
  upstreamError?: string | undefined
  aborted?: true | undefined
}

/** The record as pino-http users know it: what `logger.info(accessRecord(line), ACCESS_MESSAGE)` writes. */
export function accessRecord(line: AccessLine): Record<string, unknown> {
  return {
    req: { id: line.id, method: line.method, url: line.url, remoteAddress: line.remoteAddress },
    res: { statusCode: line.statusCode },
    responseTime: line.responseTime,
    route: line.route,
    upstreamStatus: line.upstreamStatus,
    bytesIn: line.bytesIn,
    bytesOut: line.bytesOut,
    waitMs: line.waitMs,
    holdMs: line.holdMs,
    upstreamMs: line.upstreamMs,
    rejected: line.rejected,
    refused: line.refused,
    upstreamError: line.upstreamError,
    aborted: line.aborted,
  }
}

export const ACCESS_MESSAGE = 'request completed'

/** pino's default bindings, as it writes them. */
const PINO_BASE = `,"pid":${process.pid},"hostname":${JSON.stringify(hostname())}`
/** Printable ASCII without '"' and '\\': a JSON string as it is (most URLs and every route name). */
const PLAIN = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/
const json = (value: string | undefined) =>
  value === undefined ? 'null' : PLAIN.test(value) ? `"${value}"` : JSON.stringify(value)
const optional = (name: string, value: string | undefined) =>
  value === undefined ? '' : `,"${name}":${json(value)}`

/**
 * The access-log line exactly as pino writes `logger.info(accessRecord(line), ACCESS_MESSAGE)` at
 * level 30, built by hand: pino's generic serialisation allocated ~4 KB per request (its merge object,
 * per-value escaping checks, string building), a third of all the gateway allocated per request.
 * Every string that can come from a client or the config goes through JSON.stringify.
 */
export function accessJson(line: AccessLine, time = Date.now()): string {
  let text = `{"level":30,"time":${time}${PINO_BASE},"req":{"id":${json(line.id)}`
  if (line.method !== undefined) text += `,"method":${json(line.method)}`
  if (line.url !== undefined) text += `,"url":${json(line.url)}`
  if (line.remoteAddress !== undefined) text += `,"remoteAddress":${json(line.remoteAddress)}`
  text += `},"res":{"statusCode":${line.statusCode}},"responseTime":${line.responseTime},"route":${json(line.route)}`
  if (line.upstreamStatus !== undefined) text += `,"upstreamStatus":${line.upstreamStatus}`
  text += `,"bytesIn":${line.bytesIn},"bytesOut":${line.bytesOut},"waitMs":${line.waitMs},"holdMs":${line.holdMs}`
  if (line.upstreamMs !== undefined) text += `,"upstreamMs":${line.upstreamMs}`
  text += optional('rejected', line.rejected)
  text += optional('refused', line.refused)
  text += optional('upstreamError', line.upstreamError)
  if (line.aborted) text += ',"aborted":true'
  return `${text},"msg":"${ACCESS_MESSAGE}"}\n`
}

/**
 * Access-log lines held until LOG_BUFFER_BYTES have gathered (or flush() is called: every second, on
 * close, and before any other log line, so lines stay in order), then written as one string: nginx's
 * `access_log ... buffer= flush=`. A write per line cost a thread-pool round trip per few requests
 * (~10 us of CPU per request under load), and sonic-boom's own minLength buffering measures the
 * pending buffer with Buffer.byteLength on every write, flattening it each time (2.5 KB copied per
 * request in an allocation profile).
 */
export class LineBuffer {
  private lines: string[] = []
  private size = 0

  constructor(
    private readonly out: (text: string) => void,
    private readonly limit: number,
  ) {}

  push(line: string): void {
    this.lines.push(line)
    this.size += line.length
    if (this.size >= this.limit) this.flush()
  }

  flush(): void {
    if (this.lines.length === 0) return
    const text = this.lines.length === 1 ? (this.lines[0] as string) : this.lines.join('')
    this.lines = []
    this.size = 0
    this.out(text)
  }
}
