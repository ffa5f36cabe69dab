// The canonical request target (G13): decided once, before routing, and what the upstream receives.
// Routing, locking and forwarding all use the result, so no spelling of a path reaches the upstream as
// a path the gateway did not match. Pure functions; every rule is in docs/gateway/behaviour.md ("Paths").
import { decodeForResource } from '../../admission/keys.js'

export interface PathOptions {
  /** Collapse runs of '/' into one (Envoy's merge_slashes). @default true */
  mergeSlashes: boolean
  /** '%2F' and '%5C' (encoded '/' and '\') in a path: 'reject' answers 400; 'keep' leaves them encoded
   * (they are then ordinary characters of a segment, never separators). Envoy's
   * path_with_escaped_slashes_action. @default 'reject' */
  escapedSlashes: 'reject' | 'keep'
}

export const PATH_DEFAULTS: Readonly<PathOptions> = Object.freeze({
  mergeSlashes: true,
  escapedSlashes: 'reject',
})

export type Target =
  | {
      kind: 'path'
      /** Canonical path, what the upstream receives (before stripPrefix). */
      path: string
      /** Raw query including '?', or ''. Forwarded unchanged. */
      query: string
      /** The path routes and locks are matched on: `path` without `;` parameters. */
      match: string
      /** Host of an absolute-form target (RFC 9112 §3.2.2: it replaces the Host header). */
      host: string | undefined
    }
  /** `OPTIONS *`: about the server, not a resource (RFC 9110 §9.3.7). */
  | { kind: 'asterisk' }
  | { kind: 'invalid'; reason: string }

const HEX = '0123456789ABCDEF'
// RFC 3986 §2.3 unreserved: ALPHA / DIGIT / "-" / "." / "_" / "~"
const UNRESERVED = new Uint8Array(128)
for (let c = 0; c < 128; c++) {
  const ch = String.fromCharCode(c)
  if (/[A-Za-z0-9\-._~]/.test(ch)) UNRESERVED[c] = 1
}

