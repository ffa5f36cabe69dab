// Which headers cross the gateway (G13). RFC 9110 §7.6.1: hop-by-hop headers, and every header the
// Connection header names, are for one connection only and never forwarded, in either direction.
// At the edge (no trustProxy), headers that claim to say who the client is or what it asked for are
// client-written and dropped; the gateway writes its own X-Forwarded-*. The fencing token header is
// only ever the gateway's, in any spelling (CGI-style servers read '_' as '-').

export const FENCING_HEADER = 'x-tollgate-fencing-token'

/** Hop-by-hop (RFC 9110 §7.6.1, and the older or HTTP/2-only ones): never relayed in either
 * direction. `upgrade` is re-added by the WebSocket path itself. */
const HOP_BY_HOP = [
  'connection',
  'keep-alive',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'proxy-authorization',
  'proxy-authenticate',
  'http2-settings',
]

/** Never forwarded upstream. */
const REQUEST_HOP = new Set([
  ...HOP_BY_HOP,
  'expect', // answered by the gateway itself (100 Continue after admission)
  'host', // set from the canonical target
  'content-length', // set again from what the body is
])

/** Never relayed to the client. */
const RESPONSE_HOP = new Set(HOP_BY_HOP)

/** Dropped at the edge unless trustProxy: client-written claims about the client or the request. */
const FORWARDING = [
  'forwarded',
  'x-forwarded-for',
  'x-forwarded-host',
  'x-forwarded-port',
  'x-forwarded-proto',
  'x-forwarded-prefix',
  'x-real-ip',
  'true-client-ip',
  'x-client-ip',
  'x-original-url',
  'x-rewrite-url',
  // What Rack, Rails and IIS read for the scheme
  'x-forwarded-ssl',
  'x-forwarded-scheme',
  'x-url-scheme',
  'front-end-https',
]

/** What happens to a request header, by lower-case name (one lookup per header): absent, it is kept
 * (unless the Connection header names it, or it is an underscored spelling of a dropped one). */
const DROP = 1
const FORWARDING_HEADER = 2
const REQUEST_ID = 3
const REQUEST_RULES = new Map<string, number>([
  ...FORWARDING.map((name) => [name, FORWARDING_HEADER] as const),
  ...[...REQUEST_HOP, FENCING_HEADER].map((name) => [name, DROP] as const),
  ['x-request-id', REQUEST_ID],
])

/** Dropped in any spelling with '_' for '-' (CGI-style servers read both as the same variable), also
 * behind a trusted proxy: none would send those. */
const UNDERSCORED = new Set([FENCING_HEADER, 'x-request-id', ...FORWARDING])

/** Header names listed in Connection values (lower-case), or undefined. */
export function connectionTokens(values: readonly string[]): Set<string> | undefined {
  let tokens: Set<string> | undefined
  for (const value of values) {
    // What nearly every upstream sends: nothing named, no split.
    if (value.length <= 10 && /^(?:keep-alive|close)$/i.test(value)) continue
    for (const token of value.split(',')) {
      const name = token.trim().toLowerCase()
      if (name !== '' && name !== 'close' && name !== 'keep-alive') (tokens ??= new Set()).add(name)
    }
  }
  return tokens
}

export interface ForwardedInfo {
  /** The client's address as the gateway sees it (the TCP peer). */
  clientAddress: string | undefined
  /** Host the client asked for (Host header, or the absolute-form target's authority). */
  host: string | undefined
  /** The port the gateway listens on (never taken from Host). */
  port: number | undefined
  proto: 'http' | 'https'
  /** Keep and extend the client's X-Forwarded-* (the gateway is behind a trusted proxy). */
  trustProxy: boolean
  /** The lease's fencing token, if the request holds one. */
  fencingToken: number | undefined
  /** X-Request-Id to send (replacing the client's). */
  requestId?: string
}

/**
 * The request headers for the upstream, as a flat [name, value, ...] list in the client's order and
 * spelling: hop-by-hop and Connection-named headers removed, forwarding headers replaced, the fencing
 * token set. `host` is the Host header to send.
 */
