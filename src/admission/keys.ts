// Bucket keys from untrusted input (header values, paths, tenant ids): normalised, bounded, and
// unable to name another policy's bucket.
import { createHash } from 'node:crypto'

export const GLOBAL_KEY = '*'
export const DEFAULT_BUCKET = '-'
/** Keys longer than this (after trimming) are replaced by their digest before any use. */
const MAX_KEY_LENGTH = 256

/** Normalise an untrusted key (header value, path, tenant id): first of repeated values, trimmed,
 * empty -> DEFAULT_BUCKET, over 256 chars -> `sha256:<digest>`. Never throws. */
export function normalizeKey(raw: unknown): string {
  let value = Array.isArray(raw) ? raw[0] : raw
  if (typeof value === 'number') value = String(value)
  if (typeof value !== 'string') return DEFAULT_BUCKET
  const trimmed = value.trim()
  if (trimmed.length === 0) return DEFAULT_BUCKET
  if (trimmed.length <= MAX_KEY_LENGTH) return trimmed
  return `sha256:${createHash('sha256').update(trimmed, 'utf8').digest('base64url')}`
}

/** `<policy>:<key>` with ':' and '%' escaped in the key, so no key can name another policy's bucket
 * (policy names cannot contain '%'). */
export function bucketName(policy: string, key: string): string {
  return `${policy}:${key.replace(/[%:]/g, encodeURIComponent)}`
}

/**
 * A path's percent-escapes of printable ASCII decoded, and the rest upper-cased, for naming the
 * resource of a lock: `/users/bob%40x.org` and `/users/bob@x.org`, `/docs/4%32` and `/docs/42`,
 * `%c3%a9` and `%C3%A9` are one resource, as Express and Spring decode them into one id. `%2F`,
 * `%5C` and `%25` stay escaped: decoding them would change what the path says.
 */
export function decodeForResource(path: string): string {
  if (!path.includes('%')) return path
  return path.replace(/%([0-9A-Fa-f]{2})/g, (escape, hex: string) => {
    const code = Number.parseInt(hex, 16)
    const keep = code < 0x21 || code > 0x7e || code === 0x2f || code === 0x5c || code === 0x25
    return keep ? escape.toUpperCase() : String.fromCharCode(code)
  })
}

/** Normalise a request path into a resource name: `/docs//42/../42/` -> `/docs/42`, escapes
 * decoded as decodeForResource() does. */
export function normalizePath(path: string): string {
  let pathname: string
  try {
    // Concatenated, not resolved against a base: '//host/x' must stay a path, not become a host.
    pathname = new URL(`http://resource.invalid${path.startsWith('/') ? '' : '/'}${path}`).pathname
  } catch {
    return normalizeKey(path)
  }
  const collapsed = decodeForResource(pathname).replace(/\/{2,}/g, '/')
  return normalizeKey(collapsed.length > 1 ? collapsed.replace(/\/$/, '') : collapsed)
}

/** The first value of a header the client may have repeated (`T, T` or two lines: `T`). */
export function firstValue(raw: string | string[] | undefined): string | undefined {
  const value = Array.isArray(raw) ? raw[0] : raw
  if (value === undefined) return undefined
  const comma = value.indexOf(',')
  return (comma === -1 ? value : value.slice(0, comma)).trim()
}

const warnedForwarded = new Set<string>()

/**
 * express-rate-limit's ERR_ERL_UNEXPECTED_X_FORWARDED_FOR: a request carries X-Forwarded-For, yet the
 * address `byIp()` buckets by is the connection's own, so the framework did not take the client from
 * the header (its trust-proxy setting is off, or does not trust this proxy): every client behind that
 * proxy shares one bucket. Warned once per process and framework (process 'warning', code
 * TOLLGATE_UNTRUSTED_X_FORWARDED_FOR); nothing else changes.
 */
export function warnUntrustedForwarded(
  framework: string,
  headers: Record<string, unknown> | undefined,
  address: string | undefined,
  socketAddress: string | undefined,
  setting: string,
): void {
  if (warnedForwarded.has(framework) || headers?.['x-forwarded-for'] === undefined) return
  if (address !== socketAddress) return // taken from the header: a trusted proxy
  warnedForwarded.add(framework)
  process.emitWarning(
    `tollgate byIp(): a request carries X-Forwarded-For but the address used is the connection's own ` +
      `(${setting} is off or does not trust this proxy), so every client behind that proxy shares one ` +
      'bucket. Trust the proxy if one sits in front of this app; leave it off if clients connect ' +
      'directly (then the header is theirs to forge).',
    { code: 'TOLLGATE_UNTRUSTED_X_FORWARDED_FOR' },
  )
}
