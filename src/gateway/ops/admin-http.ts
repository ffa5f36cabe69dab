// The admin listener's HTTP parts: its answers (JSON, text), the PUT body of /limits, the bearer
// token's comparison, and /metrics made without holding the event loop (admin.ts routes them).
import { createHash, timingSafeEqual } from 'node:crypto'
import type http from 'node:http'
import { Registry } from 'prom-client'
import { HttpError } from './http-error.js'

/** A PUT of /limits: its body at most, and the most permits it may set. */
const MAX_BODY_BYTES = 1024
const MAX_PERMITS = 1_000_000

/** The registry's text, as registry.metrics() writes it, made one metric at a time with the event
 * loop's I/O in between: with 20 routes it is ~100 KB, ~10 ms of CPU that would otherwise hold every
 * proxied request at once. */
export async function metricsText(registry: Registry): Promise<Buffer> {
  if (registry.contentType !== Registry.PROMETHEUS_CONTENT_TYPE) return Buffer.from(await registry.metrics())
  const parts: string[] = []
  for (const metric of registry.getMetricsAsArray()) {
    parts.push(await registry.getSingleMetricAsString(metric.name))
    await new Promise<void>((resolve) => setImmediate(resolve))
  }
  return Buffer.from(`${parts.join('\n\n')}\n`)
}

/** Compared as digests, in constant time: neither the length nor a prefix of the token leaks. */
export function sameSecret(given: string, token: string): boolean {
  const digest = (value: string) => createHash('sha256').update(value, 'utf8').digest()
  return timingSafeEqual(digest(given), digest(token))
}

export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase()
  return h === 'localhost' || h === '::1' || /^(::ffff:)?127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h)
}

export function decodePart(part: string): string {
  try {
    return decodeURIComponent(part)
  } catch {
    throw new HttpError(400, 'bad percent-encoding in the path')
  }
}

/** The body of a PUT: exactly {"permits": <integer from 1 to 1000000>}, at most 1 KB of JSON. */
export async function readPermits(req: http.IncomingMessage): Promise<number> {
  const type = req.headers['content-type'] ?? ''
  if (!/^application\/json\s*(;|$)/i.test(type))
    throw new HttpError(415, 'expected Content-Type: application/json')
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length
    if (size > MAX_BODY_BYTES) throw new HttpError(413, `expected a body of at most ${MAX_BODY_BYTES} bytes`)
    chunks.push(chunk)
  }
  let body: unknown
  try {
    body = JSON.parse(Buffer.concat(chunks).toString('utf8'))
  } catch {
    throw new HttpError(400, 'expected a JSON body: {"permits": <n>}')
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw new HttpError(400, 'expected a JSON object: {"permits": <n>}')
  const unknown = Object.keys(body).filter((key) => key !== 'permits')
  if (unknown.length > 0) throw new HttpError(400, `${unknown[0]}: unknown field`)
  const permits = (body as { permits?: unknown }).permits
  if (typeof permits !== 'number' || !Number.isInteger(permits) || permits < 1 || permits > MAX_PERMITS)
    throw new HttpError(400, `permits: expected an integer from 1 to ${MAX_PERMITS}`)
  return permits
}

export function jsonBody(body: unknown): Buffer {
  return Buffer.from(`${JSON.stringify(body, null, 2)}\n`)
}

export function json(
  res: http.ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  send(res, status, jsonBody(body), headers)
}

/** A JSON body made already (one Buffer that every response sharing it sends). */
export function send(
  res: http.ServerResponse,
  status: number,
  body: Buffer,
  headers: Record<string, string> = {},
): void {
  if (res.headersSent) return void res.destroy()
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': body.length,
    'cache-control': 'no-store',
    ...headers,
  })
  res.end(body)
}

export function text(res: http.ServerResponse, status: number, body: string): void {
  res.writeHead(status, {
    'content-type': 'text/plain; charset=utf-8',
    'content-length': Buffer.byteLength(body),
  })
  res.end(body)
}
