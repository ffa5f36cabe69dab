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
const ASCII = (text: string) => Buffer.from(text, 'latin1')
const PIECES = {
  req: ASCII(',"req":{"id":'),
  method: ASCII(',"method":'),
  url: ASCII(',"url":'),
  remoteAddress: ASCII(',"remoteAddress":'),
  statusCode: ASCII('},"res":{"statusCode":'),
  responseTime: ASCII('},"responseTime":'),
  route: ASCII(',"route":'),
  upstreamStatus: ASCII(',"upstreamStatus":'),
  bytesIn: ASCII(',"bytesIn":'),
  bytesOut: ASCII(',"bytesOut":'),
  waitMs: ASCII(',"waitMs":'),
  holdMs: ASCII(',"holdMs":'),
  upstreamMs: ASCII(',"upstreamMs":'),
  rejected: ASCII(',"rejected":'),
  refused: ASCII(',"refused":'),
  upstreamError: ASCII(',"upstreamError":'),
  aborted: ASCII(',"aborted":true'),
  end: ASCII(`,"msg":"${ACCESS_MESSAGE}"}\n`),
}
const LEVEL_TIME = ASCII('{"level":30,"time":')
const BASE = Buffer.from(PINO_BASE, 'utf8')

/** Bytes a line can take at most: every string may grow sixfold when JSON-escaped. */
function lineBound(line: AccessLine): number {
  const chars =
    600 +
    line.id.length +
    (line.method?.length ?? 0) +
    (line.url?.length ?? 0) +
    (line.remoteAddress?.length ?? 0) +
    line.route.length +
    (line.rejected?.length ?? 0) +
    (line.refused?.length ?? 0) +
    (line.upstreamError?.length ?? 0)
  return chars * 6 + BASE.length
}

/**
 * Access-log lines held until LOG_BUFFER_BYTES have gathered (or flush() is called: every second, on
 * close, and before any other log line, so lines stay in order), then written as one string: nginx's
 * `access_log ... buffer= flush=`. A write per line costs a thread-pool round trip per few requests,
 * and sonic-boom's own minLength buffering measures the pending buffer with Buffer.byteLength on
 * every write, flattening it each time (docs/cost.md, "Why the code is as it is"). Lines are held as bytes in one reused buffer (64 KB of room
 * past the limit; a line that could not fit even then is written alone, after what is held).
 */
export class LineBuffer {
  private readonly buf: Buffer
  private at = 0

  constructor(
    private readonly out: (text: string) => void,
    private readonly limit: number,
  ) {
    this.buf = Buffer.allocUnsafe(limit + 64 * 1024)
  }

  /** A line as text (its newline included). */
  push(line: string): void {
    const bound = Buffer.byteLength(line)
    this.room(bound)
    if (bound > this.buf.length) return this.out(line)
    this.at += this.buf.write(line, this.at, 'utf8')
    if (this.at >= this.limit) this.flush()
  }

  /**
   * An access line, written as bytes straight into the batch: what accessJson() returns, without the
   * string (a tree of some 35 concatenated pieces per line, flattened again when the batch was
   * joined).
   */
  pushAccess(line: AccessLine, time = Date.now()): void {
    const bound = lineBound(line)
    this.room(bound)
    if (bound > this.buf.length) return this.out(accessJson(line, time))
    this.at = writeAccess(this.buf, this.at, line, time)
    if (this.at >= this.limit) this.flush()
  }

  /** Make room for `bytes` more (flush what is held if they would not fit). */
  private room(bytes: number): void {
    if (this.at > 0 && this.at + bytes > this.buf.length) this.flush()
  }

  flush(): void {
    if (this.at === 0) return
    const text = this.buf.toString('utf8', 0, this.at)
    this.at = 0
    this.out(text)
  }
}

/**
 * The access-log line exactly as pino writes `logger.info(accessRecord(line), ACCESS_MESSAGE)` at
 * level 30, built by hand: pino's generic serialisation allocated ~4 KB per request (its merge object,
 * per-value escaping checks, string building), a third of all the gateway allocated per request.
 * Every string that can come from a client or the config is escaped as JSON.stringify does.
 */
