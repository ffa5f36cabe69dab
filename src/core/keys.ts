// Keys and channel of a primitive: `<prefix>:{<kind>:<encoded name>}:<part>`, the name encoded to sit
// in a hash tag (G8) and bounded in size.
import { createHash } from 'node:crypto'

/** Encoded names longer than this are replaced by a digest, so keys stay small whatever the input. */
export const MAX_ENCODED_NAME = 200

// Braces would end or open the hash tag; '%' is the escape itself; control bytes, spaces and
// DEL make keys unreadable in redis-cli and logs.
const UNSAFE = /[{}%\s\p{Cc}]/gu

/**
 * Encode a user-supplied name so it can sit inside a hash tag (G8): `{`, `}`, `%`, whitespace and
 * control bytes are percent-encoded; a result longer than {@link MAX_ENCODED_NAME} becomes
 * `#` + the SHA-256 of the name (base64url), so a 64 kB tenant id costs 44 bytes of key.
 */
export function encodeName(name: string): string {
  const encoded = name.replace(UNSAFE, encodeURIComponent)
  if (encoded.length <= MAX_ENCODED_NAME) return encoded
  return `#${createHash('sha256').update(name, 'utf8').digest('base64url')}`
}

/** The keys and channel of one primitive: `<prefix>:{<kind>:<encoded name>}:<part>`. */
export interface KeySpace {
  /** The user's name, unencoded (for errors and events). */
  readonly name: string
  /** `<prefix>:{<kind>:<encoded name>}`: every key of the primitive starts with it. */
  readonly base: string
  /** Pub/sub channel for wake-ups of this primitive. */
  readonly channel: string
  key(part: string): string
}

export function keySpace(prefix: string, kind: string, name: string): KeySpace {
  const base = `${prefix}:{${kind}:${encodeName(name)}}`
  return { name, base, channel: `${base}:wake`, key: (part) => `${base}:${part}` }
}