/** Parse a request-target (RFC 9112 §3.2) into its canonical form. Never throws. */
export function canonicalTarget(raw: string, method: string, options: PathOptions = PATH_DEFAULTS): Target {
  if (raw === '*')
    return method === 'OPTIONS'
      ? { kind: 'asterisk' }
      : { kind: 'invalid', reason: '"*" is for OPTIONS only' }
  let rest = raw
  let host: string | undefined
  if (!rest.startsWith('/')) {
    // absolute-form: scheme "://" authority path-abempty [ "?" query ]
    const absolute = /^https?:\/\/([^/?#]*)(.*)$/is.exec(rest)
    if (!absolute)
      return { kind: 'invalid', reason: 'the request target must be a path or an absolute http(s) URL' }
    const authority = absolute[1] as string
    if (authority === '' || authority.includes('@'))
      return { kind: 'invalid', reason: 'bad authority in the request target' }
    host = authority.toLowerCase()
    rest = (absolute[2] as string) || '/'
    if (!rest.startsWith('/')) rest = `/${rest}`
  }
  if (rest.includes('#'))
    return { kind: 'invalid', reason: 'a request target has no fragment (RFC 9112 §3.2)' }
  const q = rest.indexOf('?')
  const rawPath = q === -1 ? rest : rest.slice(0, q)
  const query = q === -1 ? '' : rest.slice(q)
  const decoded = decodeUnreserved(rawPath, options)
  if (typeof decoded !== 'string') return decoded
  const path = removeDotSegments(decoded, options.mergeSlashes)
  // Matched as a Tomcat or Spring upstream routes it: parameters off first, then dot segments, so
  // `/public/..;/admin` and `/;x/admin` count as `/admin` (repeated slashes merged either way).
  const match = path.includes(';') ? removeDotSegments(withoutParameters(decoded), true) : path
  return { kind: 'path', path, query, match, host }
}

/** Percent-decode unreserved characters and upper-case every other escape (RFC 3986 §6.2.2.1-2);
 * reject raw backslashes, malformed escapes and (by option) encoded slashes. */
function decodeUnreserved(path: string, options: PathOptions): string | Target {
  if (path.includes('\\'))
    return { kind: 'invalid', reason: 'a raw backslash in the path (some servers read it as "/")' }
  if (!path.includes('%')) return path
  let out = ''
  for (let i = 0; i < path.length; i++) {
    const ch = path[i] as string
    if (ch !== '%') {
      out += ch
      continue
    }
    const hi = i + 1 < path.length ? HEX.indexOf((path[i + 1] as string).toUpperCase()) : -1
    const lo = i + 2 < path.length ? HEX.indexOf((path[i + 2] as string).toUpperCase()) : -1
    if (hi < 0 || lo < 0) return { kind: 'invalid', reason: 'a malformed percent-escape in the path' }
    const code = hi * 16 + lo
    i += 2
    if (code < 128 && UNRESERVED[code]) {
      out += String.fromCharCode(code)
    } else if ((code === 0x2f || code === 0x5c) && options.escapedSlashes === 'reject') {
      return { kind: 'invalid', reason: 'an encoded slash (%2F or %5C) in the path' }
    } else {
      out += `%${HEX[hi]}${HEX[lo]}`
    }
  }
  return out
}

/** RFC 3986 §5.2.4 remove_dot_segments on an absolute path (never above the root), optionally merging
 * empty segments. A trailing '/', '.' or '..' leaves a trailing '/'. */
function removeDotSegments(path: string, mergeSlashes: boolean): string {
  // Most paths have neither a dot segment nor '//': nothing to do (a profile showed the split and join).
  if (!path.includes('/.') && !(mergeSlashes && path.includes('//'))) return path
  const input = path.split('/')
  const output: string[] = []
  for (let i = 1; i < input.length; i++) {
    const segment = input[i] as string
    const last = i === input.length - 1
    if (segment === '.' || segment === '..') {
      if (segment === '..') output.pop()
      if (last) output.push('')
    } else if (segment === '' && mergeSlashes && !last) {
      // '//' collapses: an empty segment in the middle is dropped
    } else {
      output.push(segment)
    }
  }
  const joined = `/${output.join('/')}`
  return mergeSlashes ? joined.replace(/\/{2,}/g, '/') : joined
}

/** The path without `;` parameters of its segments (`/a;x=1/b;y` -> `/a/b`): Tomcat and Spring drop
 * them before they route, so the gateway matches and locks as they would. */
function withoutParameters(path: string): string {
  if (!path.includes(';')) return path
  return path
    .split('/')
    .map((segment) => {
      const semi = segment.indexOf(';')
      return semi === -1 ? segment : segment.slice(0, semi)
    })
    .join('/')
}

/** The resource a canonical path names, for its read/write lock: escapes of printable ASCII decoded
 * (decodeForResource: `/users/bob%40x.org` is `/users/bob@x.org`), runs of '/' merged and a trailing
 * '/' dropped, so that every spelling an upstream serves as one resource is one lock (Express 5 and
 * Spring route `/docs/42/` and `/docs//42` as `/docs/42`, and decode `%40` into the id; the library's
 * middleware names resources the same way). */
export function resourceOf(path: string): string {
  const decoded = decodeForResource(path)
  const merged = decoded.includes('//') ? decoded.replace(/\/{2,}/g, '/') : decoded
  return merged.length > 1 && merged.endsWith('/') ? merged.slice(0, -1) : merged
}

/** Does `path` fall under `prefix` on a segment boundary? (`/api` matches `/api` and `/api/x`, not `/apix`.) */
export function underPrefix(path: string, prefix: string): boolean {
  if (prefix === '/' || path === prefix) return true
  return path.startsWith(prefix) && (prefix.endsWith('/') || path[prefix.length] === '/')
}

/** A route's path prefix is valid when it is already canonical (so it can match anything at all). */
export function isCanonicalPrefix(prefix: string, options: PathOptions = PATH_DEFAULTS): boolean {
  const target = canonicalTarget(prefix, 'GET', options)
  return target.kind === 'path' && target.path === prefix && target.match === prefix && target.query === ''
}

/** Host header value -> lower-case host without port or trailing dot ('Example.COM.:80' -> 'example.com');
 * undefined when it is not a valid host. */
export function normalizeHost(raw: string | undefined): string | undefined {
  if (raw === undefined) return undefined
  let host = raw.trim().toLowerCase()
  if (host.startsWith('[')) {
    const end = host.indexOf(']')
    if (end < 0) return undefined
    const rest = host.slice(end + 1)
    if (rest !== '' && !/^:\d{0,5}$/.test(rest)) return undefined
    return host.slice(0, end + 1)
  }
  const colon = host.indexOf(':')
  if (colon !== -1) {
    if (!/^\d{0,5}$/.test(host.slice(colon + 1))) return undefined
    host = host.slice(0, colon)
  }
  if (host.endsWith('.')) host = host.slice(0, -1)
  if (!/^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?)*$/.test(host))
    return undefined
  return host
}