export function accessJson(line: AccessLine, time = Date.now()): string {
  const buf = Buffer.allocUnsafe(lineBound(line))
  return buf.toString('utf8', 0, writeAccess(buf, 0, line, time))
}

/** accessJson()'s bytes, written into `buf` from `at` (it has room: lineBound()); returns the end. */
function writeAccess(buf: Buffer, at: number, line: AccessLine, time: number): number {
  at = copy(buf, at, LEVEL_TIME)
  at = digits(buf, at, time)
  at = copy(buf, at, BASE)
  at = copy(buf, at, PIECES.req)
  at = str(buf, at, line.id)
  if (line.method !== undefined) at = str(buf, copy(buf, at, PIECES.method), line.method)
  if (line.url !== undefined) at = str(buf, copy(buf, at, PIECES.url), line.url)
  if (line.remoteAddress !== undefined) at = str(buf, copy(buf, at, PIECES.remoteAddress), line.remoteAddress)
  at = digits(buf, copy(buf, at, PIECES.statusCode), line.statusCode)
  at = digits(buf, copy(buf, at, PIECES.responseTime), line.responseTime)
  at = str(buf, copy(buf, at, PIECES.route), line.route)
  if (line.upstreamStatus !== undefined)
    at = digits(buf, copy(buf, at, PIECES.upstreamStatus), line.upstreamStatus)
  at = digits(buf, copy(buf, at, PIECES.bytesIn), line.bytesIn)
  at = digits(buf, copy(buf, at, PIECES.bytesOut), line.bytesOut)
  at = digits(buf, copy(buf, at, PIECES.waitMs), line.waitMs)
  at = digits(buf, copy(buf, at, PIECES.holdMs), line.holdMs)
  if (line.upstreamMs !== undefined) at = digits(buf, copy(buf, at, PIECES.upstreamMs), line.upstreamMs)
  if (line.rejected !== undefined) at = str(buf, copy(buf, at, PIECES.rejected), line.rejected)
  if (line.refused !== undefined) at = str(buf, copy(buf, at, PIECES.refused), line.refused)
  if (line.upstreamError !== undefined) at = str(buf, copy(buf, at, PIECES.upstreamError), line.upstreamError)
  if (line.aborted) at = copy(buf, at, PIECES.aborted)
  return copy(buf, at, PIECES.end)
}

function copy(buf: Buffer, at: number, piece: Buffer): number {
  buf.set(piece, at)
  return at + piece.length
}

/** A JSON string: printable ASCII without '"' and '\\' byte by byte, anything else as
 * JSON.stringify writes it, in UTF-8. */
function str(buf: Buffer, at: number, value: string): number {
  const start = at
  buf[at++] = 0x22
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i)
    if (c < 0x20 || c > 0x7e || c === 0x22 || c === 0x5c)
      return start + buf.write(JSON.stringify(value), start, 'utf8')
    buf[at++] = c
  }
  buf[at++] = 0x22
  return at
}

/** A number as `${n}` writes it: digit by digit for non-negative safe integers (times in ms
 * included) and for tenths (what round() makes of durations), as a string otherwise. */
function digits(buf: Buffer, at: number, n: number): number {
  if (!(n >= 0 && n <= Number.MAX_SAFE_INTEGER && Number.isInteger(n))) {
    const tenths = Math.round(n * 10)
    if (!(tenths > 0 && tenths <= Number.MAX_SAFE_INTEGER && tenths / 10 === n))
      return at + buf.write(`${n}`, at, 'latin1')
    at = digits(buf, at, Math.floor(tenths / 10))
    buf[at] = 0x2e
    buf[at + 1] = 0x30 + (tenths % 10)
    return at + 2
  }
  if (n === 0) {
    buf[at] = 0x30
    return at + 1
  }
  let end = at
  for (let rest = n; rest > 0; rest = Math.floor(rest / 10)) end++
  for (let i = end - 1, rest = n; rest > 0; i--, rest = Math.floor(rest / 10)) buf[i] = 0x30 + (rest % 10)
  return end
}