export function upstreamRequestHeaders(
  rawHeaders: readonly string[],
  info: ForwardedInfo,
  host: string,
): string[] {
  const connection: string[] = []
  for (let i = 0; i < rawHeaders.length; i += 2) {
    if ((rawHeaders[i] as string).length === 10 && (rawHeaders[i] as string).toLowerCase() === 'connection')
      connection.push(rawHeaders[i + 1] as string)
  }
  const named = connection.length > 0 ? connectionTokens(connection) : undefined
  const out: string[] = ['host', host]
  const forwardedFor: string[] = []
  /** With trustProxy, the X-Forwarded-Host/-Port/-Proto of the proxy in front are kept. */
  let kept: Set<string> | undefined
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i] as string
    const lower = name.toLowerCase()
    const rule = REQUEST_RULES.get(lower)
    if (rule === DROP || named?.has(lower)) continue
    if (rule === undefined && lower.includes('_') && UNDERSCORED.has(lower.replaceAll('_', '-'))) continue
    if (rule === REQUEST_ID && info.requestId !== undefined) continue
    if (rule === FORWARDING_HEADER) {
      if (!info.trustProxy) continue
      if (lower === 'x-forwarded-for') {
        forwardedFor.push(rawHeaders[i + 1] as string)
        continue
      }
      if (lower === 'x-forwarded-host' || lower === 'x-forwarded-port' || lower === 'x-forwarded-proto')
        (kept ??= new Set()).add(lower)
    }
    out.push(name, rawHeaders[i + 1] as string)
  }
  if (info.clientAddress) forwardedFor.push(info.clientAddress)
  if (forwardedFor.length > 0) out.push('x-forwarded-for', forwardedFor.join(', '))
  if (info.host && !kept?.has('x-forwarded-host')) out.push('x-forwarded-host', info.host)
  if (info.port !== undefined && !kept?.has('x-forwarded-port'))
    out.push('x-forwarded-port', String(info.port))
  if (!kept?.has('x-forwarded-proto')) out.push('x-forwarded-proto', info.proto)
  if (info.fencingToken !== undefined) out.push(FENCING_HEADER, String(info.fencingToken))
  if (info.requestId !== undefined) out.push('x-request-id', info.requestId)
  return out
}

/**
 * Response headers for the client as a flat [name, value, ...] list (what res.writeHead() takes):
 * hop-by-hop and Connection-named ones removed; `defaults` added where the upstream kept none of that
 * name; `extra` replacing the upstream's. One list instead of an object built per response (names are
 * the upstream's, lower-case and unique, as undici gives them).
 */
export function clientResponseHeaderList(
  headers: Record<string, string | string[] | undefined>,
  defaults: Record<string, string> | undefined,
  extra: Record<string, string> | undefined,
): (string | string[])[] {
  const connection = headers.connection
  const named =
    connection === undefined
      ? undefined
      : connectionTokens(Array.isArray(connection) ? connection : [connection])
  const out: (string | string[])[] = []
  for (const name in headers) {
    const value = headers[name]
    if (value === undefined || RESPONSE_HOP.has(name) || named?.has(name)) continue
    if (extra && Object.hasOwn(extra, name)) continue
    out.push(name, value)
  }
  if (defaults)
    for (const name in defaults) {
      const kept = headers[name] !== undefined && !RESPONSE_HOP.has(name) && !named?.has(name)
      if (!kept && !(extra && Object.hasOwn(extra, name))) out.push(name, defaults[name] as string)
    }
  if (extra) for (const name in extra) out.push(name, extra[name] as string)
  return out
}

/** How many times a header appears in rawHeaders (case-insensitive). */
export function countHeader(rawHeaders: readonly string[], lowerName: string): number {
  let n = 0
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i] as string
    if (name.length === lowerName.length && name.toLowerCase() === lowerName) n++
  }
  return n
}
