// The access log: one JSON line per request in pino's format, built by hand and written in batches.
import { hostname } from 'node:os'

/** One access-log record: what pino-http users look for, and why the gateway answered itself. */
export interface AccessLine {
  route: string
  method: string | undefined
  url: string | undefined
  status: number
  waitMs: number
  holdMs: number
  durationMs: number
  upstreamError?: string | undefined
  refused?: string | undefined
  aborted?: true | undefined
}

/** pino's default bindings, as it writes them. */
const PINO_BASE = `,"pid":${process.pid},"hostname":${JSON.stringify(hostname())}`
/** Printable ASCII without '"' and '\\': a JSON string as it is (most URLs and every route name). */
const PLAIN = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/
const json = (value: string | undefined) =>
  value === undefined ? 'null' : PLAIN.test(value) ? `"${value}"` : JSON.stringify(value)

/**
 * The access-log line exactly as pino would write `logger.info(line, 'request')` at level 30, built
 * by hand: pino's generic serialisation allocated ~4 KB per request (its merge object, per-value
 * escaping checks, string building), a third of all the gateway allocated per request. Every string
 * that can come from a client or the config goes through JSON.stringify.
 */
export function accessJson(line: AccessLine, time = Date.now()): string {
  let text = `{"level":30,"time":${time}${PINO_BASE},"route":${json(line.route)},"method":${json(line.method)},"url":${json(line.url)},"status":${line.status},"waitMs":${line.waitMs},"holdMs":${line.holdMs},"durationMs":${line.durationMs}`
  if (line.upstreamError !== undefined) text += `,"upstreamError":${json(line.upstreamError)}`
  if (line.refused !== undefined) text += `,"refused":${json(line.refused)}`
  if (line.aborted) text += ',"aborted":true'
  return `${text},"msg":"request"}\n`
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
